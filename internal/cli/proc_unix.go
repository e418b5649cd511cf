//go:build unix

package cli

import (
	"syscall"

	"golang.org/x/sys/unix"
)

const supervisorSupported = true

// monoNow is the host's CLOCK_MONOTONIC in nanoseconds: one clock for every
// process on the host (unlike the monotonic reading of a time.Time, whose
// origin is private to each process), so that `run` and its watchdog agree on
// an absolute deadline without counting the delay of the message that
// carries it.
func monoNow() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic("leasehold: clock_gettime(CLOCK_MONOTONIC): " + err.Error())
	}
	return ts.Nano()
}

// watchdogAttr puts the watchdog in a process group of its own: a Ctrl-C or a
// Ctrl-Z at the terminal, or a SIGSTOP to run's group, does not reach it, so
// it can still kill the command on time while run itself is stopped.
func watchdogAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// killGroup sends sig to every process in the process group pgid.
func killGroup(pgid int, sig syscall.Signal) error {
	if pgid <= 0 {
		return syscall.ESRCH
	}
	return syscall.Kill(-pgid, sig)
}

// closeOnExec marks an inherited descriptor so that it does not leak into
// the processes this one starts.
func closeOnExec(fd int) { syscall.CloseOnExec(fd) }
