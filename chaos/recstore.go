package chaos

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold/store"
)

// A node does not take the library's word for when it sent a request: the
// library's own Latency is what a broken library would get wrong. So every
// node puts a recorder between the elector and the store, which writes a
// request line just before each Acquire, Renew and Release reaches the store
// and an answer line just after it returns, on the host's wall clock and the
// node's clock. The safe-until check bounds each safeUntil by the recorded
// request, and the token-order check orders grants by these lines.

// recStore records the calls of the elector that change the lease.
type recStore struct {
	inner store.Store
	hw    *historyWriter
	seq   atomic.Int64
}

func (s *recStore) call(op string, token int64) int64 {
	n := s.seq.Add(1)
	s.hw.emit(Event{Kind: EvRequest, Req: n, Call: op, Token: token})
	return n
}

func (s *recStore) answer(n int64, op string, token int64, err error) {
	s.hw.emit(Event{Kind: EvAnswer, Req: n, Call: op, Token: token, Err: errString(err)})
}

func (s *recStore) Acquire(ctx context.Context, name, holder string, ttl time.Duration, metadata string) (store.Record, error) {
	n := s.call(CallAcquire, 0)
	rec, err := s.inner.Acquire(ctx, name, holder, ttl, metadata)
	tok := int64(0)
	if err == nil {
		tok = rec.Token
	}
	s.answer(n, CallAcquire, tok, err)
	return rec, err
}

func (s *recStore) Renew(ctx context.Context, t store.Term, ttl time.Duration) (store.Record, error) {
	n := s.call(CallRenew, t.Token)
	rec, err := s.inner.Renew(ctx, t, ttl)
	s.answer(n, CallRenew, t.Token, err)
	return rec, err
}

func (s *recStore) Release(ctx context.Context, t store.Term) error {
	n := s.call(CallRelease, t.Token)
	err := s.inner.Release(ctx, t)
	s.answer(n, CallRelease, t.Token, err)
	return err
}

func (s *recStore) Get(ctx context.Context, name string) (store.Record, error) {
	return s.inner.Get(ctx, name)
}

func (s *recStore) Close() error { return s.inner.Close() }

// withCapabilities returns base (a wrapper of inner) with inner's optional
// capabilities that the lease loop looks for (Watcher, BatchRenewer, Limiter)
// forwarded to inner. A wrapper that only embedded store.Store would hide
// them, and the elector would silently poll instead of watching.
func withCapabilities(base, inner store.Store) store.Store {
	w, isW := inner.(store.Watcher)
	b, isB := inner.(store.BatchRenewer)
	l, isL := inner.(store.Limiter)
	switch {
	case isW && isB && isL:
		return struct {
			store.Store
			store.Watcher
			store.BatchRenewer
			store.Limiter
		}{base, w, b, l}
	case isW && isB:
		return struct {
			store.Store
			store.Watcher
			store.BatchRenewer
		}{base, w, b}
	case isW && isL:
		return struct {
			store.Store
			store.Watcher
			store.Limiter
		}{base, w, l}
	case isB && isL:
		return struct {
			store.Store
			store.BatchRenewer
			store.Limiter
		}{base, b, l}
	case isW:
		return struct {
			store.Store
			store.Watcher
		}{base, w}
	case isB:
		return struct {
			store.Store
			store.BatchRenewer
		}{base, b}
	case isL:
		return struct {
			store.Store
			store.Limiter
		}{base, l}
	}
	return base
}

// Broken stores, for negative controls only. Each breaks a store's contract
// in one way, so that a real run shows the check meant to catch that break
// does. They are reached only through Config.BrokenStore (`leasehold verify
// --broken-store`), which marks the run as a negative control in its output:
// no store URL, environment variable or store option selects them.
const (
	// BrokenEarlyGrant grants the lease to every candidate at once, ending a
	// live holder's term first (with the store's ForceRelease): a store that
	// grants before expiry. The exclusive-work check must catch it.
	BrokenEarlyGrant = "early-grant"
	// BrokenTokenDown hands out tokens out of order: 2, 1, 4, 3, … (each
	// token of the real store swapped with its pair), so that a later grant
	// has a lower token, and no token twice. The token-order check must
	// catch it.
	BrokenTokenDown = "token-down"
)

// BrokenStores lists the broken-store modes.
var BrokenStores = []string{BrokenEarlyGrant, BrokenTokenDown}

func validBroken(mode string) error {
	for _, m := range BrokenStores {
		if mode == m {
			return nil
		}
	}
	return fmt.Errorf("%w: broken store %q: want one of %s (negative controls)", ErrInvalid, mode, strings.Join(BrokenStores, ", "))
}

// breakStore wraps st in the broken store mode names.
func breakStore(st store.Store, mode string) (store.Store, error) {
	switch mode {
	case BrokenEarlyGrant:
		fr, ok := st.(store.ForceReleaser)
		if !ok {
			return nil, fmt.Errorf("%w: broken store %s needs a store with ForceRelease", ErrInvalid, mode)
		}
		return withCapabilities(&earlyGrantStore{Store: st, fr: fr}, st), nil
	case BrokenTokenDown:
		return withCapabilities(&tokenDownStore{Store: st}, st), nil
	}
	return nil, validBroken(mode)
}

// earlyGrantStore ignores a live holder: an Acquire refused because another
// holder's term is live ends that term and grants a new one.
type earlyGrantStore struct {
	store.Store
	fr store.ForceReleaser
}

func (s *earlyGrantStore) Acquire(ctx context.Context, name, holder string, ttl time.Duration, metadata string) (store.Record, error) {
	rec, err := s.Store.Acquire(ctx, name, holder, ttl, metadata)
	if !errors.Is(err, store.ErrHeld) {
		return rec, err
	}
	if _, err := s.fr.ForceRelease(ctx, name); err != nil && !errors.Is(err, store.ErrNotHeld) {
		return store.Record{}, err
	}
	return s.Store.Acquire(ctx, name, holder, ttl, metadata)
}

// tokenDownStore shows each token t of the real store as swapTok(t), and
// maps it back on the way in. Every process agrees on the mapping, so terms
// stay consistent; only the order of tokens is broken.
type tokenDownStore struct{ store.Store }

// swapTok swaps 1↔2, 3↔4, …: its own inverse.
func swapTok(t int64) int64 {
	switch {
	case t <= 0:
		return t
	case t%2 == 1:
		return t + 1
	default:
		return t - 1
	}
}

func swapRec(rec store.Record) store.Record {
	rec.Token = swapTok(rec.Token)
	return rec
}

func (s *tokenDownStore) Acquire(ctx context.Context, name, holder string, ttl time.Duration, metadata string) (store.Record, error) {
	rec, err := s.Store.Acquire(ctx, name, holder, ttl, metadata)
	return swapRec(rec), err
}

func (s *tokenDownStore) Renew(ctx context.Context, t store.Term, ttl time.Duration) (store.Record, error) {
	t.Token = swapTok(t.Token)
	rec, err := s.Store.Renew(ctx, t, ttl)
	return swapRec(rec), err
}

func (s *tokenDownStore) Release(ctx context.Context, t store.Term) error {
	t.Token = swapTok(t.Token)
	return s.Store.Release(ctx, t)
}

func (s *tokenDownStore) Get(ctx context.Context, name string) (store.Record, error) {
	rec, err := s.Store.Get(ctx, name)
	return swapRec(rec), err
}
