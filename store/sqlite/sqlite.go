package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/storekit"
)

// fail wraps an error of the database with the operation, and turns a missing
// table into ErrNoSchema.
func (s *Store) fail(op string, err error) error {
	err = s.life.ClosedOr(err)
	if err != store.ErrClosed && strings.Contains(err.Error(), "no such table") {
		err = ErrNoSchema
	}
	return kit.Wrap(op, err)
}

// row is the columns every read returns, in this order.
const rowCols = `holder, epoch, expires_at - ` + nowMS + `, ttl_ms, metadata`

type scanner interface{ Scan(...any) error }

func scanRecord(sc scanner, name string) (store.Record, error) {
	var holder sql.NullString
	var epoch, leftMS, ttlMS int64
	var meta string
	if err := sc.Scan(&holder, &epoch, &leftMS, &ttlMS, &meta); err != nil {
		return store.Record{}, err
	}
	return store.Record{
		Term:      store.Term{Name: name, Holder: holder.String, Token: epoch},
		Remaining: time.Duration(leftMS) * time.Millisecond,
		TTL:       time.Duration(ttlMS) * time.Millisecond,
		Metadata:  meta,
	}, nil
}

// Acquire implements store.Store: one upsert whose WHERE clause, judged by
// SQLite's clock, only matches a free row, an expired row, or this holder's
// row; if it matches nothing, the live term is read in the same transaction.
func (s *Store) Acquire(ctx context.Context, name, holder string, ttl time.Duration, metadata string) (store.Record, error) {
	return s.acquire(ctx, name, holder, ttl, metadata, false)
}

// AcquireUnqueued implements store.UnqueuedAcquirer: Acquire's transaction,
// which first counts the name's live places under the same write lock and
// grants nothing while there is one.
func (s *Store) AcquireUnqueued(ctx context.Context, name, holder string, ttl time.Duration, metadata string) (store.Record, error) {
	return s.acquire(ctx, name, holder, ttl, metadata, true)
}

