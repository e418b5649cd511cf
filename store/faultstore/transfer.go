package faultstore

import (
	"context"
	"errors"
	"time"

	"github.com/leasehold/leasehold/store"
)

// Transfer passes through to the inner store's store.Transferer, taking the
// OpRelease fault (a transfer ends a term). A store without one gets an
// error whose outcome is unknown, so a test of the fallback wraps a store
// that has no Transfer in a type without one, not in a faultstore.
func (s *Store) Transfer(ctx context.Context, t store.Term, to string, ttl time.Duration, metadata string) (store.Record, error) {
	tr, ok := s.inner.(store.Transferer)
	if !ok {
		return store.Record{}, errors.New("faultstore: inner store has no Transferer")
	}
	return do(ctx, s, OpRelease, func() (store.Record, error) { return tr.Transfer(ctx, t, to, ttl, metadata) })
}
