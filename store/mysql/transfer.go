package mysql

import (
	"context"
	"time"

	"github.com/leasehold/leasehold/store"
)

var _ store.Transferer = (*Store)(nil)

// Transfer implements store.Transferer: in one transaction, Release's
// UPDATE of exactly the live term t (which locks the row until the commit),
// then Acquire's grant for the successor, both judged by the server's clock.
// If t is not live, nothing is written.
func (s *Store) Transfer(ctx context.Context, t store.Term, to string, ttl time.Duration, metadata string) (store.Record, error) {
	if err := s.life.Check(ctx); err != nil {
		return store.Record{}, err
	}
	if err := kit.CheckTransfer(t, to, ttl, metadata); err != nil {
		return store.Record{}, err
	}
	op := "transfer " + t.String()
	// One connection, with the transaction opened by statement: the grant's
	// statements must run on the connection that holds the row's lock (on a
	// pool the caller opened, execID runs them on a *sql.Conn it is given).
	c, err := s.db.Conn(ctx)
	if err != nil {
		return store.Record{}, s.opErr(op, err)
	}
	defer c.Close()
	if _, err := c.ExecContext(ctx, "START TRANSACTION"); err != nil {
		return store.Record{}, s.opErr(op, err)
	}
	committed := false
	defer func() {
		if !committed {
			c.ExecContext(context.WithoutCancel(ctx), "ROLLBACK")
		}
	}()
	n, _, err := exec(ctx, c, s.sql.release, t.Name, t.Holder, t.Token)
	if err != nil {
		return store.Record{}, s.opErr(op, err)
	}
	if n != 1 {
		return store.Record{}, kit.Wrap(op, store.ErrNotHeld)
	}
	rec, err := s.grant(ctx, c, op, t.Name, to, ttl, metadata, grantLease)
	if err != nil {
		return store.Record{}, err
	}
	if _, err := c.ExecContext(ctx, "COMMIT"); err != nil {
		return store.Record{}, s.opErr(op, err)
	}
	committed = true
	s.hub.Notify(t.Name)
	s.bells.ended(t.Name, t.Token)
	return rec, nil
}
