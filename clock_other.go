//go:build !linux

package leasehold

import "time"

// suspendedTime is unknown off Linux: Go's monotonic clock is all there is.
func suspendedTime() time.Duration { return 0 }

// wallShift is not needed where suspendedTime costs nothing.
var wallShift func(time.Time) time.Duration
