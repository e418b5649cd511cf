package chaos

import (
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/leasehold/leasehold"
)

// driftClock is a leasehold.Clock that is offset from the system clock and
// runs at a rate: after d of real time it has advanced rate×d. Its readings
// carry a monotonic reading (they are derived from time.Now with Add), so a
// difference of two readings is the elapsed time on this clock, as the core
// requires. The rate and a forward step can be changed while it runs (Set);
// pending timers are re-armed so that each fires when this clock reaches its
// target.
//
// A chaos node runs its elector on a driftClock to model clock skew (a
// constant offset, which leasehold must ignore: it only subtracts readings)
// and rate drift (a clock that runs fast or slow, which shifts the holder's
// safeUntil in real time).
type driftClock struct {
	mu     sync.Mutex
	base   time.Time // system reading at the last change
	virt   time.Time // this clock's reading at base
	rate   float64
	timers map[*driftTimer]struct{} // the armed timers
}

var _ leasehold.Clock = (*driftClock)(nil)

// newDriftClock returns a clock offset from the system clock by offset,
// running at rate (1 is real time; it must be positive and finite).
func newDriftClock(offset time.Duration, rate float64) (*driftClock, error) {
	if err := validRate(rate); err != nil {
		return nil, err
	}
	now := time.Now()
	return &driftClock{base: now, virt: now.Add(offset), rate: rate, timers: map[*driftTimer]struct{}{}}, nil
}

func validRate(rate float64) error {
	if !(rate > 0) || math.IsInf(rate, 0) || math.IsNaN(rate) {
		return fmt.Errorf("%w: clock rate %v must be a positive finite number", ErrInvalid, rate)
	}
	return nil
}

// Now returns this clock's reading.
func (c *driftClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nowLocked(time.Now())
}

func (c *driftClock) nowLocked(real time.Time) time.Time {
	return c.virt.Add(time.Duration(float64(real.Sub(c.base)) * c.rate))
}

// Rate returns the current rate.
func (c *driftClock) Rate() float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rate
}

// Set changes the rate from now on and steps the clock forward by step (a
// step must not be negative: a monotonic clock never goes back). Armed
// timers are re-armed for the new rate; a timer whose target the step
// passed fires at once.
func (c *driftClock) Set(rate float64, step time.Duration) error {
	if err := validRate(rate); err != nil {
		return err
	}
	if step < 0 {
		return fmt.Errorf("%w: clock step %v is negative; a monotonic clock only steps forward", ErrInvalid, step)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	real := time.Now()
	c.virt = c.nowLocked(real).Add(step)
	c.base = real
	c.rate = rate
	for t := range c.timers {
		t.armLocked(real)
	}
	return nil
}

// NewTimer returns a timer that fires when this clock has advanced d.
func (c *driftClock) NewTimer(d time.Duration) leasehold.Timer {
	t := &driftTimer{c: c, ch: make(chan time.Time, 1)}
	c.mu.Lock()
	defer c.mu.Unlock()
	real := time.Now()
	t.target = c.nowLocked(real).Add(d)
	c.timers[t] = struct{}{}
	t.armLocked(real)
	return t
}

// driftTimer fires when its clock reaches target. Like a time.Timer of Go
// 1.23 and later, Stop and Reset discard a value that was sent but not yet
// received, so a caller never reads a stale firing.
type driftTimer struct {
	c      *driftClock
	ch     chan time.Time
	target time.Time   // guarded by c.mu
	rt     *time.Timer // the real timer; guarded by c.mu
	gen    uint64      // incremented by every (re)arm and stop; guarded by c.mu
}

// armLocked (re)starts the real timer for the time left until target at the
// clock's current rate. c.mu is held.
func (t *driftTimer) armLocked(real time.Time) {
	if t.rt != nil {
		t.rt.Stop()
	}
	t.gen++
	gen := t.gen
	left := time.Duration(float64(t.target.Sub(t.c.nowLocked(real))) / t.c.rate)
	if left < 0 {
		left = 0
	}
	t.rt = time.AfterFunc(left, func() { t.fire(gen) })
}

func (t *driftTimer) fire(gen uint64) {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	if gen != t.gen {
		return // stopped or re-armed since
	}
	if _, armed := t.c.timers[t]; !armed {
		return
	}
	delete(t.c.timers, t)
	select {
	case t.ch <- t.c.nowLocked(time.Now()):
	default:
	}
}

func (t *driftTimer) C() <-chan time.Time { return t.ch }

func (t *driftTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	return t.stopLocked()
}

func (t *driftTimer) stopLocked() bool {
	_, armed := t.c.timers[t]
	delete(t.c.timers, t)
	t.gen++
	if t.rt != nil {
		t.rt.Stop()
	}
	select { // discard a value sent but not received
	case <-t.ch:
	default:
	}
	return armed
}

func (t *driftTimer) Reset(d time.Duration) bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := t.stopLocked()
	real := time.Now()
	t.target = t.c.nowLocked(real).Add(d)
	t.c.timers[t] = struct{}{}
	t.armLocked(real)
	return was
}
