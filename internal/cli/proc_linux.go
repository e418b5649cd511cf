//go:build linux

package cli

import "syscall"

// childAttr puts the command in a process group of its own (so that its
// whole group, grandchildren included, can be signalled at once) and asks
// the kernel to SIGKILL it if its watchdog dies (the parent-death signal).
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
