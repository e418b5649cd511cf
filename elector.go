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

// ElectorConfig configures an Elector.
type ElectorConfig struct {
	// Name is the lease name the candidates share. Required; see store.ValidateName.
	Name string
	// Identity names this node (a host or pod name). Required. The holder
	// identity is Identity plus a random per-process suffix (see NewIdentity).
	Identity string
	// Metadata is optional data stored with the lease while this node leads,
	// such as its address; at most store.MaxMetadataLen bytes.
	Metadata string
	// Timings of the lease; zero fields take defaults (see Timings).
	Timings Timings
	// Clock is the holder's clock; nil means SystemClock().
	Clock Clock
	// OnEvent, if set, is called for each step of the election. It must not block.
	OnEvent func(Event)
	// StopOnLoss makes Run return (with the loss's cause) after this node
	// loses a term, instead of contending again.
	StopOnLoss bool
}

// WorkFunc is the guarded work of a leader. ctx is cancelled at safeUntil
// (minus Timings.WindDown), when the store says the term is lost, or when
// Run's context ends; context.Cause(ctx) says which. The work must return
// promptly after ctx is cancelled: the lease is released only after it has
// returned. Every write it makes to a fenced resource carries leader.Token().
type WorkFunc func(ctx context.Context, leader *Leader) error

// Leader describes the term a node holds while its work runs.
type Leader struct {
	h *holding
}

// Term is the held term: lease name, holder identity and fencing token.
func (l *Leader) Term() store.Term { return l.h.term }

// Token is the fencing token of this term. Send it with every write.
func (l *Leader) Token() int64 { return l.h.term.Token }

// SafeUntil is the local deadline (on the elector's Clock) until which this
// term is trusted; it moves forward with every successful renewal.
func (l *Leader) SafeUntil() time.Time { return l.h.SafeUntil() }

// Status is an Elector's local view of itself, for health checks.
type Status struct {
	// Leading is true while this node holds a term and its work runs.
	Leading bool
	Term    store.Term
	// SafeUntil is the deadline of the held term (zero when not leading).
	SafeUntil time.Time
	// Contending is true while this node tries to acquire the lease.
	Contending bool
	// LastError is the last store error (nil after a successful call).
	LastError error
	// LastContact is when the store last answered (any definite answer).
	LastContact time.Time
}

// Elector runs guarded work on exactly one node at a time among those sharing
// a lease name, and hands that work the term's fencing token.
type Elector struct {
	cfg     ElectorConfig
	hold    holdConfig
	holder  string
	watcher store.Watcher
	running atomic.Bool

	mu     sync.Mutex
	status Status
	leader *Leader
}

// NewElector validates cfg and returns an Elector for it on st.
func NewElector(st store.Store, cfg ElectorConfig) (*Elector, error) {
	if st == nil {
		return nil, fmt.Errorf("%w: store is nil", ErrInvalidConfig)
	}
	if err := store.ValidateName(cfg.Name); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	if err := store.ValidateMetadata(cfg.Metadata); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	timings, err := validateFor(st, cfg.Timings)
	if err != nil {
		return nil, err
	}
	holder, err := NewIdentity(cfg.Identity)
	if err != nil {
		return nil, err
	}
	cfg.Timings = timings
	if cfg.Clock == nil {
		cfg.Clock = SystemClock()
	}
	e := &Elector{cfg: cfg, holder: holder}
	e.hold = holdConfig{store: st, clock: cfg.Clock, timings: cfg.Timings, keepAlive: true, onEvent: e.observe}
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
	if e.leader != nil {
		s.SafeUntil = e.leader.SafeUntil()
	}
	return s
}

// Leader asks the store who leads now: the live term's holder, token, time
// left and metadata. The record's Live method is false when nobody leads.
func (e *Elector) Leader(ctx context.Context) (store.Record, error) {
	return e.hold.store.Get(ctx, e.cfg.Name)
}

// Run contends for the lease until ctx ends and, each time this node wins a
// term, runs work under a context cancelled before any rival could legally
// take over (see WorkFunc). After losing a term it contends again, unless
// StopOnLoss is set. It releases the lease only after work has returned.
//
// Run returns ctx.Err() when ctx ends; work's error (nil included), after
// releasing, when work returns while this node still leads; the loss's cause
// with StopOnLoss; and a store error that retrying cannot mend
// (store.ErrInvalid, store.ErrClosed).
func (e *Elector) Run(ctx context.Context, work WorkFunc) error {
	if !e.running.CompareAndSwap(false, true) {
		return ErrAlreadyRunning
	}
	defer e.running.Store(false)
	c := &contender{holdConfig: &e.hold, watcher: e.watcher, name: e.cfg.Name, holder: e.holder, metadata: e.cfg.Metadata}
	for {
		e.setContending(true)
		rec, sent, err := c.acquire(ctx)
		e.setContending(false)
		if err != nil {
			return err
		}
		returned, werr, cause := e.lead(ctx, c, rec.Term, sent, work)
		switch {
		case returned:
			return werr
		case ctx.Err() != nil:
			return ctx.Err()
		case e.cfg.StopOnLoss:
			return cause
		}
	}
}

// lead holds term while work runs. It reports whether work returned while
// the term was still live (and then its error), and why the term ended.
func (e *Elector) lead(ctx context.Context, c *contender, term store.Term, sent time.Time, work WorkFunc) (returned bool, werr error, cause error) {
	h := startHolding(ctx, &e.hold, term, sent)
	l := &Leader{h: h}
	e.setLeader(l)
	e.observe(Event{Kind: EventAcquired, Name: term.Name, Term: term, SafeUntil: h.SafeUntil()})

	workDone := make(chan error, 1)
	go func() { workDone <- work(h.ctx, l) }()
	select {
	case werr = <-workDone:
		returned = h.ctx.Err() == nil
	case <-h.done:
		werr = <-workDone // drain: the work returns before anything is released
	}
	cause = h.stop()
	e.setLeader(nil)
	if !errors.Is(cause, ErrLeaseLost) {
		c.release(ctx, term)
	}
	return returned, werr, cause
}

func (e *Elector) setLeader(l *Leader) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.leader = l
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

// observe records what the status needs from an event, then passes it on.
func (e *Elector) observe(ev Event) {
	e.mu.Lock()
	switch ev.Kind {
	case EventAcquireAttempt, EventRenewFailed, EventRenewed, EventReleased:
		definite := ev.Err == nil || errors.Is(ev.Err, store.ErrHeld) || errors.Is(ev.Err, store.ErrNotHeld)
		if definite {
			e.status.LastError = nil
			e.status.LastContact = e.cfg.Clock.Now()
		} else {
			e.status.LastError = ev.Err
		}
	}
	e.mu.Unlock()
	if e.cfg.OnEvent != nil {
		e.cfg.OnEvent(ev)
	}
}
