package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/storekit"
)

// MinTTL is the smallest TTL the store accepts. DATETIME(6) keeps time to
// the microsecond; a lease shorter than a few round trips is useless anyway.
const MinTTL = 10 * time.Millisecond

var kit = storekit.Kit{Store: "mysql", MinTTL: MinTTL}

// opErr wraps a driver error once, naming the operation, and turns the
// errors with a definite meaning into the store's sentinels.
func (s *Store) opErr(op string, err error) error {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case errNoTable:
			return kit.NoTable(op, me.Message, s.n.table, ErrNotMigrated)
		case errBadField:
			return kit.OldTable(op, me.Message, s.n.table, ErrNotMigrated)
		case errOutOfRange:
			if strings.HasPrefix(op, "acquire") || strings.HasPrefix(op, "lock") {
				return kit.Errorf(op, "the epoch is at the BIGINT limit: %w", ErrBadRow)
			}
		}
	}
	if s.life.Closed() {
		return kit.Wrap(op, store.ErrClosed)
	}
	return kit.Wrap(op, err)
}

// retryable reports a deadlock or lock wait timeout (or Galera's
// certification failure, reported as a deadlock): the statement was rolled
// back, nothing was written, and it may be sent again.
func retryable(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && (me.Number == errDeadlock || me.Number == errLockWait)
}

// isHighWater reports the guard's refusal of a grant at or below the
// high-water mark of its name.
func isHighWater(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == errSignal && strings.HasPrefix(me.Message, msgHighWater)
}

func isDupKey(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == errDupKey
}

// retrier sends a statement again after a deadlock or lock wait timeout
// (the server rolled it back), at most ten times.
var retrier = &storekit.Retrier{Retryable: retryable, Max: 10}

// retry runs fn again after a deadlock or lock wait timeout, with a short
// jittered backoff, until it gives another answer or ctx ends.
func retry(ctx context.Context, fn func() error) error { return retrier.Do(ctx, fn) }

// execer is what *sql.DB, *sql.Conn and *sql.Tx have in common.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// exec runs one statement (again after a deadlock) and returns the rows it
// matched and the LAST_INSERT_ID it reported.
func exec(ctx context.Context, q execer, query string, args ...any) (affected, lastID int64, err error) {
	err = retry(ctx, func() error {
		res, err := q.ExecContext(ctx, query, args...)
		if err != nil {
			return err
		}
		if affected, err = res.RowsAffected(); err != nil {
			return err
		}
		lastID, err = res.LastInsertId()
		return err
	})
	return affected, lastID, err
}

// query runs one statement (again after a deadlock) and calls each for
// every row.
func query(ctx context.Context, q execer, query string, args []any, each func(*sql.Rows) error) error {
	return retry(ctx, func() error {
		rows, err := q.QueryContext(ctx, query, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			if err := each(rows); err != nil {
				return err
			}
		}
		return rows.Err()
	})
}

// recScan receives the columns of recordCols.
type recScan struct {
	name, holder string
	epoch        int64
	rem, ttl     int64
	meta         []byte
}

func (x *recScan) dest() []any { return []any{&x.name, &x.holder, &x.epoch, &x.rem, &x.ttl, &x.meta} }

func (x *recScan) record() store.Record {
	r := store.Record{
		Term:      store.Term{Name: x.name, Holder: x.holder, Token: x.epoch},
		Remaining: micros(x.rem),
		TTL:       micros(x.ttl),
		Metadata:  string(x.meta),
	}
	if r.Holder == "" && r.Remaining > 0 {
		// A free row has no time left, whatever expires_at says.
		r.Remaining = 0
	}
	return r
}

// micros converts microseconds to a duration, clamped to ±100 years (a
// free row's expiry is the year 1000).
func micros(us int64) time.Duration {
	const limit = int64(100 * 365 * 24 * time.Hour / time.Microsecond)
	us = max(-limit, min(limit, us))
	return time.Duration(us) * time.Microsecond
}

func ttlMicros(ttl time.Duration) int64 { return int64(ttl / time.Microsecond) }

// maxAcquireRounds bounds how often Acquire goes round "the conditional
// UPDATE matched nothing, yet the row read after it is free" (it changed in
// between) or "the INSERT of a new name met a row inserted meanwhile".
const maxAcquireRounds = 10

