package memstore

import (
	"context"
	"time"

	"github.com/leasehold/leasehold/store"
)

var _ store.Transferer = (*Store)(nil)

// Transfer implements store.Transferer: under one lock it ends exactly the
// live term t and grants t.Name to the successor to for ttl, with the next
// token.
func (s *Store) Transfer(ctx context.Context, t store.Term, to string, ttl time.Duration, metadata string) (store.Record, error) {
	if err := s.life.Check(ctx); err != nil {
		return store.Record{}, err
	}
	if err := kit.CheckTransfer(t, to, ttl, metadata); err != nil {
		return store.Record{}, err
	}
	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	l := b.live(t, now)
	if l == nil {
		return store.Record{}, kit.Wrap("transfer "+t.String(), store.ErrNotHeld)
	}
	l.holder, l.token, l.expiresAt, l.ttl, l.metadata = to, l.token+1, now.Add(ttl), ttl, metadata
	b.notify(t.Name)
	return b.record(t.Name, l, now), nil
}
