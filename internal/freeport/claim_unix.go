//go:build unix

package freeport

import (
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// claims holds the lock files of the ports this process handed out, open
// (and so locked) until it exits.
var claims = map[int]*os.File{}

// claimDir is where the lock files live; a test may point it elsewhere.
var claimDir = filepath.Join(os.TempDir(), "leasehold-freeport")

// claim takes port's lock file for this process, or reports that another
// process holds it. Where no lock file can be made, it claims the port:
// the listen check alone decides, as before locks. Called with mu held.
func claim(port int) bool {
	if err := os.MkdirAll(claimDir, 0o777); err != nil {
		return true
	}
	f, err := os.OpenFile(filepath.Join(claimDir, strconv.Itoa(port)), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return true
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return false
	}
	claims[port] = f
	return true
}
