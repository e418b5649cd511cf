//go:build !unix

package chaos

import (
	"os"
	"os/exec"
)

func platformSupported() error { return errNotSupported }

func signalStop(*os.Process) error { return errNotSupported }

func signalCont(*os.Process) error { return errNotSupported }

func setProcAttr(*exec.Cmd) {}

func signalQuit(*os.Process) error { return errNotSupported }
