package leasehold

import (
	"sync"
	"time"
)

// deadlines calls each term's function at the term's deadline, with one
// timer for all the terms of a holdConfig (a Lock's, a Semaphore's), armed
// at the earliest deadline pending. Arming a timer that becomes the earliest
// of its thread's makes the Go runtime wake an idle thread, which cost about
// 15 µs a cycle of a Lock on Redis on a 2-core VM (BENCHMARKS.md). A term
// that ends before its deadline leaves the timer armed; the next term, whose
// deadline is later, then arms nothing, and the timer, when it fires, finds
// nothing due and arms itself for the earliest term still pending, if any.
// So a Lock that cycles arms a timer about once per lease, not once per term,
// and no function is ever called later than its deadline.
type deadlines struct {
	clock afterFuncClock

	mu      sync.Mutex
	pending map[*deadline]struct{}
	armed   bool
	armedAt time.Time // when the armed timer fires, on clock
	timer   Timer
	gen     uint64 // a timer of an earlier arming does nothing
}

// deadline is one function waiting in deadlines.
type deadline struct {
	ds *deadlines
	at time.Time
	f  func()
}

func newDeadlines(clock afterFuncClock) *deadlines {
	return &deadlines{clock: clock, pending: map[*deadline]struct{}{}}
}

// at calls f, on a goroutine of the timer's, when the clock reaches when,
// unless the returned deadline is stopped first.
func (ds *deadlines) at(when time.Time, f func()) *deadline {
	now := ds.clock.Now()
	e := &deadline{ds: ds, at: when, f: f}
	ds.mu.Lock()
	defer ds.mu.Unlock()
	ds.pending[e] = struct{}{}
	if !ds.armed || e.at.Before(ds.armedAt) {
		ds.armLocked(now, e.at)
	}
	return e
}

// armLocked makes the timer fire at at, and no earlier timer fire.
func (ds *deadlines) armLocked(now, at time.Time) {
	if ds.armed {
		ds.timer.Stop()
	}
	ds.gen++
	gen := ds.gen
	ds.armed, ds.armedAt = true, at
	ds.timer = ds.clock.AfterFunc(at.Sub(now), func() { ds.fire(gen) })
}

// fire calls the functions due and arms the timer for the earliest of the
// others.
func (ds *deadlines) fire(gen uint64) {
	ds.mu.Lock()
	if gen != ds.gen || !ds.armed {
		ds.mu.Unlock()
		return
	}
	ds.armed = false
	// The clock's timer has just read the clock exactly, which Now then
	// shows (SystemClock's cache), a suspend included.
	now := ds.clock.Now()
	var due []*deadline
	var next time.Time
	for e := range ds.pending {
		switch {
		case !e.at.After(now):
			due = append(due, e)
			delete(ds.pending, e)
		case next.IsZero() || e.at.Before(next):
			next = e.at
		}
	}
	if !next.IsZero() {
		ds.armLocked(now, next)
	}
	ds.mu.Unlock()
	for _, e := range due {
		e.f()
	}
}

// Stop keeps f from being called; it reports whether it did (f had not been
// called, nor begun).
func (e *deadline) Stop() bool {
	e.ds.mu.Lock()
	defer e.ds.mu.Unlock()
	_, ok := e.ds.pending[e]
	delete(e.ds.pending, e)
	return ok
}
