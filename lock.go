package leasehold

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold/store"
)

// Lock is a lease used as a distributed lock around a short critical section.
// A Lock is safe for concurrent use; each acquisition is its own term.
type Lock struct {
	name    string
	cfg     Config
	hold    holdConfig
	base    string // holder identity prefix: Identity plus the process suffix
	seq     atomic.Uint64
	watcher store.Watcher
}

// NewLock validates cfg and returns a Lock on the lease name in st.
func NewLock(st store.Store, name string, cfg Config) (*Lock, error) {
	if st == nil {
		return nil, fmt.Errorf("%w: store is nil", ErrInvalidConfig)
	}
	if err := store.ValidateName(name); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	base, err := cfg.prepare(st)
	if err != nil {
		return nil, err
	}
	l := &Lock{name: name, cfg: cfg, base: base}
	l.hold = holdConfig{store: st, clock: cfg.Clock, timings: cfg.Timings, keepAlive: cfg.KeepAlive,
		maxHold: cfg.MaxHold, events: newEventQueue(cfg.OnEvent)}
	l.watcher, _ = st.(store.Watcher)
	return l, nil
}

func (l *Lock) contender() *contender {
	holder := l.base + "." + strconv.FormatUint(l.seq.Add(1), 10)
	return &contender{holdConfig: &l.hold, watcher: l.watcher, name: l.name, holder: holder, metadata: l.cfg.Metadata}
}

// TryAcquire makes one attempt. If another holder's term is live it returns a
// *HeldError (matching ErrHeld). If the outcome is unknown it gives back
// whatever the attempt may have been granted before returning the error.
func (l *Lock) TryAcquire(ctx context.Context) (*Lease, error) {
	defer l.hold.events.flush()
	c := l.contender()
	rec, sent, err := c.try(ctx)
	if err != nil {
		c.giveBackUnknown(ctx)
		if errors.Is(err, store.ErrHeld) {
			return nil, &HeldError{Record: rec}
		}
		return nil, fmt.Errorf("leasehold: acquire %q: %w", l.name, err)
	}
	return l.lease(ctx, c, rec, sent), nil
}

// Acquire waits until it holds the lock or ctx ends. It wakes when the store
// announces a change (if it can) or when the holder's term expires, and polls
// every RetryPeriod otherwise. ctx bounds only the wait: the returned Lease
// has its own context.
func (l *Lock) Acquire(ctx context.Context) (*Lease, error) {
	defer l.hold.events.flush()
	c := l.contender()
	rec, sent, err := c.acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("leasehold: acquire %q: %w", l.name, err)
	}
	return l.lease(ctx, c, rec, sent), nil
}

func (l *Lock) lease(ctx context.Context, c *contender, rec store.Record, sent time.Time) *Lease {
	h := startHolding(context.WithoutCancel(ctx), &l.hold, rec, sent)
	return &Lease{term: rec.Term, ctx: h.ctx, keep: lockKeeping{h: h, c: c}}
}

// lockKeeping keeps one term of a Lock.
type lockKeeping struct {
	h *holding
	c *contender
}

func (k lockKeeping) safeUntil() time.Time { return k.h.SafeUntil() }

// release stops the holding, then ends the term in the store unless the
// store already said it was lost.
func (k lockKeeping) release(ctx context.Context) error {
	defer k.c.events.flush()
	if cause := k.h.stop(); errors.Is(cause, ErrLeaseLost) {
		return store.ErrNotHeld
	}
	return k.c.release(ctx, k.h.term)
}
