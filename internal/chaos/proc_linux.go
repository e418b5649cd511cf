package chaos

import (
	"os/exec"
	"syscall"
)

// setProcAttr makes the kernel kill a node if the harness dies, so that no
// node outlives a crashed run.
func setProcAttr(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
