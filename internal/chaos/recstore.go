package chaos

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
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

// recStore records the calls of the elector that change the lease. In a
// negative control it also breaks the store in one way (see Broken*), below
// the recorder, so the history shows what the elector saw. It forwards every
// optional capability on purpose (a wrapper that embedded store.Store would
// hide the store's watch, and nodes would poll): Watch, RenewMany, Limits,
// the queue and AcquireUnqueued reach the store inside when it has them.
type recStore struct {
	inner  store.Store
	hw     *historyWriter
	seq    atomic.Int64
	broken string              // "" or a Broken* mode
	fr     store.ForceReleaser // brokenEarlyGrant's way to end a live term
	// real maps a token brokenTokenRepeat reported to the store's token,
	// for this process's renewals and releases.
	realMu sync.Mutex
	real   map[int64]int64
}

// newRecStore records the calls to st, broken as mode says ("" for none).
func newRecStore(st store.Store, hw *historyWriter, mode string) (*recStore, error) {
	s := &recStore{inner: st, hw: hw, broken: mode}
	switch mode {
	case "":
	case brokenEarlyGrant:
		fr, ok := st.(store.ForceReleaser)
		if !ok {
			return nil, fmt.Errorf("%w: broken store %s needs a store with ForceRelease", ErrInvalid, mode)
		}
		s.fr = fr
	case brokenTokenDown, brokenNoFailover, brokenForgeToken, brokenOverrun, brokenExtraSlot, brokenForgetClaims:
	case brokenTokenRepeat:
		s.real = map[int64]int64{}
	default:
		return nil, validBroken(mode)
	}
	return s, nil
}

func (s *recStore) call(op, name string, token int64) int64 {
	n := s.seq.Add(1)
	s.hw.emit(event{Kind: evRequest, Req: n, Call: op, Token: token, Lease: s.hw.leaseOf(name)})
	return n
}

func (s *recStore) answer(n int64, op, name string, token int64, err error) {
	s.hw.emit(event{Kind: evAnswer, Req: n, Call: op, Token: token, Err: errString(err), Lease: s.hw.leaseOf(name)})
}

// in and out map a term's token between the elector and the store.
func (s *recStore) in(t store.Term) store.Term {
	switch s.broken {
	case brokenTokenDown:
		t.Token = swapTok(t.Token)
	case brokenTokenRepeat:
		s.realMu.Lock()
		if r, ok := s.real[t.Token]; ok {
			t.Token = r
		}
		s.realMu.Unlock()
	}
	return t
}

func (s *recStore) out(rec store.Record) store.Record {
	switch s.broken {
	case brokenTokenDown:
		rec.Token = swapTok(rec.Token)
	case brokenTokenRepeat:
		if rec.Token > 0 {
			half := (rec.Token + 1) / 2
			s.realMu.Lock()
			s.real[half] = rec.Token
			s.realMu.Unlock()
			rec.Token = half
		}
	}
	return rec
}

func (s *recStore) acquire(ctx context.Context, name, holder string, ttl time.Duration, metadata string) (store.Record, error) {
	if s.broken == brokenNoFailover {
		// Once the lease has been granted, never grant it again: the
		// first leader's successor never comes.
		if cur, err := s.inner.Get(ctx, name); err == nil && cur.Token > 0 && cur.Holder != holder {
			return store.Record{}, store.ErrHeld
		}
	}
	rec, err := s.inner.Acquire(ctx, name, holder, ttl, metadata)
	if s.broken == brokenEarlyGrant && errors.Is(err, store.ErrHeld) {
		// Ignore the live holder: end its term, and grant.
		if _, err := s.fr.ForceRelease(ctx, name); err != nil && !errors.Is(err, store.ErrNotHeld) {
			return store.Record{}, err
		}
		rec, err = s.inner.Acquire(ctx, name, holder, ttl, metadata)
	}
	return s.out(rec), err
}

func (s *recStore) Acquire(ctx context.Context, name, holder string, ttl time.Duration, metadata string) (store.Record, error) {
	n := s.call(callAcquire, name, 0)
	rec, err := s.acquire(ctx, name, holder, ttl, metadata)
	tok := int64(0)
	if err == nil {
		tok = rec.Token
	}
	s.answer(n, callAcquire, name, tok, err)
	return rec, err
}