// grantKind picks the grant statements: a lease (expiring), a lease
// granted only while the name's queue holds no live place
// (AcquireUnqueued), or a GET_LOCK term (a held row with no expiry of its
// own).
type grantKind int

const (
	grantLease grantKind = iota
	grantUnqueued
	grantLock
)

// grant makes a new term of name for holder: one conditional UPDATE whose
// OK packet carries the new epoch (LAST_INSERT_ID(expr)); for a name never
// granted, one INSERT. If the UPDATE matches no row, one read reports the
// live term with ErrHeld (with grantUnqueued, a row that the read finds
// free, or this holder's, was refused for a place queued: ErrQueued). If
// the guard refuses the grant below the name's high-water mark (a row lost
// and re-created at a lower epoch), the store reads the mark and asks
// again above it.
func (s *Store) grant(ctx context.Context, q execer, op, name, holder string, ttl time.Duration, metadata string, kind grantKind) (store.Record, error) {
	var floor int64
	us := ttlMicros(ttl)
	for range maxAcquireRounds {
		var n, token int64
		var err error
		switch kind {
		case grantLease:
			n, token, err = s.execID(ctx, q, s.sql.acquire, floor, holder, us, metadata, us, floor, name, holder)
		case grantUnqueued:
			n, token, err = s.execID(ctx, q, s.sql.acquireUnqueued, floor, holder, us, metadata, us, floor, name, holder)
		default:
			n, token, err = s.execID(ctx, q, s.sql.acquireLock, floor, holder, metadata, floor, name, holder)
		}
		if isHighWater(err) {
			if floor, err = s.readFloor(ctx, q, op, name, floor); err != nil {
				return store.Record{}, err
			}
			continue
		}
		if err != nil {
			return store.Record{}, s.opErr(op, err)
		}
		if n == 1 {
			return s.granted(name, holder, token, ttl, metadata, kind), nil
		}
		cur, found, err := s.get(ctx, q, name)
		if err != nil {
			return store.Record{}, s.opErr(op, err)
		}
		switch {
		case !found:
			switch kind {
			case grantLease:
				_, token, err = s.execID(ctx, q, s.sql.insert, name, holder, floor, us, metadata, us, floor)
			case grantUnqueued:
				n, token, err = s.execID(ctx, q, s.sql.insertUnqueued, name, holder, floor, us, metadata, us, floor, name)
				if err == nil && n != 1 {
					return store.Record{}, kit.Wrap(op, store.ErrQueued)
				}
			default:
				_, token, err = s.execID(ctx, q, s.sql.insertLock, name, holder, floor, metadata, floor)
			}
			switch {
			case isDupKey(err):
				continue // inserted by another meanwhile: take the UPDATE path
			case isHighWater(err):
				if floor, err = s.readFloor(ctx, q, op, name, floor); err != nil {
					return store.Record{}, err
				}
				continue
			case err != nil:
				return store.Record{}, s.opErr(op, err)
			}
			return s.granted(name, holder, token, ttl, metadata, kind), nil
		case cur.Token < 0:
			return store.Record{}, kit.Errorf(op, "epoch is %d: %w", cur.Token, ErrBadRow)
		case cur.Holder != "" && cur.Holder != holder && cur.Remaining > 0:
			return cur, kit.Errorf(op, "held by %s: %w", cur.Holder, store.ErrHeld)
		case kind == grantUnqueued:
			// Free, expired or this holder's, and not granted: a place is
			// queued (or the row changed meanwhile; the caller queues and
			// asks again).
			return store.Record{}, kit.Wrap(op, store.ErrQueued)
		}
	}
	return store.Record{}, kit.Errorf(op, "the row kept changing between the conditional UPDATE and the read (%d rounds); nothing was granted by the last round, retry later", maxAcquireRounds)
}

