package leasehold

import "time"

// Clock is the holder's own clock. The elector and the lock read it to decide
// when to stop trusting a term (safeUntil) and when to renew; they never use it
// to judge expiry, which only the store's clock decides.
//
// Now must carry a monotonic reading (as time.Now does): every deadline is a
// difference of two Now values. The default is the system clock. Tests inject a
// clock only to model skew or rate drift; the lease loop's own unit tests use
// the system clock inside testing/synctest, where time is virtual.
type Clock interface {
	Now() time.Time
	// NewTimer returns a timer that fires once, d from now on this clock.
	NewTimer(d time.Duration) Timer
}

// Timer is a one-shot timer of a Clock, shaped like *time.Timer.
type Timer interface {
	C() <-chan time.Time
	// Stop prevents the timer from firing; see time.Timer.Stop.
	Stop() bool
	// Reset makes the timer fire d from now; see time.Timer.Reset.
	Reset(d time.Duration) bool
}

// SystemClock returns the process's monotonic clock.
func SystemClock() Clock { return systemClock{} }

type systemClock struct{}

func (systemClock) Now() time.Time                 { return time.Now() }
func (systemClock) NewTimer(d time.Duration) Timer { return systemTimer{time.NewTimer(d)} }

type systemTimer struct{ t *time.Timer }

func (t systemTimer) C() <-chan time.Time        { return t.t.C }
func (t systemTimer) Stop() bool                 { return t.t.Stop() }
func (t systemTimer) Reset(d time.Duration) bool { return t.t.Reset(d) }
