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

// clockRead reads a clock with a raw system call: clock_gettime never
// blocks, so the scheduler need not be told (Syscall's bookkeeping cost
// about a third of the call here).
func clockRead(id uintptr) (time.Duration, bool) {
	var ts syscall.Timespec
	if _, _, errno := syscall.RawSyscall(syscall.SYS_CLOCK_GETTIME, id, uintptr(unsafe.Pointer(&ts)), 0); errno != 0 {
		return 0, false
	}
	return time.Duration(ts.Nano()), true
}

// bootOffset is CLOCK_BOOTTIME - CLOCK_MONOTONIC: the time the host has been
// suspended since it booted. The two clocks cannot be read at once, and a
// thread preempted between the reads (common on a loaded host) would see the
// gap as a suspend, so the boot clock is read between two monotonic reads and
// the tightest of a few such brackets is kept: its error is at most half its
// width, microseconds unless every try was preempted.
func bootOffset() (time.Duration, bool) {
	best, bestWidth := time.Duration(0), time.Duration(-1)
	for range bracketTries {
		m1, ok1 := clockRead(clockMonotonic)
		b, ok2 := clockRead(clockBoottime)
		m2, ok3 := clockRead(clockMonotonic)
		if !ok1 || !ok2 || !ok3 {
			return 0, false
		}
		width := m2 - m1
		if bestWidth < 0 || width < bestWidth {
			best, bestWidth = b-m1-width/2, width
		}
		if width < tightBracket {
			break
		}
	}
	return best, true
}

const (
	bracketTries = 5
	tightBracket = 100 * time.Microsecond
)

var startOffset, haveBoottime = bootOffset()

// shiftRef is the reading wallShift measures from.
var shiftRef = time.Now()

// wallShift is how far the wall clock has moved against Go's monotonic
// clock since the process started, as of now (a time.Now value: both
// readings come from it). Linux adds a suspend's length to the wall clock
// and to CLOCK_BOOTTIME at the same instant and not to CLOCK_MONOTONIC, so
// a suspend moves this by exactly as much as it moves suspendedTime; so
// does a step of the wall clock (settimeofday, a leap second), which costs
// one needless read. NTP's slewing moves both clocks alike. Round(0) drops
// the monotonic reading, so that Sub compares the wall clocks.
func wallShift(now time.Time) time.Duration {
	return now.Round(0).Sub(shiftRef.Round(0)) - now.Sub(shiftRef)
}

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
