package leasehold

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold/store"
)

// WorkFunc is the guarded work of a leader. ctx is lease.Context(): it is
// cancelled at safeUntil (minus Timings.WindDown), when the store says the term
// is lost, or when Run's context ends; context.Cause(ctx) says which. The work
// must return promptly after ctx is cancelled: the Elector releases the lease
// only after the work has returned (lease.Release is refused with
// ErrElectorOwned). Every write it makes to a fenced resource carries
// lease.Token().
type WorkFunc func(ctx context.Context, lease *Lease) error

// electorKeeping keeps the lease an Elector hands to its work.
type electorKeeping struct{ h *holding }

func (k electorKeeping) safeUntil() time.Time { return k.h.SafeUntil() }

func (electorKeeping) release(context.Context) error { return ErrElectorOwned }

// Status is an Elector's local view of itself, for health checks.
type Status struct {
	// Leading is true while this node holds a term and its work runs.
	Leading bool
	Term    store.Term
	// SafeUntil is the deadline of the held term (zero when not leading).
	SafeUntil time.Time
	// Contending is true while this node tries to acquire the lease.
	Contending bool
	// LastError is the last store error (nil after a successful call, or
	// after a fair acquire was told that others wait ahead of it).
	LastError error
	// LastContact is when the store last answered (any definite answer).
	LastContact time.Time
}

// Elector runs guarded work on exactly one node at a time among those sharing
// a lease name, and hands that work the term's fencing token.
type Elector struct {
	name    string
	cfg     Config
	hold    holdConfig
	holder  string
	watcher store.Watcher
	running atomic.Bool

	mu     sync.Mutex
	status Status
	lease  *Lease
}

// NewElector validates cfg and returns an Elector for the lease name on st.
func NewElector(st store.Store, name string, cfg Config) (*Elector, error) {
	if st == nil {
		return nil, fmt.Errorf("%w: store is nil", ErrInvalidConfig)
	}
	if err := store.ValidateName(name); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	holder, err := cfg.prepare(st)
	if err != nil {
		return nil, err
	}
	e := &Elector{name: name, cfg: cfg, holder: holder}
	e.hold = holdConfig{store: st, clock: cfg.Clock, timings: cfg.Timings, keepAlive: true,
		maxHold: cfg.MaxHold, observe: e.observe, events: newEventQueue(cfg.OnEvent)}
	e.watcher, _ = st.(store.Watcher)
	return e, nil
}

// Identity is this node's holder identity: the configured Identity plus its
// random per-process suffix.
func (e *Elector) Identity() string { return e.holder }

// Status returns this node's local view of the election.
func (e *Elector) Status() Status {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.status
	if e.lease != nil {
		s.SafeUntil = e.lease.SafeUntil()
	}
	return s
}

// Holder asks the store who holds the lease now, this node or another: the
// live term's holder, token, time left and metadata. The record's Live
// method is false when nobody holds it.
func (e *Elector) Holder(ctx context.Context) (store.Record, error) {
	return e.hold.store.Get(ctx, e.name)
}

// Run contends for the lease until ctx ends and, each time this node wins a
// term, runs work under a context cancelled before any rival could legally
// take over (see WorkFunc). After losing a term it contends again, unless
// StopOnLoss is set. It releases the lease only after work has returned.
//
// Run returns ctx.Err() when ctx ends; work's error (nil included), after
// releasing, when work returns while this node still leads; the loss's cause
// with StopOnLoss; and a store error that retrying cannot mend
// (store.ErrInvalid, store.ErrClosed). It returns once OnEvent has been given
// every event of the run.
func (e *Elector) Run(ctx context.Context, work WorkFunc) error {
	if !e.running.CompareAndSwap(false, true) {
		return ErrAlreadyRunning
	}
	defer e.running.Store(false)
	defer e.hold.events.flush()
	c := &contender{holdConfig: &e.hold, watcher: e.watcher, name: e.name, holder: e.holder, metadata: e.cfg.Metadata}
	if e.cfg.Fair {
		c.queue, _ = store.AsQueuer(e.hold.store)
		c.unqueued, _ = e.hold.store.(store.UnqueuedAcquirer)
	}
	for {
		e.setContending(true)
		rec, sent, err := c.acquire(ctx)
		e.setContending(false)
		if err != nil {
			return err
		}
		returned, werr, cause, aside := e.lead(ctx, c, rec, sent, work)
		switch {
		case returned:
			return werr
		case ctx.Err() != nil:
			return ctx.Err()
		case e.cfg.StopOnLoss:
			return cause
		}
		if aside > 0 {
			// Handed over: let the successor (or anyone else) take it.
			if err := c.standAside(ctx, aside); err != nil {
				return err
			}
		}
	}
}

// lead holds the term of rec while work runs. It reports whether work
// returned while the term was still live (and then its error), why the term
// ended, and, if it was handed over, how long to stand aside.
func (e *Elector) lead(ctx context.Context, c *contender, rec store.Record, sent time.Time, work WorkFunc) (returned bool, werr error, cause error, aside time.Duration) {
	h := startHolding(ctx, &e.hold, rec, sent, false)
	l := &Lease{term: rec.Term, ctx: h.ctx, keep: electorKeeping{h}}
	e.setLease(l)
	hw := watchHandover(ctx, c, h)

	workDone := make(chan error, 1)
	go func() { workDone <- work(h.ctx, l) }()
	select {
	case werr = <-workDone:
		returned = h.ctx.Err() == nil
	case <-h.done:
		werr = <-workDone // drain: the work returns before anything is released
	}
	cause = h.stop()
	req, handedOver := hw.stop()
	e.setLease(nil)
	c.waitLeft() // the place leaves the queue before the term ends
	switch {
	case errors.Is(cause, ErrLeaseLost):
	case handedOver && errors.Is(cause, ErrHandedOver):
		// The work has returned: end the term, preferring the successor.
		c.handOver(ctx, rec.Term, req)
		// Stand aside past the reservation by a retry period, so that if the
		// successor does not come, the nodes that waited (and wake when the
		// reservation expires) come before this one.
		aside = c.reservationTTL(req) + e.cfg.Timings.RetryPeriod
	default:
		c.release(ctx, rec.Term)
	}
	return returned, werr, cause, aside
}

func (e *Elector) setLease(l *Lease) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.lease = l
	e.status.Leading = l != nil
	if l != nil {
		e.status.Term = l.Term()
	} else {
		e.status.Term = store.Term{}
		e.status.SafeUntil = time.Time{}
	}
}

func (e *Elector) setContending(on bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.status.Contending = on
}

// observe records what the status needs from an event, on the goroutine
// that reports it.
func (e *Elector) observe(ev Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch ev.Kind {
	case EventAcquireAttempt, EventRenewFailed, EventRenewed, EventReleased:
		switch o := OutcomeOf(ev.Err); {
		case o.Answered():
			e.status.LastError = nil
			e.status.LastContact = e.cfg.Clock.Now()
		case o.Definite(): // queued: waiting, not failing; perhaps unsent, so no contact
			e.status.LastError = nil
		default:
			e.status.LastError = ev.Err
		}
	}
}
