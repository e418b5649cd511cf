//go:build unix && !linux

package demo

import "syscall"

// nodeAttr: a process group of its own.
func nodeAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
