package mysql

// Batched renewal and the operator's calls (list, force release, history).

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/leasehold/leasehold/store"
)

// renewBatch is how many terms one statement of RenewMany carries.
const renewBatch = 500

// RenewMany implements store.BatchRenewer: one UPDATE renews every term
// (500 at most per statement), each scoped to its exact (name, holder,
// epoch); one SELECT then reads the rows back, since MySQL's UPDATE returns
// no rows. A term is renewed if its row shows it live after the UPDATE: a
// term that was live at the UPDATE was matched by it, and an expired term
// is never revived. A term listed twice gets the same answer twice.
func (s *Store) RenewMany(ctx context.Context, terms []store.Term, ttl time.Duration) ([]store.Record, []error, error) {
	if err := s.life.Check(ctx); err != nil {
		return nil, nil, err
	}
	if err := kit.CheckTTL("renew", ttl); err != nil {
		return nil, nil, err
	}
	recs := make([]store.Record, len(terms))
	errs := make([]error, len(terms))
	var valid []int
	for i, t := range terms {
		if errs[i] = kit.CheckTerm("renew", t); errs[i] == nil {
			valid = append(valid, i)
		}
	}
	us := ttlMicros(ttl)
	sent := time.Now()
	for len(valid) > 0 {
		chunk := valid[:min(len(valid), renewBatch)]
		valid = valid[len(chunk):]
		var b strings.Builder
		b.WriteString(s.sql.renewManyHead)
		args := []any{us, us}
		seen := map[string]bool{}
		b.WriteByte('(')
		for _, i := range chunk {
			if name := terms[i].Name; !seen[name] {
				if len(seen) > 0 {
					b.WriteByte(',')
				}
				seen[name] = true
				b.WriteByte('?')
				args = append(args, name)
			}
		}
		b.WriteString(") AND (l.name, l.holder, l.epoch) IN (")
		for k, i := range chunk {
			if k > 0 {
				b.WriteByte(',')
			}
			b.WriteString("(?,?,?)")
			args = append(args, terms[i].Name, terms[i].Holder, terms[i].Token)
		}
		b.WriteByte(')')
		if _, _, err := exec(ctx, s.db, b.String(), args...); err != nil {
			return nil, nil, s.opErr(fmt.Sprintf("renew batch of %d", len(chunk)), err)
		}
		names := make([]any, 0, len(seen))
		for name := range seen {
			names = append(names, name)
		}
		rows := map[string]store.Record{}
		err := query(ctx, s.db, strings.Replace(s.sql.get, "l.name = ?", "l.name IN (?"+strings.Repeat(",?", len(names)-1)+")", 1), names, func(r *sql.Rows) error {
			var x recScan
			if err := r.Scan(x.dest()...); err != nil {
				return err
			}
			rows[x.name] = x.record()
			return nil
		})
		if err != nil {
			return nil, nil, s.opErr(fmt.Sprintf("renew batch of %d (reading back)", len(chunk)), err)
		}
		for _, i := range chunk {
			t := terms[i]
			if r, ok := rows[t.Name]; ok && r.Term == t && r.Live() {
				recs[i] = r
				s.bells.renewed(t.Name, t.Token, sent, ttl)
			} else {
				errs[i] = kit.Wrap("renew "+t.String(), store.ErrNotHeld)
			}
		}
	}
	return recs, errs, nil
}

// List implements store.Lister: every row, ordered by name (byte order).
func (s *Store) List(ctx context.Context) ([]store.Record, error) {
	if err := s.life.Check(ctx); err != nil {
		return nil, err
	}
	var out []store.Record
	err := query(ctx, s.db, s.sql.list, nil, func(r *sql.Rows) error {
		var x recScan
		if err := r.Scan(x.dest()...); err != nil {
			return err
		}
		out = append(out, x.record())
		return nil
	})
	if err != nil {
		return nil, s.opErr("list "+s.n.table, err)
	}
	return out, nil
}