func (s *recStore) Renew(ctx context.Context, t store.Term, ttl time.Duration) (store.Record, error) {
	n := s.call(callRenew, t.Name, t.Token)
	rec, err := s.inner.Renew(ctx, s.in(t), ttl)
	s.answer(n, callRenew, t.Name, t.Token, err)
	return s.out(rec), err
}

func (s *recStore) Release(ctx context.Context, t store.Term) error {
	n := s.call(callRelease, t.Name, t.Token)
	err := s.inner.Release(ctx, s.in(t))
	s.answer(n, callRelease, t.Name, t.Token, err)
	return err
}

func (s *recStore) Get(ctx context.Context, name string) (store.Record, error) {
	if s.broken == brokenForgetClaims && strings.Contains(name, "/period-") {
		// A store that forgot every period's claim: each node's check
		// finds the period unclaimed.
		return store.Record{}, store.ErrNotFound
	}
	rec, err := s.inner.Get(ctx, name)
	return s.out(rec), err
}

func (s *recStore) Close() error { return s.inner.Close() }

// Watch forwards to the store's watch; without one it fails, and the
// elector polls.
func (s *recStore) Watch(ctx context.Context, name string) (<-chan struct{}, error) {
	w, ok := s.inner.(store.Watcher)
	if !ok {
		return nil, errors.New("chaos: the store has no watch")
	}
	return w.Watch(ctx, name)
}

// RenewMany records each term's renewal as Renew does; nodes hold one lease,
// so a batch is never more than one term.
func (s *recStore) RenewMany(ctx context.Context, terms []store.Term, ttl time.Duration) ([]store.Record, []error, error) {
	recs := make([]store.Record, len(terms))
	errs := make([]error, len(terms))
	for i, t := range terms {
		recs[i], errs[i] = s.Renew(ctx, t, ttl)
	}
	return recs, errs, nil
}

// WatchesGrants forwards whether the store's watch also wakes on grants.
func (s *recStore) WatchesGrants() bool {
	g, ok := s.inner.(store.GrantWatcher)
	return ok && g.WatchesGrants()
}

// WatchLag forwards the store's watch lag (store.WatchLagger).
func (s *recStore) WatchLag() time.Duration {
	if l, ok := s.inner.(store.WatchLagger); ok {
		return l.WatchLag()
	}
	return 0
}

// Queues, Enqueue and Dequeue forward the store's fair queue, and log
// Enqueue and Dequeue for the timeline (callEnqueue).
func (s *recStore) Queues() bool {
	_, ok := store.AsQueuer(s.inner)
	return ok
}

func (s *recStore) Enqueue(ctx context.Context, name, holder string, ttl time.Duration) (int, error) {
	return s.enqueue(name, func(q store.Queuer) (int, error) { return q.Enqueue(ctx, name, holder, ttl) })
}

// EnqueueWithMetadata forwards the store's store.MetadataQueuer, or its
// Enqueue.
func (s *recStore) EnqueueWithMetadata(ctx context.Context, name, holder string, ttl time.Duration, metadata string) (int, error) {
	return s.enqueue(name, func(q store.Queuer) (int, error) {
		return store.EnqueueWithMetadata(ctx, q, name, holder, ttl, metadata)
	})
}

// enqueue records one enqueue of name, sent by send to the store's queue:
// its request, and its answer with how many places are ahead.
func (s *recStore) enqueue(name string, send func(store.Queuer) (int, error)) (int, error) {
	q, ok := store.AsQueuer(s.inner)
	if !ok {
		return 0, errors.New("chaos: the store has no queue")
	}
	n := s.call(callEnqueue, name, 0)
	ahead, err := send(q)
	detail := ""
	if err == nil {
		detail = fmt.Sprintf("ahead %d", ahead)
	}
	s.hw.emit(event{Kind: evAnswer, Req: n, Call: callEnqueue, Err: errString(err), Detail: detail, Lease: s.hw.leaseOf(name)})
	return ahead, err
}

