package leasehold

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold/store"
)

// LockConfig configures a Lock.
type LockConfig struct {
	// Identity names this node. Required. Each acquisition holds the lease
	// under Identity plus a random per-process suffix plus a sequence number,
	// so two acquisitions, even in one process, are never the same holder.
	Identity string
	// Metadata is optional data stored with the lease while it is held.
	Metadata string
	// Timings of the lease; zero fields take defaults (see Timings). Without
	// KeepAlive a held lock is trusted until RenewDeadline after the acquire
	// request was sent, and never renewed.
	Timings Timings
	// KeepAlive renews the lease while it is held, for work that may outlast
	// one lease duration.
	KeepAlive bool
	// Clock is the holder's clock; nil means SystemClock().
	Clock Clock
	// OnEvent, if set, is called for each step. It must not block.
	OnEvent func(Event)
}

// Lock is a lease used as a distributed lock around a short critical section.
// A Lock is safe for concurrent use; each acquisition is its own term.
type Lock struct {
	name    string
	cfg     LockConfig
	hold    holdConfig
	base    string // holder identity prefix: Identity plus the process suffix
	seq     atomic.Uint64
	watcher store.Watcher
}

// NewLock validates cfg and returns a Lock on the lease name in st.
func NewLock(st store.Store, name string, cfg LockConfig) (*Lock, error) {
	if st == nil {
		return nil, fmt.Errorf("%w: store is nil", ErrInvalidConfig)
	}
	if err := store.ValidateName(name); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	if err := store.ValidateMetadata(cfg.Metadata); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	timings, err := validateFor(st, cfg.Timings)
	if err != nil {
		return nil, err
	}
	base, err := NewIdentity(cfg.Identity)
	if err != nil {
		return nil, err
	}
	cfg.Timings = timings
	if cfg.Clock == nil {
		cfg.Clock = SystemClock()
	}
	l := &Lock{name: name, cfg: cfg, base: base}
	l.hold = holdConfig{store: st, clock: cfg.Clock, timings: cfg.Timings, keepAlive: cfg.KeepAlive, onEvent: cfg.OnEvent}
	l.watcher, _ = st.(store.Watcher)
	return l, nil
}

func (l *Lock) contender() *contender {
	holder := l.base + "." + strconv.FormatUint(l.seq.Add(1), 10)
	return &contender{holdConfig: &l.hold, watcher: l.watcher, name: l.name, holder: holder, metadata: l.cfg.Metadata}
}

// TryAcquire makes one attempt. If another holder's term is live it returns a
// *HeldError (matching store.ErrHeld). If the outcome is unknown it gives back
// whatever the attempt may have been granted before returning the error.
func (l *Lock) TryAcquire(ctx context.Context) (*Held, error) {
	c := l.contender()
	rec, sent, err := c.try(ctx)
	if err != nil {
		c.giveBackUnknown(ctx)
		if errors.Is(err, store.ErrHeld) {
			return nil, &HeldError{Record: rec}
		}
		return nil, fmt.Errorf("leasehold: acquire %q: %w", l.name, err)
	}
	return l.held(ctx, c, rec, sent), nil
}

// Acquire waits until it holds the lock or ctx ends. It wakes when the store
// announces a change (if it can) or when the holder's term expires, and polls
// every RetryPeriod otherwise. ctx bounds only the wait: the returned Held has
// its own context.
func (l *Lock) Acquire(ctx context.Context) (*Held, error) {
	c := l.contender()
	rec, sent, err := c.acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("leasehold: acquire %q: %w", l.name, err)
	}
	return l.held(ctx, c, rec, sent), nil
}

func (l *Lock) held(ctx context.Context, c *contender, rec store.Record, sent time.Time) *Held {
	h := startHolding(context.WithoutCancel(ctx), &l.hold, rec.Term, sent)
	l.hold.emit(Event{Kind: EventAcquired, Name: l.name, Term: rec.Term, Record: rec, SafeUntil: h.SafeUntil()})
	return &Held{h: h, c: c}
}

// Held is one held term of a Lock.
type Held struct {
	h    *holding
	c    *contender
	once sync.Once
	err  error
}

// Term is the held term.
func (h *Held) Term() store.Term { return h.h.term }

// Token is the fencing token of the held term. Send it with every write.
func (h *Held) Token() int64 { return h.h.term.Token }

// Context is cancelled at safeUntil (minus WindDown), when the store says the
// term is lost, or on Release; context.Cause says which. Do the critical
// section's work under it.
func (h *Held) Context() context.Context { return h.h.ctx }

// SafeUntil is the local deadline until which the term is trusted.
func (h *Held) SafeUntil() time.Time { return h.h.SafeUntil() }

// Release cancels the held context, stops any keep-alive, and ends exactly
// this term in the store. Call it after the critical section's work has
// returned. It is idempotent. It returns nil if the term was ended, or an
// error matching store.ErrNotHeld if the term had already expired or been
// lost, in which case nothing was changed in the store. Later calls return the
// first call's result.
func (h *Held) Release(ctx context.Context) error {
	h.once.Do(func() {
		cause := h.h.stop()
		if errors.Is(cause, ErrLeaseLost) {
			h.err = fmt.Errorf("leasehold: release %s: %w", h.h.term, store.ErrNotHeld)
			return
		}
		if err := h.c.release(ctx, h.h.term); err != nil {
			h.err = fmt.Errorf("leasehold: release %s: %w", h.h.term, err)
		}
	})
	return h.err
}
