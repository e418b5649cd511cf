//go:build unix && !linux

package cli

import "syscall"

// childAttr puts the command in a process group of its own. This system has
// no parent-death signal: if the watchdog is killed with SIGKILL, run kills the
// command's group itself when it notices.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