// AcquireUnqueued forwards the store's store.UnqueuedAcquirer, logged as
// an acquire. While a broken mode is set, or without one, it answers
// store.ErrQueued unsent, so that the caller's acquires go through
// Acquire, where the broken modes live.
func (s *recStore) AcquireUnqueued(ctx context.Context, name, holder string, ttl time.Duration, metadata string) (store.Record, error) {
	u, ok := s.inner.(store.UnqueuedAcquirer)
	if _, queues := store.AsQueuer(s.inner); !ok || !queues || s.broken != "" {
		return store.Record{}, fmt.Errorf("chaos: acquire on an empty queue's condition not forwarded: %w", store.ErrQueued)
	}
	n := s.call(callAcquire, name, 0)
	rec, err := u.AcquireUnqueued(ctx, name, holder, ttl, metadata)
	rec = s.out(rec)
	tok := int64(0)
	if err == nil {
		tok = rec.Token
	}
	s.answer(n, callAcquire, name, tok, err)
	return rec, err
}

func (s *recStore) Dequeue(ctx context.Context, name, holder string) error {
	q, ok := store.AsQueuer(s.inner)
	if !ok {
		return errors.New("chaos: the store has no queue")
	}
	n := s.call(callDequeue, name, 0)
	err := q.Dequeue(ctx, name, holder)
	s.answer(n, callDequeue, name, 0, err)
	return err
}

// Limits forwards the store's limits.
func (s *recStore) Limits() store.Limits {
	if l, ok := s.inner.(store.Limiter); ok {
		return l.Limits()
	}
	return store.Limits{}
}

// Broken stores, for negative controls only. Each breaks a store's contract
// in one way, so that a real run shows the check meant to catch that break
// does. They are reached only through Config.BrokenStore (`leasehold verify
// --broken-store`), which marks the run as a negative control in its output:
// no store URL, environment variable or store option selects them.
const (
	// brokenEarlyGrant grants the lease to every candidate at once, ending a
	// live holder's term first (with the store's ForceRelease): a store that
	// grants before expiry. The exclusive-work check must catch it.
	brokenEarlyGrant = "early-grant"
	// brokenTokenDown hands out tokens out of order: 2, 1, 4, 3, … (each
	// token of the real store swapped with its pair), so that a later grant
	// has a lower token, and no token twice. The token-order check must
	// catch it.
	brokenTokenDown = "token-down"
	// brokenTokenRepeat hands each token out twice: 1, 1, 2, 2, … (each
	// token of the real store halved, rounded up): a store that lost its
	// counter, as one that loses writes on a restart would. The
	// token-unique check must catch it.
	brokenTokenRepeat = "token-repeat"
	// brokenNoFailover grants the lease once and never again (every later
	// acquire by another holder is told the lease is held): a store that
	// stops granting. The failover check must catch it.
	brokenNoFailover = "no-failover"
	// brokenForgeToken breaks the node, not the store: its writes carry
	// the token after the one it was granted, a token it does not own.
	// The write-owner check must catch it.
	brokenForgeToken = "forge-token"
	// brokenOverrun breaks the node: its guarded work ignores being told
	// to stop and writes on for the wind-down and 300 ms more, past its
	// safeUntil while it is not frozen. The safe-until check must catch it.
	brokenOverrun = "overrun"
	// brokenExtraSlot breaks a semaphore's node (ModeSemaphore): it uses
	// one slot more than configured, a lease nobody else contends for, as
	// a process configured with a different number of slots would. Every
	// slot on its own is held rightly; the at-most-n check must catch N+1
	// holders at work at once.
	brokenExtraSlot = "extra-slot"
	// brokenForgetClaims breaks the store of a schedule (ModeSchedule):
	// its Get forgets every period's claim (answers ErrNotFound), so a
	// node whose clock reaches a period after the first claim expired
	// claims it again. The once-per-period check must catch it.
	brokenForgetClaims = "forget-claims"
)

// BrokenStores lists the broken modes (of the store, or for forge-token,
// overrun and extra-slot of the node's use of the library).
var BrokenStores = []string{brokenEarlyGrant, brokenTokenDown, brokenTokenRepeat, brokenNoFailover, brokenForgeToken, brokenOverrun, brokenExtraSlot, brokenForgetClaims}

// brokenMode is the run mode a broken mode needs, if only one.
var brokenMode = map[string]string{brokenExtraSlot: ModeSemaphore, brokenForgetClaims: ModeSchedule}

func validBroken(mode string) error {
	for _, m := range BrokenStores {
		if mode == m {
			return nil
		}
	}
	return fmt.Errorf("%w: broken store %q: want one of %s (negative controls)", ErrInvalid, mode, strings.Join(BrokenStores, ", "))
}

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
