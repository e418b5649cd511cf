//go:build !unix

package cli

import (
	"errors"
	"syscall"
	"time"
)

// On systems without process groups and signals, `leasehold run` and the
// demo are not available; the other commands are.
const supervisorSupported = false

var errUnsupported = errors.New("leasehold run needs process groups and signals (Linux or another Unix)")

func monoNow() int64                               { return time.Now().UnixNano() }
func watchdogAttr() *syscall.SysProcAttr           { return nil }
func childAttr() *syscall.SysProcAttr              { return nil }
func killGroup(pgid int, sig syscall.Signal) error { return errUnsupported }
func closeOnExec(fd int)                           {}