// execID runs a grant (an UPDATE or INSERT that sets the epoch with
// LAST_INSERT_ID(expr)) and returns the rows it matched and the session's
// LAST_INSERT_ID, read by a SELECT on the same connection: MariaDB's OK
// packet reports 0 for it when the table has triggers. On the store's own
// pool both statements go in one round trip.
func (s *Store) execID(ctx context.Context, q execer, query string, args ...any) (n, id int64, err error) {
	if s.multi {
		err = retry(ctx, func() error {
			return second(ctx, q, query+`; SELECT ROW_COUNT(), LAST_INSERT_ID()`, args, &n, &id)
		})
		return n, id, err
	}
	run := func(c *sql.Conn) error {
		return retry(ctx, func() error {
			res, err := c.ExecContext(ctx, query, args...)
			if err != nil {
				return err
			}
			if n, err = res.RowsAffected(); err != nil || n != 1 {
				return err
			}
			return c.QueryRowContext(ctx, `SELECT LAST_INSERT_ID()`).Scan(&id)
		})
	}
	if c, ok := q.(*sql.Conn); ok {
		err = run(c)
	} else {
		err = s.withConn(ctx, run)
	}
	return n, id, err
}

// second runs two statements in one round trip and scans the one row of
// the second one's result into dest. No row: ErrNoRows.
func second(ctx context.Context, q execer, query string, args []any, dest ...any) error {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	// The driver skips the first statement's OK packet itself, if it can
	// (go-sql-driver does); otherwise move past it.
	if cols, err := rows.Columns(); err == nil && len(cols) == 0 && !rows.NextResultSet() {
		if err := rows.Err(); err != nil {
			return err
		}
		return errors.New("leasehold/mysql: the server returned one result for two statements")
	}
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return err
		}
		return sql.ErrNoRows
	}
	if err := rows.Scan(dest...); err != nil {
		return err
	}
	for rows.Next() {
	}
	return rows.Err()
}

func (s *Store) granted(name, holder string, token int64, ttl time.Duration, metadata string, kind grantKind) store.Record {
	t := store.Term{Name: name, Holder: holder, Token: token}
	if kind == grantLock {
		return store.Record{Term: t, Metadata: metadata}
	}
	// The server set expires_at to its own now + ttl, now being the
	// moment the statement began.
	return store.Record{Term: t, Remaining: ttl, TTL: ttl, Metadata: metadata}
}

// readFloor reads the high-water mark of name after the guard refused a
// grant at or below it. A mark no higher than the floor already tried
// means the guard and the table disagree: stop rather than loop.
func (s *Store) readFloor(ctx context.Context, q execer, op, name string, tried int64) (int64, error) {
	var top int64
	found := false
	err := query(ctx, q, s.sql.floor, []any{name}, func(r *sql.Rows) error {
		found = true
		return r.Scan(&top)
	})
	if err != nil {
		return 0, s.opErr(op, fmt.Errorf("read the high-water mark after the guard refused a grant below it: %w", err))
	}
	if !found || top <= tried {
		return 0, kit.Errorf(op, "the guard refused a grant below the high-water mark, but %s shows %d (tried above %d)", s.n.epochs, top, tried)
	}
	return top, nil
}

// Acquire implements store.Store.
func (s *Store) Acquire(ctx context.Context, name, holder string, ttl time.Duration, metadata string) (store.Record, error) {
	return s.acquire(ctx, name, holder, ttl, metadata, grantLease)
}

// AcquireUnqueued implements store.UnqueuedAcquirer: Acquire's statements
// with one more condition, that no live place is queued for the name
// (statements.acquireUnqueued). A refused grant costs one read more, which
// tells ErrHeld from ErrQueued.
func (s *Store) AcquireUnqueued(ctx context.Context, name, holder string, ttl time.Duration, metadata string) (store.Record, error) {
	return s.acquire(ctx, name, holder, ttl, metadata, grantUnqueued)
}

func (s *Store) acquire(ctx context.Context, name, holder string, ttl time.Duration, metadata string, kind grantKind) (store.Record, error) {
	if err := s.life.Check(ctx); err != nil {
		return store.Record{}, err
	}
	if err := kit.CheckAcquire(name, holder, ttl, metadata); err != nil {
		return store.Record{}, err
	}
	sent := time.Now()
	rec, err := s.grant(ctx, s.db, "acquire "+strconv.Quote(name), name, holder, ttl, metadata, kind)
	if err == nil {
		s.bells.hold(name, rec.Token, sent, ttl)
	}
	return rec, err
}

