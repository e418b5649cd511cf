//go:build unix

package chaos

import (
	"os"
	"syscall"
)

func platformSupported() error { return nil }

func signalStop(p *os.Process) error { return p.Signal(syscall.SIGSTOP) }

func signalCont(p *os.Process) error { return p.Signal(syscall.SIGCONT) }

// signalQuit asks a Go process to print its goroutines to stderr and exit.
func signalQuit(p *os.Process) error { return p.Signal(syscall.SIGQUIT) }