// ForceRelease implements store.ForceReleaser: it ends whatever term of
// name is live, keeps the epoch, and returns the record as it was. It runs
// in a transaction on one connection, whose @leasehold_event tells the
// history trigger that the release was forced.
func (s *Store) ForceRelease(ctx context.Context, name string) (store.Record, error) {
	if err := s.life.Check(ctx); err != nil {
		return store.Record{}, err
	}
	op := "force-release " + strconv.Quote(name)
	if err := kit.CheckName(op, name); err != nil {
		return store.Record{}, err
	}
	var old store.Record
	found := false
	err := retry(ctx, func() error {
		found = false
		return s.withConn(ctx, func(c *sql.Conn) error {
			if _, err := c.ExecContext(ctx, `SET @leasehold_event = 'force-released'`); err != nil {
				return err
			}
			defer c.ExecContext(context.WithoutCancel(ctx), `SET @leasehold_event = NULL`)
			tx, err := c.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			defer tx.Rollback()
			var x recScan
			err = query(ctx, tx, s.sql.forceSelect, []any{name}, func(r *sql.Rows) error {
				found = true
				return r.Scan(x.dest()...)
			})
			if err != nil || !found {
				return err
			}
			old = x.record()
			if _, err := tx.ExecContext(ctx, s.sql.forceRelease, name, old.Token); err != nil {
				return err
			}
			return tx.Commit()
		})
	})
	if err != nil {
		return store.Record{}, s.opErr(op, err)
	}
	if found {
		s.hub.Notify(name)
		s.bells.ended(name, 0)
		return old, nil
	}
	_, exists, err := s.get(ctx, s.db, name)
	if err != nil {
		return store.Record{}, s.opErr(op, err)
	}
	if !exists {
		return store.Record{}, kit.Wrap(op, store.ErrNotFound)
	}
	return store.Record{}, kit.Errorf(op, "no live term: %w", store.ErrNotHeld)
}

// withConn runs fn on one connection of the pool. If fn fails, the
// connection is discarded rather than returned to the pool, since it may
// carry session state (a user variable, a named lock) fn set.
func (s *Store) withConn(ctx context.Context, fn func(*sql.Conn) error) error {
	c, err := s.db.Conn(ctx)
	if err != nil {
		return err
	}
	err = fn(c)
	if err != nil {
		discard(c)
	}
	c.Close()
	return err
}

// discard marks a pinned connection bad, so that closing it closes the
// server session instead of returning it to the pool.
func discard(c *sql.Conn) {
	c.Raw(func(any) error { return driver.ErrBadConn })
}

// History implements store.Historian from the history table the triggers
// fill: grants and releases by leasehold and by raw SQL clients alike.
// Events: "acquired", "expired-takeover", "released", "force-released". At
// most about 1000 entries are kept per lease (older ones are pruned now and
// then).
func (s *Store) History(ctx context.Context, name string, limit int) ([]store.HistoryEntry, error) {
	if err := s.life.Check(ctx); err != nil {
		return nil, err
	}
	op := "history " + strconv.Quote(name)
	if err := kit.CheckName(op, name); err != nil {
		return nil, err
	}
	if limit <= 0 {
		return nil, kit.Invalid(op, "limit %d is not positive", limit)
	}
	var out []store.HistoryEntry
	err := query(ctx, s.db, s.sql.history, []any{name, limit}, func(r *sql.Rows) error {
		var e store.HistoryEntry
		var at string
		var meta []byte
		if err := r.Scan(&e.Name, &e.Holder, &e.Token, &e.Event, &at, &meta); err != nil {
			return err
		}
		t, err := time.Parse("2006-01-02T15:04:05.999999Z", at)
		if err != nil {
			return fmt.Errorf("history time %q: %w", at, err)
		}
		e.At, e.Metadata = t, string(meta)
		out = append(out, e)
		return nil
	})
	if err != nil {
		return nil, s.opErr(op, err)
	}
	return out, nil
}
