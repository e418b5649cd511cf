package zktest

import "syscall"

// sysProcAttr has the kernel kill a server if the test process dies without
// stopping it.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
