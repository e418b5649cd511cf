package leasehold

import (
	"syscall"
	"time"
	"unsafe"
)

const (
	clockMonotonic = 1 // CLOCK_MONOTONIC: stops while the host is suspended
	clockBoottime  = 7 // CLOCK_BOOTTIME: counts the suspend too
)

func clockRead(id uintptr) (time.Duration, bool) {
	var ts syscall.Timespec
	if _, _, errno := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, id, uintptr(unsafe.Pointer(&ts)), 0); errno != 0 {
		return 0, false
	}
	return time.Duration(ts.Nano()), true
}

// bootOffset is CLOCK_BOOTTIME - CLOCK_MONOTONIC: the time the host has been
// suspended since it booted.
func bootOffset() (time.Duration, bool) {
	mono, ok1 := clockRead(clockMonotonic)
	boot, ok2 := clockRead(clockBoottime)
	return boot - mono, ok1 && ok2
}

var startOffset, haveBoottime = bootOffset()

// suspendedTime is the time the host has spent suspended since the process
// started.
func suspendedTime() time.Duration {
	if !haveBoottime {
		return 0
	}
	off, ok := bootOffset()
	if !ok {
		return 0
	}
	return off - startOffset
}
