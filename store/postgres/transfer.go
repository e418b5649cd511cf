package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/leasehold/leasehold/store"
)

var _ store.Transferer = (*Store)(nil)

// errTransferNotHeld ends the transaction of a Transfer whose term is not
// live: nothing is written.
var errTransferNotHeld = errors.New("term not live")

// Transfer implements store.Transferer: in one transaction, Release's
// statement on exactly the live term t, then Acquire's for the successor,
// both judged by now() on the server. The released row stays locked until
// the commit, so a rival's acquire waits for it and then finds the
// successor's reservation live.
func (s *Store) Transfer(ctx context.Context, t store.Term, to string, ttl time.Duration, metadata string) (store.Record, error) {
	if err := s.life.Check(ctx); err != nil {
		return store.Record{}, err
	}
	if err := kit.CheckTransfer(t, to, ttl, metadata); err != nil {
		return store.Record{}, err
	}
	var x recScan
	err := s.retry(ctx, func() error {
		return s.q.inTx(ctx, func(q querier) error {
			found := false
			if err := q.query(ctx, s.sql.release, []any{t.Name, t.Holder, t.Token}, func(r rowScanner) error {
				found = true
				var epoch int64
				return r.Scan(&epoch)
			}); err != nil {
				return err
			}
			if !found {
				return errTransferNotHeld
			}
			granted := false
			if err := q.query(ctx, s.sql.acquire, []any{t.Name, to, ttlMicros(ttl), metadata}, func(r rowScanner) error {
				granted = true
				return r.Scan(x.dest()...)
			}); err != nil {
				return err
			}
			if !granted {
				// Cannot happen: this transaction freed the row and holds its lock.
				return errors.New("the freed row was not granted to the successor")
			}
			return nil
		})
	})
	switch {
	case errors.Is(err, errTransferNotHeld):
		return store.Record{}, kit.Wrap("transfer "+t.String(), store.ErrNotHeld)
	case err != nil:
		return store.Record{}, s.opErr("transfer", t.String(), err)
	}
	return x.record(), nil
}
