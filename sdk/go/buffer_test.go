package sluice

import (
	"os"
	"path/filepath"
	"testing"
)

// A segment cut mid-line by a crash: the torn line is cut off at open, the complete ones are
// sent (from the cursor), and a new emitter writes to a new segment.
func TestBufferOpenCutsATornLineAndResumesAtTheCursor(t *testing.T) {
	dir := t.TempDir()
	seg := filepath.Join(dir, "seg-0000000003.ndjson")
	if err := os.WriteFile(seg, []byte("{\"type\":\"A\",\"id\":0}\n{\"type\":\"A\",\"id\":1}\n{\"type\":\"A\",\"id\":2}\n{\"type\":\"A\",\"i"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Segment 2 lies before the cursor's: wholly delivered.
	if err := os.WriteFile(filepath.Join(dir, "seg-0000000002.ndjson"), []byte("{\"type\":\"A\",\"id\":-1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cursor.json"), []byte(`{"seg":3,"off":20}`), 0o644); err != nil {
		t.Fatal(err)
	}
	b, unsent, err := openBuffer(dir, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer b.close()
	if unsent != 2 {
		t.Fatalf("unsent %d, want 2 (ids 1 and 2)", unsent)
	}
	if _, err := os.Stat(filepath.Join(dir, "seg-0000000002.ndjson")); !os.IsNotExist(err) {
		t.Fatalf("a segment before the cursor is kept: %v", err)
	}
	batch, err := b.next(10, 1<<20)
	if err != nil || len(batch.lines) != 2 || string(batch.lines[0]) != `{"type":"A","id":1}` {
		t.Fatalf("next: %q %v", batch.lines, err)
	}
	if n, err := b.append([][]byte{[]byte(`{"type":"A","id":3}`)}); n != 1 || err != nil {
		t.Fatalf("append: %d %v", n, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "seg-0000000004.ndjson")); err != nil {
		t.Fatalf("appends go to a new segment: %v", err)
	}
	if err := b.ack(batch); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(seg); !os.IsNotExist(err) {
		t.Fatalf("a wholly sent segment that is not written is deleted: %v", err)
	}
	batch, err = b.next(10, 1<<20)
	if err != nil || len(batch.lines) != 1 || string(batch.lines[0]) != `{"type":"A","id":3}` {
		t.Fatalf("next after ack: %q %v", batch.lines, err)
	}
}
