// Package memstore is the in-memory lease store: the reference
// implementation of the store contract, and the double used by leasehold's
// own unit tests. It judges expiry on its own clock (injectable), is safe for
// concurrent use, and pushes changes to watchers.
//
// Several Store handles can share one Backend, the way several processes
// share one database; closing a handle does not touch the backend.
package memstore

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/storekit"
)

var kit = storekit.Kit{Store: "memstore", MinTTL: MinTTL}

// Backend holds the leases. It is the "server" that Store handles talk to.
type Backend struct {
	now func() time.Time

	mu     sync.Mutex
	leases map[string]*lease
	hubs   map[*storekit.Hub]struct{} // the watch hub of each open handle
	queues map[string][]place         // each name's waiters, first first (queue.go)
}

type lease struct {
	holder    string
	token     int64
	expiresAt time.Time
	ttl       time.Duration
	metadata  string
}

// NewBackend returns an empty backend whose clock is now (time.Now if nil).
// The clock must carry a monotonic reading or be otherwise steady.
func NewBackend(now func() time.Time) *Backend {
	if now == nil {
		now = time.Now
	}
	return &Backend{now: now, leases: map[string]*lease{}, hubs: map[*storekit.Hub]struct{}{}, queues: map[string][]place{}}
}

// Store is one handle on a Backend.
type Store struct {
	b    *Backend
	life storekit.Lifecycle
	hub  *storekit.Hub // this handle's watches
}

var (
	_ store.Store         = (*Store)(nil)
	_ store.Watcher       = (*Store)(nil)
	_ store.BatchRenewer  = (*Store)(nil)
	_ store.Lister        = (*Store)(nil)
	_ store.ForceReleaser = (*Store)(nil)
)

// New returns a handle on a new, empty backend that uses the system clock.
func New() *Store { return Open(NewBackend(nil)) }

// Open returns a new handle on b.
func Open(b *Backend) *Store {
	s := &Store{b: b, hub: new(storekit.Hub)}
	b.mu.Lock()
	b.hubs[s.hub] = struct{}{}
	b.mu.Unlock()
	return s
}

// Backend returns the backend this handle talks to.
func (s *Store) Backend() *Backend { return s.b }

func (b *Backend) record(name string, l *lease, now time.Time) store.Record {
	return store.Record{
		Term:      store.Term{Name: name, Holder: l.holder, Token: l.token},
		Remaining: l.expiresAt.Sub(now),
		TTL:       l.ttl,
		Metadata:  l.metadata,
	}
}

// notify wakes the watchers of name, on every handle. Called with b.mu held.
func (b *Backend) notify(name string) {
	for h := range b.hubs {
		h.Notify(name)
	}
}

// MinTTL is the smallest TTL this store accepts.
const MinTTL = time.Millisecond

// Acquire implements store.Store.
func (s *Store) Acquire(ctx context.Context, name, holder string, ttl time.Duration, metadata string) (store.Record, error) {
	return s.acquireIf(ctx, name, holder, ttl, metadata, false)
}

// acquireIf is Acquire, or with unqueued AcquireUnqueued (queue.go).
func (s *Store) acquireIf(ctx context.Context, name, holder string, ttl time.Duration, metadata string, unqueued bool) (store.Record, error) {
	if err := s.life.Check(ctx); err != nil {
		return store.Record{}, err
	}
	if err := kit.CheckAcquire(name, holder, ttl, metadata); err != nil {
		return store.Record{}, err
	}
	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	if unqueued {
		b.prune(name, now)
		if len(b.queues[name]) > 0 {
			return store.Record{}, kit.Wrap(fmt.Sprintf("acquire %q", name), store.ErrQueued)
		}
	}
	return b.acquire(name, holder, ttl, metadata, now)
}

// acquire grants name to holder unless another term is live. Called with
// b.mu held.
func (b *Backend) acquire(name, holder string, ttl time.Duration, metadata string, now time.Time) (store.Record, error) {
	l := b.leases[name]
	if l == nil {
		l = &lease{}
		b.leases[name] = l
	}
	if l.holder != "" && l.holder != holder && now.Before(l.expiresAt) {
		return b.record(name, l, now), kit.Wrap(fmt.Sprintf("acquire %q", name), store.ErrHeld)
	}
	l.holder, l.token, l.expiresAt, l.ttl, l.metadata = holder, l.token+1, now.Add(ttl), ttl, metadata
	b.notify(name)
	return b.record(name, l, now), nil
}

// live returns the lease if t is its live term. Called with b.mu held.
func (b *Backend) live(t store.Term, now time.Time) *lease {
	l := b.leases[t.Name]
	if l == nil || l.holder != t.Holder || l.token != t.Token || !now.Before(l.expiresAt) {
		return nil
	}
	return l
}