func (s *Store) acquire(ctx context.Context, name, holder string, ttl time.Duration, metadata string, unqueued bool) (store.Record, error) {
	if err := s.life.Check(ctx); err != nil {
		return store.Record{}, err
	}
	if err := kit.CheckAcquire(name, holder, ttl, metadata); err != nil {
		return store.Record{}, err
	}
	tx, err := s.db.BeginTx(ctx, nil) // BEGIN IMMEDIATE: the write lock first
	if err != nil {
		return store.Record{}, s.fail("acquire "+name, err)
	}
	defer tx.Rollback()
	if unqueued {
		var queued bool
		if err := tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM `+quote(s.queue)+` WHERE name = ?1 AND expires_at > `+nowMS+`)`, name).Scan(&queued); err != nil {
			return store.Record{}, s.queueFail(fmt.Sprintf("acquire %q", name), err)
		}
		if queued {
			return store.Record{}, kit.Wrap(fmt.Sprintf("acquire %q", name), store.ErrQueued)
		}
	}
	rec, err := s.acquireIn(ctx, tx, name, holder, ttl, metadata)
	switch {
	case err == nil:
		if err := tx.Commit(); err != nil {
			return store.Record{}, s.fail("acquire "+name, err)
		}
		return rec, nil
	case !errors.Is(err, sql.ErrNoRows):
		return store.Record{}, s.fail("acquire "+name, err)
	}
	// Another holder's term is live: read it under the same write lock.
	rec, err = scanRecord(tx.QueryRowContext(ctx, `SELECT `+rowCols+` FROM `+quote(s.table)+` WHERE name = ?1`, name), name)
	if err != nil {
		return store.Record{}, s.fail("acquire "+name, err)
	}
	tx.Rollback()
	return rec, kit.Wrap(fmt.Sprintf("acquire %q", name), store.ErrHeld)
}

// acquireIn is Acquire's upsert, inside tx: sql.ErrNoRows when another
// holder's term is live.
func (s *Store) acquireIn(ctx context.Context, tx *sql.Tx, name, holder string, ttl time.Duration, metadata string) (store.Record, error) {
	t := quote(s.table)
	ms := storekit.CeilMillis(ttl)
	return scanRecord(tx.QueryRowContext(ctx, `INSERT INTO `+t+` AS l (name, holder, epoch, expires_at, ttl_ms, metadata)
		VALUES (?1, ?2, (SELECT COALESCE(MAX(epoch), 0) + 1 FROM `+quote(s.high)+` WHERE name = ?1), `+nowMS+` + ?3, ?3, ?4)
		ON CONFLICT (name) DO UPDATE SET
			holder = excluded.holder, epoch = MAX(l.epoch + 1, excluded.epoch), expires_at = excluded.expires_at,
			ttl_ms = excluded.ttl_ms, metadata = excluded.metadata
		WHERE l.holder IS NULL OR l.holder = '' OR l.holder = excluded.holder OR l.expires_at <= `+nowMS+`
		RETURNING `+rowCols, name, holder, ms, metadata), name)
}

// Renew implements store.Store: one UPDATE that names the exact term and
// matches only while it is live on SQLite's clock.
func (s *Store) Renew(ctx context.Context, t store.Term, ttl time.Duration) (store.Record, error) {
	if err := s.life.Check(ctx); err != nil {
		return store.Record{}, err
	}
	if err := kit.CheckRenew(t, ttl); err != nil {
		return store.Record{}, err
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return store.Record{}, s.fail("renew "+t.String(), err)
	}
	defer tx.Rollback()
	rec, err := scanRecord(tx.QueryRowContext(ctx, `UPDATE `+quote(s.table)+`
		SET expires_at = `+nowMS+` + ?4, ttl_ms = ?4
		WHERE name = ?1 AND holder = ?2 AND epoch = ?3 AND expires_at > `+nowMS+`
		RETURNING `+rowCols, t.Name, t.Holder, t.Token, storekit.CeilMillis(ttl)), t.Name)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return store.Record{}, kit.Wrap("renew "+t.String(), store.ErrNotHeld)
	case err != nil:
		return store.Record{}, s.fail("renew "+t.String(), err)
	}
	if err := tx.Commit(); err != nil {
		return store.Record{}, s.fail("renew "+t.String(), err)
	}
	return rec, nil
}

// Release implements store.Store: one UPDATE that names the exact live term,
// clears the holder, and keeps the epoch.
func (s *Store) Release(ctx context.Context, t store.Term) error {
	if err := s.life.Check(ctx); err != nil {
		return err
	}
	if err := kit.CheckRelease(t); err != nil {
		return err
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return s.fail("release "+t.String(), err)
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, `UPDATE `+quote(s.table)+`
		SET holder = NULL, expires_at = `+nowMS+`, metadata = ''
		WHERE name = ?1 AND holder = ?2 AND epoch = ?3 AND expires_at > `+nowMS, t.Name, t.Holder, t.Token)
	if err != nil {
		return s.fail("release "+t.String(), err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return s.fail("release "+t.String(), err)
	}
	if n == 0 {
		return kit.Wrap("release "+t.String(), store.ErrNotHeld)
	}
	if err := tx.Commit(); err != nil {
		return s.fail("release "+t.String(), err)
	}
	return nil
}

// Get implements store.Store. A row whose epoch is 0 (inserted by hand and
// never granted) is reported as ErrNotFound.
func (s *Store) Get(ctx context.Context, name string) (store.Record, error) {
	if err := s.life.Check(ctx); err != nil {
		return store.Record{}, err
	}
	if err := kit.CheckName("get", name); err != nil {
		return store.Record{}, err
	}
	rec, err := scanRecord(s.db.QueryRowContext(ctx, `SELECT `+rowCols+` FROM `+quote(s.table)+` WHERE name = ?1 AND epoch > 0`, name), name)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return store.Record{}, kit.Wrap(fmt.Sprintf("get %q", name), store.ErrNotFound)
	case err != nil:
		return store.Record{}, s.fail(fmt.Sprintf("get %q", name), err)
	}
	return rec, nil
}

// List implements store.Lister: every lease ever granted, by name.
func (s *Store) List(ctx context.Context) ([]store.Record, error) {
	if err := s.life.Check(ctx); err != nil {
		return nil, err
	}
	rows, err := s.db.QueryContext(ctx, `SELECT name, `+rowCols+` FROM `+quote(s.table)+` WHERE epoch > 0 ORDER BY name`)
	if err != nil {
		return nil, s.fail("list", err)
	}
	defer rows.Close()
	var out []store.Record
	for rows.Next() {
		var name string
		var holder sql.NullString
		var epoch, leftMS, ttlMS int64
		var meta string
		if err := rows.Scan(&name, &holder, &epoch, &leftMS, &ttlMS, &meta); err != nil {
			return nil, s.fail("list", err)
		}
		out = append(out, store.Record{
			Term:      store.Term{Name: name, Holder: holder.String, Token: epoch},
			Remaining: time.Duration(leftMS) * time.Millisecond,
			TTL:       time.Duration(ttlMS) * time.Millisecond,
			Metadata:  meta,
		})
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail("list", err)
	}
	return out, nil
}

// ForceRelease implements store.ForceReleaser: it ends the live term of name,
// whoever holds it, keeps the epoch, and records "force-released" in the
// history.
func (s *Store) ForceRelease(ctx context.Context, name string) (store.Record, error) {
	if err := s.life.Check(ctx); err != nil {
		return store.Record{}, err
	}
	if err := kit.CheckName("force-release", name); err != nil {
		return store.Record{}, err
	}
	op := fmt.Sprintf("force-release %q", name)
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return store.Record{}, s.fail(op, err)
	}
	defer tx.Rollback()
	t := quote(s.table)
	rec, err := scanRecord(tx.QueryRowContext(ctx, `SELECT `+rowCols+` FROM `+t+` WHERE name = ?1 AND epoch > 0`, name), name)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return store.Record{}, kit.Wrap(op, store.ErrNotFound)
	case err != nil:
		return store.Record{}, s.fail(op, err)
	case !rec.Live():
		return rec, kit.Errorf(op, "no live term (last token %d): %w", rec.Token, store.ErrNotHeld)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE `+t+` SET holder = NULL, expires_at = `+nowMS+`, metadata = '' WHERE name = ?1 AND epoch = ?2`, name, rec.Token); err != nil {
		return store.Record{}, s.fail(op, err)
	}
	h := quote(s.hist)
	if _, err := tx.ExecContext(ctx, `UPDATE `+h+` SET event = 'force-released' WHERE id = (SELECT max(id) FROM `+h+` WHERE name = ?1) AND event = 'released'`, name); err != nil {
		return store.Record{}, s.fail(op, err)
	}
	if err := tx.Commit(); err != nil {
		return store.Record{}, s.fail(op, err)
	}
	return rec, nil
}

