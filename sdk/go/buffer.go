package sluice

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// segmentBytes: the write segment is rotated beyond this size, so a sent segment can be deleted
// while new events go to the next one.
const segmentBytes = 4 << 20

// diskBuffer is the emitter's optional on-disk queue: append-only NDJSON segment files
// (`<id>.ndjson`, one event a line, fsynced when written) and, beside each, how far it has been
// sent (`<id>.sent`, a byte offset, written after each acknowledged batch). A segment wholly sent
// is deleted. On open, what the files hold past their offsets is what a previous emitter left.
type diskBuffer struct {
	dir string
	max int64

	mu    sync.Mutex
	segs  []*segment // oldest first; the last one is written
	bytes int64      // total size of the segment files
	w     *os.File   // the last segment, open for appends (nil until the first append)
}

// segment is one file and its progress.
type segment struct {
	id   uint64
	size int64 // complete lines written
	sent int64 // bytes acknowledged (or dropped for good)
}

func (b *diskBuffer) path(id uint64, ext string) string {
	return filepath.Join(b.dir, fmt.Sprintf("%016d.%s", id, ext))
}

// openBuffer opens (creating) dir and returns the buffer and how many events it holds unsent.
func openBuffer(dir string, max int64) (*diskBuffer, int64, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, 0, fmt.Errorf("sluice: buffer directory: %w", err)
	}
	b := &diskBuffer{dir: dir, max: max}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, 0, fmt.Errorf("sluice: buffer directory: %w", err)
	}
	var ids []uint64
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".ndjson")
		if !ok {
			continue
		}
		if id, err := strconv.ParseUint(name, 10, 64); err == nil {
			ids = append(ids, id)
		}
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	var unsent int64
	for _, id := range ids {
		data, err := os.ReadFile(b.path(id, "ndjson"))
		if err != nil {
			return nil, 0, fmt.Errorf("sluice: buffer: %w", err)
		}
		// A line cut by a crash mid-write was never acknowledged to anyone: cut it off.
		size := int64(bytes.LastIndexByte(data, '\n') + 1)
		if size < int64(len(data)) {
			if err := os.Truncate(b.path(id, "ndjson"), size); err != nil {
				return nil, 0, fmt.Errorf("sluice: buffer: %w", err)
			}
		}
		seg := &segment{id: id, size: size, sent: readOffset(b.path(id, "sent"))}
		if seg.sent > size {
			seg.sent = size
		}
		if seg.sent == size {
			b.remove(seg)
			continue
		}
		unsent += int64(bytes.Count(data[seg.sent:size], []byte{'\n'}))
		b.segs = append(b.segs, seg)
		b.bytes += size
	}
	return b, unsent, nil
}

// readOffset reads a `.sent` file; absent or unreadable is 0 (resend: at least once).
func readOffset(path string) int64 {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	if err != nil || n < 0 {
		return 0
	}
	return n
}

func (b *diskBuffer) remove(seg *segment) {
	_ = os.Remove(b.path(seg.id, "ndjson"))
	_ = os.Remove(b.path(seg.id, "sent"))
}

// append writes lines at the end of the buffer (one write and an fsync); it returns how many
// of them fit under the cap (the first ones; the rest are the caller's `buffer_full` drops).
func (b *diskBuffer) append(lines [][]byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	fit, size := 0, int64(0)
	for _, l := range lines {
		if b.bytes+size+int64(len(l))+1 > b.max {
			break
		}
		size += int64(len(l)) + 1
		fit++
	}
	if fit == 0 {
		return 0, nil
	}
	if b.w == nil || b.segs[len(b.segs)-1].size >= segmentBytes {
		if err := b.rotate(); err != nil {
			return 0, err
		}
	}
	seg := b.segs[len(b.segs)-1]
	if _, err := b.w.Write(ndjson(lines[:fit])); err != nil {
		// The segment may now end in a partial line: start a new one (open cuts it later).
		_ = b.w.Close()
		b.w = nil
		return 0, fmt.Errorf("sluice: buffer write: %w", err)
	}
	if err := b.w.Sync(); err != nil {
		_ = b.w.Close()
		b.w = nil
		return 0, fmt.Errorf("sluice: buffer fsync: %w", err)
	}
	seg.size += size
	b.bytes += size
	return fit, nil
}

// rotate starts a new segment after the last one (held under mu).
func (b *diskBuffer) rotate() error {
	if b.w != nil {
		_ = b.w.Close()
		b.w = nil
	}
	var id uint64 = 1
	if n := len(b.segs); n > 0 {
		id = b.segs[n-1].id + 1
	}
	f, err := os.OpenFile(b.path(id, "ndjson"), os.O_CREATE|os.O_WRONLY|os.O_APPEND|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("sluice: buffer segment: %w", err)
	}
	b.w = f
	b.segs = append(b.segs, &segment{id: id})
	return nil
}

// bufferBatch is a run of lines read from one segment, [start, end) in bytes.
type bufferBatch struct {
	seg   uint64
	end   int64
	lines [][]byte
}

// next reads the oldest unsent lines: at most maxLines and maxBytes, from one segment.
func (b *diskBuffer) next(maxLines, maxBytes int) (bufferBatch, error) {
	b.mu.Lock()
	var seg *segment
	for _, s := range b.segs {
		if s.sent < s.size {
			seg = s
			break
		}
	}
	if seg == nil {
		b.mu.Unlock()
		return bufferBatch{}, nil
	}
	id, from, to := seg.id, seg.sent, seg.size
	b.mu.Unlock()
	if to-from > int64(maxBytes) {
		to = from + int64(maxBytes)
	}
	f, err := os.Open(b.path(id, "ndjson"))
	if err != nil {
		return bufferBatch{}, fmt.Errorf("sluice: buffer read: %w", err)
	}
	defer f.Close()
	data := make([]byte, to-from)
	if _, err := f.ReadAt(data, from); err != nil {
		return bufferBatch{}, fmt.Errorf("sluice: buffer read: %w", err)
	}
	out := bufferBatch{seg: id, end: from}
	for len(out.lines) < maxLines {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			break // the window cut a line: it comes with the next batch
		}
		out.lines = append(out.lines, data[:i])
		out.end += int64(i) + 1
		data = data[i+1:]
	}
	return out, nil
}

// ack records that a batch from next is done (delivered, or dropped for good); a segment wholly
// done and no longer written is deleted.
func (b *diskBuffer) ack(batch bufferBatch) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, s := range b.segs {
		if s.id != batch.seg {
			continue
		}
		s.sent = batch.end
		last := i == len(b.segs)-1
		// The segment being written is kept while small (more lines come to it).
		if s.sent >= s.size && (!last || b.w == nil || s.size >= segmentBytes) {
			if last && b.w != nil {
				_ = b.w.Close()
				b.w = nil
			}
			b.remove(s)
			b.bytes -= s.size
			b.segs = append(b.segs[:i], b.segs[i+1:]...)
			return nil
		}
		// Written by rename, so a crash leaves the old offset or the new one, never half.
		tmp := b.path(s.id, "sent.tmp")
		if err := os.WriteFile(tmp, []byte(strconv.FormatInt(s.sent, 10)), 0o644); err != nil {
			return fmt.Errorf("sluice: buffer offset: %w", err)
		}
		if err := os.Rename(tmp, b.path(s.id, "sent")); err != nil {
			return fmt.Errorf("sluice: buffer offset: %w", err)
		}
		return nil
	}
	return nil
}

// close closes the write segment.
func (b *diskBuffer) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.w != nil {
		_ = b.w.Close()
		b.w = nil
	}
}
