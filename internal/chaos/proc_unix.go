//go:build unix

package chaos

import (
	"os"
	"syscall"
)

func platformSupported() error { return nil }

func signalStop(p *os.Process) error { return p.Signal(syscall.SIGSTOP) }

func signalCont(p *os.Process) error { return p.Signal(syscall.SIGCONT) }
