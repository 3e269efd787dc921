package sluice

import (
	"bytes"
	"encoding/json"
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

// diskBuffer is the emitter's optional on-disk queue, in the SDKs' shared shape: append-only
// NDJSON segment files `seg-0000000001.ndjson` (one event a line, as sent; fsynced when
// written) and `cursor.json`, the first byte not yet delivered (`{"seg": N, "off": BYTES}`,
// replaced by rename after each acknowledged batch). A segment wholly sent is deleted. Appends
// always go to a new segment: one written by an earlier process is only read, its torn last
// line (the process died mid-write) cut off at open. One emitter at a time: `flock` on `lock`
// (released by the kernel when the process dies, even by SIGKILL).
type diskBuffer struct {
	dir  string
	max  int64
	lock *os.File

	mu     sync.Mutex
	segs   []*segment // oldest first; the last one is written
	nextID uint64     // the id of the next segment (never reused: the cursor names ids)
	bytes  int64      // total size of the segment files
	w      *os.File   // the last segment, open for appends (nil until the first append)
}

// segment is one file and its progress.
type segment struct {
	id   uint64
	size int64 // complete lines written
	sent int64 // bytes acknowledged (or dropped for good)
}

func (b *diskBuffer) path(id uint64) string {
	return filepath.Join(b.dir, fmt.Sprintf("seg-%010d.ndjson", id))
}

// bufferCursor is `cursor.json`: the first byte not yet delivered.
type bufferCursor struct {
	Seg uint64 `json:"seg"`
	Off int64  `json:"off"`
}

// openBuffer opens (creating) dir and returns the buffer and how many events it holds unsent.
func openBuffer(dir string, maxBytes int64) (*diskBuffer, int64, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, 0, fmt.Errorf("sluice: buffer directory: %w", err)
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, 0, err
	}
	b := &diskBuffer{dir: dir, max: maxBytes, lock: lock}
	entries, err := os.ReadDir(dir)
	if err != nil {
		b.close()
		return nil, 0, fmt.Errorf("sluice: buffer directory: %w", err)
	}
	var ids []uint64
	for _, e := range entries {
		name, ok := strings.CutSuffix(strings.TrimPrefix(e.Name(), "seg-"), ".ndjson")
		if !ok || !strings.HasPrefix(e.Name(), "seg-") {
			continue
		}
		if id, err := strconv.ParseUint(name, 10, 64); err == nil {
			ids = append(ids, id)
		}
	}
	cur := b.readCursor()
	b.nextID = cur.Seg + 1
	for _, id := range ids {
		b.nextID = max(b.nextID, id+1)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	var unsent int64
	for _, id := range ids {
		if id < cur.Seg {
			_ = os.Remove(b.path(id)) // wholly delivered before the cursor's segment
			continue
		}
		data, err := os.ReadFile(b.path(id))
		if err != nil {
			b.close()
			return nil, 0, fmt.Errorf("sluice: buffer: %w", err)
		}
		// A line cut by a crash mid-write was never acknowledged to anyone: cut it off.
		size := int64(bytes.LastIndexByte(data, '\n') + 1)
		if size < int64(len(data)) {
			if err := os.Truncate(b.path(id), size); err != nil {
				b.close()
				return nil, 0, fmt.Errorf("sluice: buffer: %w", err)
			}
		}
		seg := &segment{id: id, size: size}
		if id == cur.Seg {
			seg.sent = min(max(cur.Off, 0), size)
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

// readCursor reads `cursor.json`; absent or unreadable is the start (resend: at least once).
func (b *diskBuffer) readCursor() bufferCursor {
	var c bufferCursor
	data, err := os.ReadFile(filepath.Join(b.dir, "cursor.json"))
	if err != nil || json.Unmarshal(data, &c) != nil {
		return bufferCursor{}
	}
	return c
}

// writeCursor replaces `cursor.json` by rename, so a crash leaves the old one or the new one.
func (b *diskBuffer) writeCursor(c bufferCursor) error {
	data, _ := json.Marshal(c) // two numbers: cannot fail
	tmp := filepath.Join(b.dir, "cursor.json.tmp")
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return fmt.Errorf("sluice: buffer cursor: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(b.dir, "cursor.json")); err != nil {
		return fmt.Errorf("sluice: buffer cursor: %w", err)
	}
	return nil
}

func (b *diskBuffer) remove(seg *segment) { _ = os.Remove(b.path(seg.id)) }

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
	id := b.nextID
	b.nextID++
	f, err := os.OpenFile(b.path(id), os.O_CREATE|os.O_WRONLY|os.O_APPEND|os.O_EXCL, 0o644)
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
	f, err := os.Open(b.path(id))
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

// ack records that a batch from next is done (delivered, or dropped for good): the cursor moves
// past it; a segment wholly done and no longer written is deleted.
func (b *diskBuffer) ack(batch bufferBatch) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, s := range b.segs {
		if s.id != batch.seg {
			continue
		}
		s.sent = batch.end
		if err := b.writeCursor(bufferCursor{Seg: s.id, Off: s.sent}); err != nil {
			return err
		}
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
	if b.lock != nil {
		_ = b.lock.Close() // releases the flock
		b.lock = nil
	}
}
