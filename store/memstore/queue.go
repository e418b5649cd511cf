package memstore

import (
	"context"
	"slices"
	"time"

	"github.com/leasehold/leasehold/store"
)

var (
	_ store.Queuer           = (*Store)(nil)
	_ store.UnqueuedAcquirer = (*Store)(nil)
)

// AcquireUnqueued implements store.UnqueuedAcquirer: Acquire, refused
// with store.ErrQueued while name's queue holds a live place.
func (s *Store) AcquireUnqueued(ctx context.Context, name, holder string, ttl time.Duration, metadata string) (store.Record, error) {
	return s.acquireIf(ctx, name, holder, ttl, metadata, true)
}

// place is one waiter's place in a name's queue.
type place struct {
	holder    string
	expiresAt time.Time
}

// Enqueue implements store.Queuer. Places are kept in arrival order; an
// expired place is dropped (and the name's watchers woken) when any call
// on the queue finds it.
func (s *Store) Enqueue(ctx context.Context, name, holder string, ttl time.Duration) (int, error) {
	if err := s.life.Check(ctx); err != nil {
		return 0, err
	}
	if err := kit.CheckEnqueue(name, holder, ttl); err != nil {
		return 0, err
	}
	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	b.prune(name, now)
	q := b.queues[name]
	for i := range q {
		if q[i].holder == holder {
			q[i].expiresAt = now.Add(ttl)
			return i, nil
		}
	}
	b.queues[name] = append(q, place{holder: holder, expiresAt: now.Add(ttl)})
	return len(q), nil
}

// Dequeue implements store.Queuer.
func (s *Store) Dequeue(ctx context.Context, name, holder string) error {
	if err := s.life.Check(ctx); err != nil {
		return err
	}
	if err := kit.CheckDequeue(name, holder); err != nil {
		return err
	}
	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	b.prune(name, b.now())
	q := b.queues[name]
	i := slices.IndexFunc(q, func(p place) bool { return p.holder == holder })
	if i < 0 {
		return nil
	}
	b.setQueue(name, slices.Delete(q, i, i+1))
	b.notify(name)
	return nil
}

// prune drops the expired places of name's queue, waking its watchers if
// it dropped any. Called with b.mu held.
func (b *Backend) prune(name string, now time.Time) {
	q := b.queues[name]
	kept := slices.DeleteFunc(q, func(p place) bool { return !now.Before(p.expiresAt) })
	if len(kept) != len(q) {
		b.setQueue(name, kept)
		b.notify(name)
	}
}

func (b *Backend) setQueue(name string, q []place) {
	if len(q) == 0 {
		delete(b.queues, name)
		return
	}
	b.queues[name] = q
}