// History implements store.Historian. It records "acquired",
// "expired-takeover", "released" and "force-released"; At is SQLite's wall
// clock at the change, in milliseconds.
func (s *Store) History(ctx context.Context, name string, limit int) ([]store.HistoryEntry, error) {
	if err := s.life.Check(ctx); err != nil {
		return nil, err
	}
	if err := kit.CheckName("history", name); err != nil {
		return nil, err
	}
	if limit < 1 {
		return nil, kit.Invalid("history", "limit %d is below 1", limit)
	}
	rows, err := s.db.QueryContext(ctx, `SELECT holder, epoch, event, at_ms, metadata FROM `+quote(s.hist)+` WHERE name = ?1 ORDER BY id DESC LIMIT ?2`, name, limit)
	if err != nil {
		return nil, s.fail(fmt.Sprintf("history %q", name), err)
	}
	defer rows.Close()
	var out []store.HistoryEntry
	for rows.Next() {
		var e store.HistoryEntry
		var at int64
		if err := rows.Scan(&e.Holder, &e.Token, &e.Event, &at, &e.Metadata); err != nil {
			return nil, s.fail(fmt.Sprintf("history %q", name), err)
		}
		e.Name = name
		e.At = time.UnixMilli(at)
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail(fmt.Sprintf("history %q", name), err)
	}
	return out, nil
}
