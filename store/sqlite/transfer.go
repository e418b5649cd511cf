package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/leasehold/leasehold/store"
)

var _ store.Transferer = (*Store)(nil)

// Transfer implements store.Transferer: in one transaction (under SQLite's
// write lock) the release's UPDATE of exactly the live term t, then
// Acquire's upsert for the successor, both judged by SQLite's clock. If t is
// not live, nothing is written.
func (s *Store) Transfer(ctx context.Context, t store.Term, to string, ttl time.Duration, metadata string) (store.Record, error) {
	if err := s.life.Check(ctx); err != nil {
		return store.Record{}, err
	}
	if err := kit.CheckTransfer(t, to, ttl, metadata); err != nil {
		return store.Record{}, err
	}
	op := "transfer " + t.String()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return store.Record{}, s.fail(op, err)
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, `UPDATE `+quote(s.table)+`
		SET holder = NULL, expires_at = `+nowMS+`, metadata = ''
		WHERE name = ?1 AND holder = ?2 AND epoch = ?3 AND expires_at > `+nowMS, t.Name, t.Holder, t.Token)
	if err != nil {
		return store.Record{}, s.fail(op, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return store.Record{}, s.fail(op, err)
	}
	if n == 0 {
		return store.Record{}, kit.Wrap(op, store.ErrNotHeld)
	}
	rec, err := s.acquireIn(ctx, tx, t.Name, to, ttl, metadata)
	if errors.Is(err, sql.ErrNoRows) {
		// Cannot happen: the row was freed above in this transaction.
		return store.Record{}, kit.Errorf(op, "the freed row was not granted to %s", to)
	}
	if err != nil {
		return store.Record{}, s.fail(op, err)
	}
	if err := tx.Commit(); err != nil {
		return store.Record{}, s.fail(op, err)
	}
	return rec, nil
}
