package leasehold

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/leasehold/leasehold/store"
)

// EventKind says what an Event reports.
type EventKind int

const (
	// EventAcquireAttempt: one acquire request returned. Err is nil when it
	// granted a term, matches store.ErrHeld when another holder's term is live
	// (Record is that term), and is anything else when the outcome is unknown.
	EventAcquireAttempt EventKind = iota + 1
	// EventAcquired: this node now holds Term and trusts it until SafeUntil.
	EventAcquired
	// EventRenewed: a renewal of Term succeeded; SafeUntil moved.
	EventRenewed
	// EventRenewFailed: a renewal of Term failed with Err; it will be retried
	// until SafeUntil.
	EventRenewFailed
	// EventLost: this node stopped holding Term; Err says why
	// (ErrSafeUntilPassed, ErrLeaseLost, ErrReleased, or the context's cause).
	EventLost
	// EventReleased: the release request of Term returned (Err nil or not).
	EventReleased
	// EventHolderObserved: a candidate saw another live holder (Record),
	// different from the last one it saw.
	EventHolderObserved
)

var eventKindNames = map[EventKind]string{
	EventAcquireAttempt: "acquire-attempt",
	EventAcquired:       "acquired",
	EventRenewed:        "renewed",
	EventRenewFailed:    "renew-failed",
	EventLost:           "lost",
	EventReleased:       "released",
	EventHolderObserved: "holder-observed",
}

func (k EventKind) String() string {
	if s, ok := eventKindNames[k]; ok {
		return s
	}
	return "unknown"
}

// Event reports one step of an Elector, a Lock or a Keeper, to
// Config.OnEvent. The events of one term come in order: EventAcquired
// first, then its EventRenewed and EventRenewFailed, then EventLost, then
// EventReleased (if a release was sent); nothing of the term follows them.
// OnEvent is called for one event at a time, never concurrently, so the
// events of all terms together come in the order they were reported.
type Event struct {
	Kind EventKind
	Name string
	// Term is the term this event concerns (zero for a failed acquire).
	Term store.Term
	// Record is the store's answer, where there was one.
	Record store.Record
	// SafeUntil is the holder's local deadline after this event, on its Clock.
	SafeUntil time.Time
	// Latency is the round trip of the request this event reports, measured
	// from when it was sent.
	Latency time.Duration
	Err     error
}

// LossReason names why a term ended, for logs and metrics: "expired" (no
// renewal before safeUntil), "lost" (the store said the term is gone),
// "released", "handed-over" (ended on a hand-over request, see Handover),
// "max-hold" (Config.MaxHold reached), "shutdown" (the caller's context
// ended), or "error".
func LossReason(err error) string {
	switch {
	case errors.Is(err, ErrSafeUntilPassed):
		return "expired"
	case errors.Is(err, ErrLeaseLost):
		return "lost"
	case errors.Is(err, ErrReleased):
		return "released"
	case errors.Is(err, ErrHandedOver):
		return "handed-over"
	case errors.Is(err, ErrMaxHold):
		return "max-hold"
	case err != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)):
		return "shutdown"
	default:
		return "error"
	}
}

// eventQueue hands events to fn one at a time, in the order they were added.
// Adding never waits for fn: a goroutine started when the queue fills, and
// ended when it is empty, calls fn; while fn runs, events wait in the queue.
// flush waits until fn has been given every event added before it.
type eventQueue struct {
	fn func(Event)

	mu        sync.Mutex
	cond      sync.Cond // signalled with mu when delivered moves
	pending   []Event
	added     uint64
	delivered uint64
	draining  bool // a goroutine is delivering
}

func newEventQueue(fn func(Event)) *eventQueue {
	q := &eventQueue{fn: fn}
	q.cond.L = &q.mu
	return q
}

// add queues e for fn. It never blocks on fn.
func (q *eventQueue) add(e Event) {
	if q.fn == nil {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.pending = append(q.pending, e)
	q.added++
	if !q.draining {
		q.draining = true
		go q.drain()
	}
}

func (q *eventQueue) drain() {
	for {
		q.mu.Lock()
		if len(q.pending) == 0 {
			q.draining = false
			q.pending = nil
			q.mu.Unlock()
			return
		}
		e := q.pending[0]
		q.pending[0] = Event{}
		q.pending = q.pending[1:]
		q.mu.Unlock()

		q.fn(e)

		q.mu.Lock()
		q.delivered++
		q.cond.Broadcast()
		q.mu.Unlock()
	}
}

// flush waits until fn has returned for every event added before the call.
// Called from fn, it would wait for itself.
func (q *eventQueue) flush() {
	if q.fn == nil {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	for n := q.added; q.delivered < n; {
		q.cond.Wait()
	}
}
