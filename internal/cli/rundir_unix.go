//go:build unix

package cli

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// run keeps the command's safe-until file in a private directory under
// $TMPDIR. A run killed with SIGKILL cannot remove it, so each run holds an
// exclusive flock on its directory for as long as it lives (the kernel drops
// the lock when the process dies, however it dies), and each new run removes
// the directories whose lock it can take: those of dead runs. A PID would not
// do: PIDs are reused, and a /tmp shared across PID namespaces sees PIDs of
// other namespaces.
const (
	runDirPrefix  = "leasehold-run-"
	runDirPending = ".leasehold-run-new-" // created, not yet locked: never swept
)

// makeRunDir sweeps the directories of dead runs and creates this run's,
// locked. release unlocks and removes it.
func makeRunDir() (dir string, release func(), err error) {
	sweepRunDirs(os.TempDir())
	// Created under a name the sweep ignores, locked, then renamed (the lock
	// is on the inode, so the rename keeps it): a sweeping run can never take
	// the lock of a directory between its creation and its locking.
	pending, err := os.MkdirTemp("", runDirPending+"*")
	if err != nil {
		return "", nil, err
	}
	f, err := os.Open(pending)
	if err == nil {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err != nil {
			f.Close()
		}
	}
	if err != nil {
		os.Remove(pending)
		return "", nil, err
	}
	dir = filepath.Join(filepath.Dir(pending), runDirPrefix+strings.TrimPrefix(filepath.Base(pending), runDirPending))
	if err := os.Rename(pending, dir); err != nil {
		f.Close()
		os.Remove(pending)
		return "", nil, err
	}
	return dir, func() {
		os.RemoveAll(dir)
		f.Close()
	}, nil
}

// sweepRunDirs removes the run directories under tmp whose lock is free: their
// run has died. Directories of other users cannot be opened and are left alone.
func sweepRunDirs(tmp string) {
	dirs, _ := filepath.Glob(filepath.Join(tmp, runDirPrefix+"*"))
	for _, d := range dirs {
		f, err := os.Open(d)
		if err != nil {
			continue
		}
		if fi, err := f.Stat(); err == nil && fi.IsDir() &&
			syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
			os.RemoveAll(d)
		}
		f.Close()
	}
}
