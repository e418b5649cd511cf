// Package faultstore wraps any lease store and injects faults between the
// caller and the store: added latency, errors, lost replies (the write
// happened, the answer did not arrive), hangs, and partitions. Unit tests of
// the lease loop use it with the in-memory store, inside testing/synctest
// where its delays are virtual time.
package faultstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/leasehold/leasehold/store"
)

// Op names a store call.
type Op string

const (
	OpAcquire Op = "acquire"
	OpRenew   Op = "renew"
	OpRelease Op = "release"
	OpGet     Op = "get"
	OpWatch   Op = "watch"
	OpEnqueue Op = "enqueue"
	OpDequeue Op = "dequeue"
)

// AllOps is every op a fault can target.
var AllOps = []Op{OpAcquire, OpRenew, OpRelease, OpGet, OpWatch, OpEnqueue, OpDequeue}

// Mode is what a fault does to a call.
type Mode int

const (
	// Pass lets the call through (after Latency, if any).
	Pass Mode = iota
	// Fail returns Err (ErrInjected if nil) without reaching the store.
	Fail
	// LoseReply lets the call reach the store, then returns ErrLostReply
	// instead of its answer: the write happened, the caller cannot know.
	LoseReply
	// Hang blocks the call until its context ends, without reaching the store.
	Hang
	// HangAfterWrite lets the call reach the store, then blocks until the
	// context ends: a reply that never arrives.
	HangAfterWrite
	// Mute (OpWatch only; Pass for other ops) subscribes to the store, then
	// returns a channel that never wakes and is closed when the context
	// ends: a watch stream that stalled without breaking.
	Mute
)

// Fault is what happens to calls of one op.
type Fault struct {
	Mode Mode
	// Latency is added before the call reaches the store (any mode).
	Latency time.Duration
	// Err is returned by Fail; nil means ErrInjected.
	Err error
	// Times limits the fault to the next Times calls; 0 means until healed.
	Times int
}

var (
	// ErrInjected is the default error of a Fail fault.
	ErrInjected = errors.New("faultstore: injected failure")
	// ErrLostReply is returned by a LoseReply fault: the outcome is unknown
	// to the caller, though the store did act.
	ErrLostReply = errors.New("faultstore: reply lost")
)

// Store is a store.Store that injects faults. It passes the Watcher and
// BatchRenewer capabilities through when the inner store has them (calls of
// RenewMany take the OpRenew fault).
type Store struct {
	inner store.Store

	mu     sync.Mutex
	faults map[Op]Fault
	calls  map[Op]int
}

// New wraps inner.
func New(inner store.Store) *Store {
	return &Store{inner: inner, faults: map[Op]Fault{}, calls: map[Op]int{}}
}

// Inject sets the fault for the given ops (all ops if none are given),
// replacing any fault they had.
func (s *Store) Inject(f Fault, ops ...Op) {
	if len(ops) == 0 {
		ops = AllOps
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, op := range ops {
		s.faults[op] = f
	}
}

// Partition makes every call hang until its context ends, as a network that
// drops every packet would.
func (s *Store) Partition() { s.Inject(Fault{Mode: Hang}) }

// Heal removes the faults of the given ops (all ops if none are given).
func (s *Store) Heal(ops ...Op) {
	if len(ops) == 0 {
		ops = AllOps
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, op := range ops {
		delete(s.faults, op)
	}
}

// Calls reports how many calls of op were made (whatever their fault).
func (s *Store) Calls(op Op) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[op]
}

// take returns the fault for one call of op, counting the call.
func (s *Store) take(op Op) Fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls[op]++
	f, ok := s.faults[op]
	if !ok {
		return Fault{}
	}
	if f.Times > 0 {
		f.Times--
		if f.Times == 0 {
			delete(s.faults, op)
		} else {
			s.faults[op] = f
		}
		f.Times = 1
	}
	return f
}

// do runs call under the fault for op.
func do[T any](ctx context.Context, s *Store, op Op, call func() (T, error)) (T, error) {
	return run(ctx, s.take(op), op, call)
}

// run runs call under fault f.
func run[T any](ctx context.Context, f Fault, op Op, call func() (T, error)) (T, error) {
	var zero T
	if f.Latency > 0 {
		timer := time.NewTimer(f.Latency)
		select {
		case <-ctx.Done():
			timer.Stop()
			return zero, ctx.Err()
		case <-timer.C:
		}
	}
	switch f.Mode {
	case Fail:
		if f.Err != nil {
			return zero, f.Err
		}
		return zero, fmt.Errorf("%s: %w", op, ErrInjected)
	case Hang:
		<-ctx.Done()
		return zero, ctx.Err()
	case LoseReply:
		call()
		return zero, fmt.Errorf("%s: %w", op, ErrLostReply)
	case HangAfterWrite:
		call()
		<-ctx.Done()
		return zero, ctx.Err()
	}
	return call()
}

func (s *Store) Acquire(ctx context.Context, name, holder string, ttl time.Duration, metadata string) (store.Record, error) {
	return do(ctx, s, OpAcquire, func() (store.Record, error) { return s.inner.Acquire(ctx, name, holder, ttl, metadata) })
}

func (s *Store) Renew(ctx context.Context, t store.Term, ttl time.Duration) (store.Record, error) {
	return do(ctx, s, OpRenew, func() (store.Record, error) { return s.inner.Renew(ctx, t, ttl) })
}