// Renew implements store.Store.
func (s *Store) Renew(ctx context.Context, t store.Term, ttl time.Duration) (store.Record, error) {
	if err := s.life.Check(ctx); err != nil {
		return store.Record{}, err
	}
	if err := kit.CheckRenew(t, ttl); err != nil {
		return store.Record{}, err
	}
	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.renew(t, ttl, b.now())
}

func (b *Backend) renew(t store.Term, ttl time.Duration, now time.Time) (store.Record, error) {
	l := b.live(t, now)
	if l == nil {
		return store.Record{}, kit.Wrap("renew "+t.String(), store.ErrNotHeld)
	}
	l.expiresAt, l.ttl = now.Add(ttl), ttl
	return b.record(t.Name, l, now), nil
}

// RenewMany implements store.BatchRenewer.
func (s *Store) RenewMany(ctx context.Context, terms []store.Term, ttl time.Duration) ([]store.Record, []error, error) {
	if err := s.life.Check(ctx); err != nil {
		return nil, nil, err
	}
	if err := kit.CheckTTL("renew", ttl); err != nil {
		return nil, nil, err
	}
	recs := make([]store.Record, len(terms))
	errs := make([]error, len(terms))
	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	for i, t := range terms {
		if errs[i] = kit.CheckTerm("renew", t); errs[i] == nil {
			recs[i], errs[i] = b.renew(t, ttl, now)
		}
	}
	return recs, errs, nil
}

// Release implements store.Store.
func (s *Store) Release(ctx context.Context, t store.Term) error {
	if err := s.life.Check(ctx); err != nil {
		return err
	}
	if err := kit.CheckRelease(t); err != nil {
		return err
	}
	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	l := b.live(t, now)
	if l == nil {
		return kit.Wrap("release "+t.String(), store.ErrNotHeld)
	}
	l.holder, l.expiresAt, l.metadata = "", now, ""
	b.notify(t.Name)
	return nil
}

// ForceRelease ends whatever term of name is live, as an operator would. The
// token counter is kept. It reports whether a live term was ended.
func (b *Backend) ForceRelease(name string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	l := b.leases[name]
	if l == nil || l.holder == "" || !now.Before(l.expiresAt) {
		return false
	}
	l.holder, l.expiresAt, l.metadata = "", now, ""
	b.notify(name)
	return true
}

// Get implements store.Store.
func (s *Store) Get(ctx context.Context, name string) (store.Record, error) {
	if err := s.life.Check(ctx); err != nil {
		return store.Record{}, err
	}
	if err := kit.CheckName("get", name); err != nil {
		return store.Record{}, err
	}
	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	l := b.leases[name]
	if l == nil {
		return store.Record{}, kit.Wrap(fmt.Sprintf("get %q", name), store.ErrNotFound)
	}
	return b.record(name, l, b.now()), nil
}

// WatchesGrants implements store.GrantWatcher: every grant wakes the
// watchers of its name, as every release does.
func (s *Store) WatchesGrants() bool { return true }

// Watch implements store.Watcher: the channel receives a value after each
// grant and each release of name (not after renewals), and after each place
// that leaves name's queue (queue.go).
func (s *Store) Watch(ctx context.Context, name string) (<-chan struct{}, error) {
	if err := s.life.Check(ctx); err != nil {
		return nil, err
	}
	if err := kit.CheckName("watch", name); err != nil {
		return nil, err
	}
	return s.hub.Watch(ctx, name)
}

// Close implements store.Store. It closes only this handle, and ends its
// watches.
func (s *Store) Close() error {
	return s.life.Close(func() error {
		s.b.mu.Lock()
		delete(s.b.hubs, s.hub)
		s.b.mu.Unlock()
		s.hub.Close()
		return nil
	})
}

// List implements store.Lister.
func (s *Store) List(ctx context.Context) ([]store.Record, error) {
	if err := s.life.Check(ctx); err != nil {
		return nil, err
	}
	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	out := make([]store.Record, 0, len(b.leases))
	for name, l := range b.leases {
		out = append(out, b.record(name, l, now))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// ForceRelease implements store.ForceReleaser.
func (s *Store) ForceRelease(ctx context.Context, name string) (store.Record, error) {
	if err := s.life.Check(ctx); err != nil {
		return store.Record{}, err
	}
	if err := kit.CheckName("force-release", name); err != nil {
		return store.Record{}, err
	}
	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	l := b.leases[name]
	if l == nil {
		return store.Record{}, kit.Wrap(fmt.Sprintf("force-release %q", name), store.ErrNotFound)
	}
	if l.holder == "" || !now.Before(l.expiresAt) {
		return b.record(name, l, now), kit.Wrap(fmt.Sprintf("force-release %q", name), store.ErrNotHeld)
	}
	rec := b.record(name, l, now)
	l.holder, l.expiresAt, l.metadata = "", now, ""
	b.notify(name)
	return rec, nil
}
