package nats

import (
	"context"
	"errors"
	"time"

	"github.com/leasehold/leasehold/store"
)

var _ store.Transferer = (*Store)(nil)

// Transfer implements store.Transferer: one compare-and-set at exactly the
// revision of the key's live term t (as Renew and Release write) puts the
// successor's term, with its own per-message TTL counted down by the server.
// The successor's token is that message's revision, above t's, as for any
// grant; its own Acquire replaces the reservation (a live term of the same
// holder), while anyone else's is refused until the TTL runs out.
func (s *Store) Transfer(ctx context.Context, t store.Term, to string, ttl time.Duration, metadata string) (store.Record, error) {
	if err := kit.CheckTransfer(t, to, ttl, metadata); err != nil {
		return store.Record{}, err
	}
	op := "transfer " + t.String()
	if err := s.life.Check(ctx); err != nil {
		return store.Record{}, kit.Wrap(op, err)
	}
	before := s.high.Load()
	rev, _, err := s.write(ctx, op, t, true, func(string) (value, time.Duration, bool) {
		return value{Holder: to, TTLms: ttl.Milliseconds(), Meta: metadata}, ttl, false
	})
	if err != nil {
		if errors.Is(err, store.ErrNotHeld) {
			s.dropHint(t)
		}
		return store.Record{}, err
	}
	s.dropHint(t)
	if rev <= before || int64(rev) <= t.Token {
		return store.Record{}, s.regress(ctx, op, rev, max(before, uint64(t.Token)))
	}
	nt := store.Term{Name: t.Name, Holder: to, Token: int64(rev)}
	s.hints.Store(t.Name, hint{term: nt, rev: rev, meta: metadata})
	return store.Record{Term: nt, Remaining: ttl, TTL: ttl, Metadata: metadata}, nil
}