func (s *Store) Release(ctx context.Context, t store.Term) error {
	_, err := do(ctx, s, OpRelease, func() (struct{}, error) { return struct{}{}, s.inner.Release(ctx, t) })
	return err
}

func (s *Store) Get(ctx context.Context, name string) (store.Record, error) {
	return do(ctx, s, OpGet, func() (store.Record, error) { return s.inner.Get(ctx, name) })
}

func (s *Store) Close() error { return s.inner.Close() }

// Limits passes through the inner store's store.Limiter. An inner store
// without one reports zero Limits, which is what the absence of a Limiter
// means (any positive ttl, exact resolution).
func (s *Store) Limits() store.Limits {
	if l, ok := s.inner.(store.Limiter); ok {
		return l.Limits()
	}
	return store.Limits{}
}

// Watch passes through to the inner store's Watcher. A store without one
// gets an error, as the elector expects of any failed Watch.
func (s *Store) Watch(ctx context.Context, name string) (<-chan struct{}, error) {
	w, ok := s.inner.(store.Watcher)
	if !ok {
		return nil, errors.New("faultstore: inner store has no Watcher")
	}
	f := s.take(OpWatch)
	ch, err := run(ctx, f, OpWatch, func() (<-chan struct{}, error) { return w.Watch(ctx, name) })
	if err != nil || f.Mode != Mute {
		return ch, err
	}
	muted := make(chan struct{})
	go func() {
		for range ch { // swallow every wake until the inner watch ends
		}
		close(muted)
	}()
	return muted, nil
}

// WatchesGrants passes through whether the inner store's watch also wakes
// on grants. A Mute fault hides those wakes as it hides a release's: that
// is what it injects.
func (s *Store) WatchesGrants() bool {
	g, ok := s.inner.(store.GrantWatcher)
	return ok && g.WatchesGrants()
}

// WatchLag passes through the inner store's watch lag (store.WatchLagger).
func (s *Store) WatchLag() time.Duration {
	if l, ok := s.inner.(store.WatchLagger); ok {
		return l.WatchLag()
	}
	return 0
}

// RenewMany passes through to the inner store's BatchRenewer, or renews one
// by one without one.
func (s *Store) RenewMany(ctx context.Context, terms []store.Term, ttl time.Duration) ([]store.Record, []error, error) {
	type out struct {
		recs []store.Record
		errs []error
	}
	o, err := do(ctx, s, OpRenew, func() (out, error) {
		if br, ok := s.inner.(store.BatchRenewer); ok {
			recs, errs, err := br.RenewMany(ctx, terms, ttl)
			return out{recs, errs}, err
		}
		o := out{make([]store.Record, len(terms)), make([]error, len(terms))}
		for i, t := range terms {
			o.recs[i], o.errs[i] = s.inner.Renew(ctx, t, ttl)
		}
		return o, nil
	})
	return o.recs, o.errs, err
}

// errNoQueue: the inner store has no store.Queuer.
var errNoQueue = errors.New("faultstore: inner store has no Queuer")

// Queues implements store.QueueReporter: whether the inner store queues
// (store.AsQueuer), so that wrapping a store never hides its queue nor
// invents one.
func (s *Store) Queues() bool {
	_, ok := store.AsQueuer(s.inner)
	return ok
}

// Enqueue passes through to the inner store's store.Queuer.
func (s *Store) Enqueue(ctx context.Context, name, holder string, ttl time.Duration) (int, error) {
	q, ok := store.AsQueuer(s.inner)
	if !ok {
		return 0, errNoQueue
	}
	return do(ctx, s, OpEnqueue, func() (int, error) { return q.Enqueue(ctx, name, holder, ttl) })
}

// EnqueueWithMetadata passes through to the inner store's
// store.MetadataQueuer, or to its Enqueue if it has none, under the faults
// of OpEnqueue.
func (s *Store) EnqueueWithMetadata(ctx context.Context, name, holder string, ttl time.Duration, metadata string) (int, error) {
	q, ok := store.AsQueuer(s.inner)
	if !ok {
		return 0, errNoQueue
	}
	return do(ctx, s, OpEnqueue, func() (int, error) { return store.EnqueueWithMetadata(ctx, q, name, holder, ttl, metadata) })
}

// AcquireUnqueued passes through to the inner store's
// store.UnqueuedAcquirer, under the faults of OpAcquire (it is an acquire).
// If the inner store has none, or no queue, it answers store.ErrQueued
// without calling it, as the contract allows: the caller queues.
func (s *Store) AcquireUnqueued(ctx context.Context, name, holder string, ttl time.Duration, metadata string) (store.Record, error) {
	u, ok := s.inner.(store.UnqueuedAcquirer)
	if _, queues := store.AsQueuer(s.inner); !ok || !queues {
		return store.Record{}, fmt.Errorf("faultstore: inner store cannot acquire on an empty queue's condition: %w", store.ErrQueued)
	}
	return do(ctx, s, OpAcquire, func() (store.Record, error) { return u.AcquireUnqueued(ctx, name, holder, ttl, metadata) })
}

// Dequeue passes through to the inner store's store.Queuer.
func (s *Store) Dequeue(ctx context.Context, name, holder string) error {
	q, ok := store.AsQueuer(s.inner)
	if !ok {
		return errNoQueue
	}
	_, err := do(ctx, s, OpDequeue, func() (struct{}, error) { return struct{}{}, q.Dequeue(ctx, name, holder) })
	return err
}
