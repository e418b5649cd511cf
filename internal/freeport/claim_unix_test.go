//go:build unix

package freeport

import (
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

// TestPickSkipsAPortAnotherProcessClaimed: a port whose lock file is locked
// elsewhere (here by another open file description, as another process's
// would be) is not handed out; the control is the same port once that lock
// is gone, claimed by this process and then skipped by a second claimant.
func TestPickSkipsAPortAnotherProcessClaimed(t *testing.T) {
	old := claimDir
	claimDir = t.TempDir()
	t.Cleanup(func() { claimDir = old })
	const port = 12345
	other, err := os.OpenFile(filepath.Join(claimDir, strconv.Itoa(port)), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(other.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	got := claim(port)
	mu.Unlock()
	if got {
		t.Fatalf("claim(%d) while another holds its lock: true, want false", port)
	}
	other.Close() // the other process exits
	mu.Lock()
	got = claim(port)
	mu.Unlock()
	if !got {
		t.Fatalf("claim(%d) once the other lock is gone: false, want true", port)
	}
	again, err := os.OpenFile(filepath.Join(claimDir, strconv.Itoa(port)), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if err := syscall.Flock(int(again.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err == nil {
		t.Fatalf("after claim(%d), another claimant could lock its file", port)
	}
}