// Renew implements store.Store: one UPDATE naming the exact term.
func (s *Store) Renew(ctx context.Context, t store.Term, ttl time.Duration) (store.Record, error) {
	if err := s.life.Check(ctx); err != nil {
		return store.Record{}, err
	}
	if err := kit.CheckRenew(t, ttl); err != nil {
		return store.Record{}, err
	}
	op := "renew " + t.String()
	us := ttlMicros(ttl)
	sent := time.Now()
	if s.multi {
		var n int64
		var meta []byte
		err := retry(ctx, func() error {
			return second(ctx, s.db, s.sql.renew+`; `+s.sql.renewTail, []any{us, us, t.Name, t.Holder, t.Token, t.Name}, &n, &meta)
		})
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return store.Record{}, kit.Wrap(op, store.ErrNotHeld)
		case err != nil:
			return store.Record{}, s.opErr(op, err)
		case n != 1:
			return store.Record{}, kit.Wrap(op, store.ErrNotHeld)
		}
		// The server set expires_at to its own now + ttl, now being the
		// moment the statement began.
		s.bells.renewed(t.Name, t.Token, sent, ttl)
		return store.Record{Term: t, Remaining: ttl, TTL: ttl, Metadata: string(meta)}, nil
	}
	// A pool the caller opened: the UPDATE, then a read. With
	// clientFoundRows off, a renewal within the microsecond of the last one
	// changes no value and reports 0 rows: the read decides.
	if _, _, err := exec(ctx, s.db, s.sql.renew, us, us, t.Name, t.Holder, t.Token); err != nil {
		return store.Record{}, s.opErr(op, err)
	}
	cur, found, err := s.get(ctx, s.db, t.Name)
	if err != nil {
		return store.Record{}, s.opErr(op, err)
	}
	// Live now, so live when the UPDATE ran (an expired term is never
	// revived): the UPDATE matched it.
	if !found || cur.Term != t || !cur.Live() {
		return store.Record{}, kit.Wrap(op, store.ErrNotHeld)
	}
	s.bells.renewed(t.Name, t.Token, sent, ttl)
	return cur, nil
}

// Release implements store.Store: one UPDATE naming the exact term.
func (s *Store) Release(ctx context.Context, t store.Term) error {
	if err := s.life.Check(ctx); err != nil {
		return err
	}
	if err := kit.CheckRelease(t); err != nil {
		return err
	}
	op := "release " + t.String()
	n, _, err := exec(ctx, s.db, s.sql.release, t.Name, t.Holder, t.Token)
	if err != nil {
		return s.opErr(op, err)
	}
	if n != 1 {
		return kit.Wrap(op, store.ErrNotHeld)
	}
	s.hub.Notify(t.Name)
	s.bells.ended(t.Name, t.Token)
	return nil
}

// Get implements store.Store.
func (s *Store) Get(ctx context.Context, name string) (store.Record, error) {
	if err := s.life.Check(ctx); err != nil {
		return store.Record{}, err
	}
	op := "get " + strconv.Quote(name)
	if err := kit.CheckName(op, name); err != nil {
		return store.Record{}, err
	}
	rec, found, err := s.get(ctx, s.db, name)
	if err != nil {
		return store.Record{}, s.opErr(op, err)
	}
	if !found {
		return store.Record{}, kit.Wrap(op, store.ErrNotFound)
	}
	return rec, nil
}

func (s *Store) get(ctx context.Context, q execer, name string) (store.Record, bool, error) {
	var x recScan
	found := false
	err := query(ctx, q, s.sql.get, []any{name}, func(r *sql.Rows) error {
		found = true
		return r.Scan(x.dest()...)
	})
	return x.record(), found, err
}

// Close implements store.Store: it stops the watch poller and, for a store
// made by Open, OpenDSN or OpenURL, closes its pool. A pool given to NewDB
// is left open. No lease is released, and GET_LOCK locks taken from the
// store stay with their own connections until released.
func (s *Store) Close() error {
	return s.life.Close(func() error {
		s.hub.Close()
		s.poll.stop()
		s.bells.close()
		if s.ownDB {
			return s.db.Close()
		}
		return nil
	})
}

// scrubbed is a driver's error with the password removed from its message,
// still matching what it wraps (errors.As finds the *mysql.MySQLError).
type scrubbed struct {
	_ [0]func() // not comparable: spares the binary an equality function

	msg string
	err error
}

func (e *scrubbed) Error() string { return e.msg }
func (e *scrubbed) Unwrap() error { return e.err }
