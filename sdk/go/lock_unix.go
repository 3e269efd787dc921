//go:build unix

package sluice

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// lockDir takes the buffer directory's `lock` (flock, exclusive, not waiting): one emitter per
// directory; the kernel releases it when the holder exits, however it dies.
func lockDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("sluice: buffer lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("sluice: the buffer directory %s is in use by another emitter (%w)", dir, err)
	}
	return f, nil
}
