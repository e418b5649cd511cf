package leasehold

import (
	"context"
	"errors"
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
	// EventLeaderObserved: a candidate saw a different live holder (Record).
	EventLeaderObserved
)

var eventKindNames = map[EventKind]string{
	EventAcquireAttempt: "acquire-attempt",
	EventAcquired:       "acquired",
	EventRenewed:        "renewed",
	EventRenewFailed:    "renew-failed",
	EventLost:           "lost",
	EventReleased:       "released",
	EventLeaderObserved: "leader-observed",
}

func (k EventKind) String() string {
	if s, ok := eventKindNames[k]; ok {
		return s
	}
	return "unknown"
}

// Event reports one step of an Elector or a Lock. Events are delivered
// synchronously from the goroutine that owns the term; an OnEvent function must
// not block.
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
// "released", "shutdown" (the caller's context ended), or "error".
func LossReason(err error) string {
	switch {
	case errors.Is(err, ErrSafeUntilPassed):
		return "expired"
	case errors.Is(err, ErrLeaseLost):
		return "lost"
	case errors.Is(err, ErrReleased):
		return "released"
	case err != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)):
		return "shutdown"
	default:
		return "error"
	}
}
