package leasehold

import (
	"sync"
	"time"
)

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

// SystemClock returns the process's clock: Go's monotonic clock, plus the
// time the host has spent suspended since the process started, where the
// system can tell (Linux: CLOCK_BOOTTIME - CLOCK_MONOTONIC). Go's monotonic
// clock stops while the host sleeps, so without that a holder resumed after a
// suspend would go on trusting a term the store expired meanwhile. Its timers
// notice a suspend within suspendCheck of resuming.
func SystemClock() Clock {
	return &suspendAwareClock{read: suspendedTime, shift: wallShift}
}

// suspendCheck bounds how late a timer of the system clock fires after the
// host resumes from a suspend that crossed its deadline.
const suspendCheck = time.Second

// suspendFloor: offsets below it are noise of reading two clocks one after
// the other, not a suspend, and are ignored so Now stays exact.
const suspendFloor = 10 * time.Millisecond

// afterFuncClock is a Clock that can also call a function when a timer
// fires, as time.AfterFunc does, with no goroutine waiting meanwhile. A term
// that is not renewed (a Lock without KeepAlive) needs only its deadline, and
// on such a clock keeps no goroutine of its own; on any other Clock a
// goroutine waits on the timer's channel.
type afterFuncClock interface {
	Clock
	// AfterFunc calls f in its own goroutine d from now on this clock,
	// unless the returned timer is stopped first. Its C is nil.
	AfterFunc(d time.Duration, f func()) Timer
}

type suspendAwareClock struct {
	read func() time.Duration // time suspended since start, or 0 if unknown: exact, but system calls
	// shift, if not nil, is a cheap reading taken from a time.Now value
	// that moves by as much as read whenever the host is suspended (on
	// Linux: the wall clock minus Go's monotonic clock). Now calls read
	// only when shift moved, or rereadEvery after its last read; without
	// shift every Now calls read.
	shift func(now time.Time) time.Duration

	mu      sync.Mutex
	max     time.Duration // never goes back
	readAt  time.Time     // when read was last called; zero: never
	shiftAt time.Duration // shift at readAt
}

// rereadEvery bounds, in Go's monotonic time, how long Now goes on using
// the suspended time it last read while shift has not moved: a host whose
// wall clock was stepped back by exactly a suspend's length as it resumed
// is seen that much later. The timers read it afresh at every check.
const rereadEvery = 10 * time.Millisecond

// shiftNoise: shift moves by this much between two readings without a
// suspend (time.Now reads the wall and the monotonic clocks one after the
// other, and a thread can be preempted between them).
const shiftNoise = time.Millisecond

func newSuspendAwareClock(read func() time.Duration) *suspendAwareClock {
	return &suspendAwareClock{read: read}
}

// suspendedAt is the time suspended as of now (a time.Now value): the last
// reading if shift has not moved since it and it is recent, unless exact;
// read afresh otherwise.
func (c *suspendAwareClock) suspendedAt(now time.Time, exact bool) time.Duration {
	var sh time.Duration
	if c.shift != nil {
		sh = c.shift(now)
		if !exact {
			c.mu.Lock()
			if !c.readAt.IsZero() && now.Sub(c.readAt) < rereadEvery && (sh-c.shiftAt).Abs() < shiftNoise {
				d := c.max
				c.mu.Unlock()
				return d
			}
			c.mu.Unlock()
		}
	}
	d := c.read()
	if d < suspendFloor {
		d = 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if d > c.max {
		c.max = d
	}
	c.readAt, c.shiftAt = now, sh
	return c.max
}

// Now reads the host's suspended time only when it may have changed (see
// shift): a system call costs microseconds on a virtual machine, and a lock
// cycle reads the clock several times.
func (c *suspendAwareClock) Now() time.Time {
	now := time.Now()
	return now.Add(c.suspendedAt(now, false))
}

// exactNow is Now with the suspended time read afresh.
func (c *suspendAwareClock) exactNow() time.Time {
	now := time.Now()
	return now.Add(c.suspendedAt(now, true))
}

func (c *suspendAwareClock) NewTimer(d time.Duration) Timer {
	t := &suspendAwareTimer{clock: c, c: make(chan time.Time, 1)}
	t.Reset(d)
	return t
}

// AfterFunc implements afterFuncClock: f runs when the clock reaches the
// deadline, a suspend included, as NewTimer's channel would fire.
func (c *suspendAwareClock) AfterFunc(d time.Duration, f func()) Timer {
	t := &suspendAwareTimer{clock: c, fn: f}
	t.Reset(d)
	return t
}

// suspendAwareTimer fires when its clock reaches the deadline. It sleeps on
// Go's timers in steps of at most suspendCheck, checking the clock at each,
// so a suspend that crosses the deadline is seen within a step of resuming.
// Like time.Timer since Go 1.23, Stop and Reset discard an unread fire.
type suspendAwareTimer struct {
	clock *suspendAwareClock
	c     chan time.Time // nil for AfterFunc
	fn    func()         // AfterFunc's function, or nil

	mu       sync.Mutex
	deadline time.Time
	step     *time.Timer
	gen      uint64 // a step of an older Reset does nothing
	active   bool
}

func (t *suspendAwareTimer) C() <-chan time.Time { return t.c }

func (t *suspendAwareTimer) Stop() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	was := t.active
	t.stopLocked()
	return was
}

func (t *suspendAwareTimer) stopLocked() {
	t.active = false
	t.gen++
	if t.step != nil {
		t.step.Stop()
		t.step = nil
	}
	if t.c != nil {
		select {
		case <-t.c:
		default:
		}
	}
}

func (t *suspendAwareTimer) Reset(d time.Duration) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	was := t.active
	t.stopLocked()
	t.active = true
	t.deadline = t.clock.Now().Add(d)
	t.armLocked(d)
	return was
}

func (t *suspendAwareTimer) armLocked(left time.Duration) {
	gen := t.gen
	t.step = time.AfterFunc(min(left, suspendCheck), func() { t.check(gen) })
}

func (t *suspendAwareTimer) check(gen uint64) {
	t.mu.Lock()
	if gen != t.gen || !t.active {
		t.mu.Unlock()
		return
	}
	now := t.clock.exactNow()
	if left := t.deadline.Sub(now); left > 0 {
		t.armLocked(left)
		t.mu.Unlock()
		return
	}
	t.active = false
	fn := t.fn
	if fn == nil {
		select {
		case t.c <- now:
		default:
		}
	}
	t.mu.Unlock()
	if fn != nil {
		fn() // on time.AfterFunc's goroutine, as time.AfterFunc would
	}
}
