//go:build linux

package demo

import "syscall"

// nodeAttr: a process group of its own, and SIGKILL from the kernel if the
// demo dies, so that no node outlives it.
func nodeAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
