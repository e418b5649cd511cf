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
	// (Record is that term), matches store.ErrQueued when a fair acquire found
	// others queued ahead (nothing granted, no failure; a store that cannot
	// check the queue in the grant's step answers so without sending
	// anything), and is anything else when the outcome is unknown.
	// OutcomeOf(Err) names which.
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

func (k EventKind) String() string { return nameOf(eventKindNames, k, "unknown") }

// nameOf is names[k], or fallback for a value that has no name.
func nameOf[K comparable](names map[K]string, k K, fallback string) string {
	if s, ok := names[k]; ok {
		return s
	}
	return fallback
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

// Outcome says what the answer to one store request means. Every reader of
// events (the Elector's Status, promlease, the command's logs and health)
// classifies answers with OutcomeOf, so that they agree on which answers are
// failures.
type Outcome int

const (
	// OutcomeApplied: the request took effect (err nil): a term granted,
	// renewed or released.
	OutcomeApplied Outcome = iota + 1
	// OutcomeHeld: another holder's term is live (store.ErrHeld); nothing
	// was granted.
	OutcomeHeld
	// OutcomeQueued: others wait ahead in the fair queue (store.ErrQueued);
	// nothing was granted. Waiting, not failing; and no sign that the store
	// was reached, since a store that cannot check the queue in the grant's
	// step answers so without sending anything.
	OutcomeQueued
	// OutcomeNotHeld: the term named is not live (store.ErrNotHeld);
	// nothing changed.
	OutcomeNotHeld
	// OutcomeUnknown: any other error. The request may or may not have
	// taken effect; an acquire may have granted a term nobody knows of.
	OutcomeUnknown
)

var outcomeNames = map[Outcome]string{
	OutcomeApplied: "applied",
	OutcomeHeld:    "held",
	OutcomeQueued:  "queued",
	OutcomeNotHeld: "not-held",
	OutcomeUnknown: "unknown",
}

func (o Outcome) String() string { return nameOf(outcomeNames, o, "invalid") }

// OutcomeOf classifies a store request's error (an Event's Err).
func OutcomeOf(err error) Outcome {
	switch {
	case err == nil:
		return OutcomeApplied
	case errors.Is(err, store.ErrHeld):
		return OutcomeHeld
	case errors.Is(err, store.ErrQueued):
		return OutcomeQueued
	case errors.Is(err, store.ErrNotHeld):
		return OutcomeNotHeld
	default:
		return OutcomeUnknown
	}
}

// Definite reports whether the outcome is known: every outcome but
// OutcomeUnknown. A definite answer is no store error.
func (o Outcome) Definite() bool {
	return o >= OutcomeApplied && o < OutcomeUnknown
}

// Answered reports whether the outcome shows the store was reached: a
// definite answer other than OutcomeQueued. It is what the Elector counts as
// contact (Status.LastContact).
func (o Outcome) Answered() bool {
	return o.Definite() && o != OutcomeQueued
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
// flush waits until fn has been given every event added before it, and
// gives them itself, on its caller's goroutine, while no goroutine is
// calling fn: a Lock's Acquire and Release flush before they return, and
// would otherwise wait for the goroutine to be scheduled.
type eventQueue struct {
	fn func(Event)

	mu        sync.Mutex
	cond      sync.Cond // signalled with mu when delivered or state moves
	pending   []Event   // pending[head:] are not given yet
	head      int
	added     uint64
	delivered uint64
	state     deliverer
}

// deliverer is who calls fn.
type deliverer int

const (
	idle    deliverer = iota // nobody: the queue is empty, or holds only addLater's events
	spawned                  // a drain goroutine was started and will, unless flush has taken over
	drainGo                  // a drain goroutine
	flushGo                  // a flush, on its caller's goroutine
)

// maxKeptEvents is the largest array of pending events an empty queue
// keeps for reuse.
const maxKeptEvents = 16

func newEventQueue(fn func(Event)) *eventQueue {
	q := &eventQueue{fn: fn}
	q.cond.L = &q.mu
	return q
}

// add queues e for fn. It never blocks on fn.
func (q *eventQueue) add(e Event) { q.enqueue(e, true) }

// addLater queues e for fn without starting a goroutine to give it: for a
// caller that flushes soon on its own goroutine (a Lock's Acquire and
// Release), which then gives it, unless an add meanwhile started a
// goroutine that does.
func (q *eventQueue) addLater(e Event) { q.enqueue(e, false) }

// enqueue queues e, and with spawn starts a drain goroutine if nobody is
// giving events.
func (q *eventQueue) enqueue(e Event, spawn bool) {
	if q.fn == nil {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.pending = append(q.pending, e)
	q.added++
	if spawn && q.state == idle {
		q.state = spawned
		go q.drain()
	}
}

// deliverOne gives the first pending event to fn, with q.mu held on entry
// and on return (not while fn runs).
func (q *eventQueue) deliverOne() {
	e := q.pending[q.head]
	q.pending[q.head] = Event{}
	q.head++
	if q.head == len(q.pending) {
		// All given: reuse the array for the next events (a Lock cycle
		// queues four), unless a burst made it large.
		q.pending, q.head = q.pending[:0], 0
		if cap(q.pending) > maxKeptEvents {
			q.pending = nil
		}
	}
	q.mu.Unlock()

	q.fn(e)

	q.mu.Lock()
	q.delivered++
	q.cond.Broadcast()
}

func (q *eventQueue) drain() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.state != spawned {
		return // a flush took over; it starts another drain if events are left
	}
	q.state = drainGo
	for q.head < len(q.pending) {
		q.deliverOne()
	}
	q.state = idle
	q.cond.Broadcast()
}

// flush waits until fn has returned for every event added before the call.
// Called from fn, it would wait for itself.
func (q *eventQueue) flush() {
	if q.fn == nil {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	n := q.added
	for q.delivered < n {
		if q.state == drainGo || q.state == flushGo {
			q.cond.Wait()
			continue
		}
		// Nobody is calling fn (a drain goroutine may be about to): give
		// the events here.
		q.state = flushGo
		for q.delivered < n {
			q.deliverOne()
		}
		if q.head < len(q.pending) {
			q.state = spawned // events added since the call: a goroutine gives them
			go q.drain()
		} else {
			q.state = idle
		}
		q.cond.Broadcast()
	}
}
