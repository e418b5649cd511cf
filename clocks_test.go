package leasehold_test

import (
	"time"

	"github.com/leasehold/leasehold"
)

// virtualClock is Go's own clock with an offset: inside testing/synctest its
// time is virtual. It models a node whose clock is skewed by off (the offset
// moves the node's wall-clock readings; durations are the same), and unlike
// SystemClock it reads no host clock, so host noise cannot move it.
type virtualClock struct{ off time.Duration }

func (c virtualClock) Now() time.Time { return time.Now().Add(c.off) }

func (c virtualClock) NewTimer(d time.Duration) leasehold.Timer {
	return virtualTimer{time.NewTimer(d)}
}

type virtualTimer struct{ t *time.Timer }

func (t virtualTimer) C() <-chan time.Time        { return t.t.C }
func (t virtualTimer) Stop() bool                 { return t.t.Stop() }
func (t virtualTimer) Reset(d time.Duration) bool { return t.t.Reset(d) }
