//go:build !linux

package kubetest

import "syscall"

func sysProcAttr() *syscall.SysProcAttr { return nil }
