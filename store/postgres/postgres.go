package postgres

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/storekit"
)

// MinTTL is the smallest TTL the store accepts. PostgreSQL keeps time to the
// microsecond; a lease shorter than a few round trips is useless anyway.
const MinTTL = 10 * time.Millisecond

var kit = storekit.Kit{Store: "postgres", MinTTL: MinTTL}

var (
	// ErrNotMigrated: the lease table (or its history table, columns or
	// trigger) does not exist yet. Create it with `leasehold migrate`,
	// (*Store).Migrate, or Options.CreateIfMissing.
	ErrNotMigrated = errors.New("leasehold/postgres: lease table missing or not migrated")
	// ErrBadRow: the lease row holds values no grant may be made from (a
	// negative epoch, or an epoch at the bigint limit): it was edited by
	// hand. Nothing was changed. An operator must repair the row; leasehold
	// will not guess a token that might be lower than one already granted.
	ErrBadRow = errors.New("leasehold/postgres: lease row edited into values leasehold will not grant from")
	// ErrNoWatch: the store cannot push changes (Options.NoWatch, a
	// database/sql driver that is not pgx's, or a table without the trigger
	// Migrate installs). Waiters poll instead.
	ErrNoWatch = errors.New("leasehold/postgres: watch unavailable")
)

// Store is the PostgreSQL lease store. It implements store.Store and the
// optional store.Watcher, store.BatchRenewer, store.Queuer, store.Lister,
// store.ForceReleaser, store.Migrator, store.MigrationChecker and
// store.Historian. It is safe for
// concurrent use.
type Store struct {
	q             querier
	schema, table string // as configured; schema may be empty
	qtable, qhist string // quoted
	sql           statements
	opts          Options
	closePool     func() // nil when the caller owns the pool

	// noLeaseFunctions is set once a call of a lease function found it
	// missing or not allowed: acquire, renew and release then send their
	// statements themselves (leaseQuery).
	noLeaseFunctions atomic.Bool

	life storekit.Lifecycle
	hub  storekit.Hub // the watches, woken by the listener
	mu   sync.Mutex   // guards lis
	lis  *listener
	// beforeListen, if set, runs before each LISTEN the listener sends
	// (tests hold a LISTEN back with it).
	beforeListen func()
}

var (
	_ store.Store            = (*Store)(nil)
	_ store.Watcher          = (*Store)(nil)
	_ store.BatchRenewer     = (*Store)(nil)
	_ store.Lister           = (*Store)(nil)
	_ store.ForceReleaser    = (*Store)(nil)
	_ store.Migrator         = (*Store)(nil)
	_ store.MigrationChecker = (*Store)(nil)
	_ store.Historian        = (*Store)(nil)
)

// opErr wraps a driver error once, naming the operation, and turns the
// errors with a definite meaning into the store's sentinels.
func (s *Store) opErr(op, what string, err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "42P01": // undefined_table
			return kit.NoTable(op+" "+what, pe.Message, s.qtable, ErrNotMigrated)
		case "42703", "42P10": // undefined_column, no unique constraint for ON CONFLICT
			return kit.OldTable(op+" "+what, pe.Message, s.qtable, ErrNotMigrated)
		case "22003": // numeric_value_out_of_range: epoch + 1 overflowed
			if op == "acquire" {
				return kit.Errorf(op+" "+what, "the epoch is at the bigint limit: %w", ErrBadRow)
			}
		}
	}
	return kit.Wrap(op+" "+what, s.life.ClosedOr(err))
}

// leaseQuery runs acquire, renew or release: through its lease function (fn,
// the cheaper call, see leaseFunctions) unless the database has
// none, else as the statement itself (raw). A call that finds the function
// missing (a database migrated by an earlier version) or not allowed to
// this role fails before it runs anything, so the statement sent after it
// is the only one that ran; every later call sends the statement at once.
func (s *Store) leaseQuery(ctx context.Context, fn, raw string, args []any, each func(rowScanner) error) error {
	if !s.noLeaseFunctions.Load() {
		err := s.q.query(ctx, fn, args, each)
		if !leaseFunctionUnusable(err) {
			return err
		}
		s.noLeaseFunctions.Store(true)
	}
	return s.q.query(ctx, raw, args, each)
}

// leaseFunctionUnusable reports an error that says a lease function cannot be
// called: undefined_function, or insufficient_privilege naming the function
// (one raised inside it, on the table, names the table and is the caller's
// own to see). The code is read through SQLState, which pgx's errors and
// those of other database/sql drivers for PostgreSQL (lib/pq) have, so that
// NewDB with another driver also falls back to the statements.
func leaseFunctionUnusable(err error) bool {
	var se interface{ SQLState() string }
	if !errors.As(err, &se) {
		return false
	}
	switch se.SQLState() {
	case "42883":
		return true
	case "42501":
		return strings.Contains(err.Error(), "function")
	}
	return false
}

// retryable reports a serialization failure or deadlock: the statement's
// transaction was rolled back, nothing was written, and it may be sent again.
// Pools whose default isolation is REPEATABLE READ or SERIALIZABLE get these
// when two statements race on one row.
func retryable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40001" || pe.Code == "40P01")
}

// retrier sends a statement again after a serialization failure or deadlock
// (the server rolled it back), at most ten times.
var retrier = &storekit.Retrier{Retryable: retryable, Max: 10}

// retry runs fn again after a serialization failure or deadlock, with a
// short jittered backoff, until it gives another answer or ctx ends.
func (s *Store) retry(ctx context.Context, fn func() error) error { return retrier.Do(ctx, fn) }

// recScan receives the columns of recordCols.
type recScan struct {
	_ [0]func() // not comparable: spares the binary an equality function

	name, holder, meta string
	epoch              int64
	rem, ttl           float64
}

func (x *recScan) dest() []any { return []any{&x.name, &x.holder, &x.epoch, &x.rem, &x.ttl, &x.meta} }

func (x *recScan) record() store.Record {
	r := store.Record{
		Term:      store.Term{Name: x.name, Holder: x.holder, Token: x.epoch},
		Remaining: micros(x.rem),
		TTL:       micros(x.ttl),
		Metadata:  x.meta,
	}
	if r.Holder == "" && r.Remaining > 0 {
		// A free row (NULL or empty holder) has no time left, whatever
		// expires_at says: nobody holds it.
		r.Remaining = 0
	}
	return r
}

// micros converts microseconds (possibly ±Inf from an infinite expiry) to a
// duration, clamped to ±100 years.
func micros(us float64) time.Duration {
	const limit = float64(100 * 365 * 24 * time.Hour / time.Microsecond)
	switch {
	case math.IsNaN(us):
		return 0
	case us > limit:
		us = limit
	case us < -limit:
		us = -limit
	}
	return time.Duration(math.Round(us)) * time.Microsecond
}

func ttlMicros(ttl time.Duration) float64 { return float64(ttl / time.Microsecond) }

// maxAcquireRounds bounds how often Acquire goes round "the compare-and-swap
// matched nothing, yet the row read after it is free": each time the row
// changed between the two statements.
const maxAcquireRounds = 10

// Acquire implements store.Store in one compare-and-swap statement. If it
// matches no row, a second statement reads the row to report the live term
// with ErrHeld; if that row turns out free (it changed in between), Acquire
// tries again.
func (s *Store) Acquire(ctx context.Context, name, holder string, ttl time.Duration, metadata string) (store.Record, error) {
	return s.acquire(ctx, name, holder, ttl, metadata, false)
}

// acquire is Acquire, or with unqueued AcquireUnqueued (queue.go).
func (s *Store) acquire(ctx context.Context, name, holder string, ttl time.Duration, metadata string, unqueued bool) (store.Record, error) {
	if err := s.life.Check(ctx); err != nil {
		return store.Record{}, err
	}
	if err := kit.CheckAcquire(name, holder, ttl, metadata); err != nil {
		return store.Record{}, err
	}
	what := strconv.Quote(name)
	fn, raw := s.sql.acquireFn, s.sql.acquire
	if unqueued {
		fn, raw = s.sql.acquireUnqueuedFn, s.sql.acquireUnqueued
	}
	for range maxAcquireRounds {
		var x recScan
		granted := false
		args := []any{name, holder, ttlMicros(ttl), metadata}
		scan := func(r rowScanner) error {
			granted = true
			return r.Scan(x.dest()...)
		}
		err := s.retry(ctx, func() error {
			granted = false
			return s.leaseQuery(ctx, fn, raw, args, scan)
		})
		if err != nil {
			return store.Record{}, s.opErr("acquire", what, err)
		}
		if granted {
			return x.record(), nil
		}
		cur, found, err := s.get(ctx, name)
		if err != nil {
			return store.Record{}, s.opErr("acquire", what, err)
		}
		switch {
		case !found && !unqueued:
			// Deleted by hand since: insert it.
		case found && cur.Token < 0:
			return store.Record{}, kit.Errorf("acquire "+what, "epoch is %d: %w", cur.Token, ErrBadRow)
		case found && cur.Holder != "" && cur.Holder != holder && cur.Remaining > 0:
			return cur, kit.Errorf("acquire "+what, "held by %s: %w", cur.Holder, store.ErrHeld)
		case unqueued:
			// A place is queued (or the row changed meanwhile).
			return store.Record{}, kit.Wrap("acquire "+what, store.ErrQueued)
		}
	}
	return store.Record{}, kit.Errorf("acquire "+what, "the row kept changing between the compare-and-swap and the read (%d rounds); nothing was granted by the last round, retry later", maxAcquireRounds)
}

// Renew implements store.Store: one statement naming the exact term.
func (s *Store) Renew(ctx context.Context, t store.Term, ttl time.Duration) (store.Record, error) {
	if err := s.life.Check(ctx); err != nil {
		return store.Record{}, err
	}
	if err := kit.CheckRenew(t, ttl); err != nil {
		return store.Record{}, err
	}
	var x recScan
	found := false
	err := s.retry(ctx, func() error {
		found = false
		return s.leaseQuery(ctx, s.sql.renewFn, s.sql.renew, []any{t.Name, t.Holder, t.Token, ttlMicros(ttl)}, func(r rowScanner) error {
			found = true
			return r.Scan(x.dest()...)
		})
	})
	if err != nil {
		return store.Record{}, s.opErr("renew", t.String(), err)
	}
	if !found {
		return store.Record{}, kit.Wrap("renew "+t.String(), store.ErrNotHeld)
	}
	return x.record(), nil
}

// Release implements store.Store: one statement naming the exact term.
func (s *Store) Release(ctx context.Context, t store.Term) error {
	if err := s.life.Check(ctx); err != nil {
		return err
	}
	if err := kit.CheckRelease(t); err != nil {
		return err
	}
	found := false
	err := s.retry(ctx, func() error {
		found = false
		return s.leaseQuery(ctx, s.sql.releaseFn, s.sql.release, []any{t.Name, t.Holder, t.Token}, func(r rowScanner) error {
			found = true
			var epoch int64
			return r.Scan(&epoch)
		})
	})
	if err != nil {
		return s.opErr("release", t.String(), err)
	}
	if !found {
		return kit.Wrap("release "+t.String(), store.ErrNotHeld)
	}
	return nil
}

// Get implements store.Store.
func (s *Store) Get(ctx context.Context, name string) (store.Record, error) {
	if err := s.life.Check(ctx); err != nil {
		return store.Record{}, err
	}
	if err := kit.CheckName("get", name); err != nil {
		return store.Record{}, err
	}
	rec, found, err := s.get(ctx, name)
	if err != nil {
		return store.Record{}, s.opErr("get", strconv.Quote(name), err)
	}
	if !found {
		return store.Record{}, kit.Wrap(fmt.Sprintf("get %q", name), store.ErrNotFound)
	}
	return rec, nil
}

func (s *Store) get(ctx context.Context, name string) (store.Record, bool, error) {
	var x recScan
	found := false
	err := s.retry(ctx, func() error {
		found = false
		return s.q.query(ctx, s.sql.get, []any{name}, func(r rowScanner) error {
			found = true
			return r.Scan(x.dest()...)
		})
	})
	return x.record(), found, err
}

// RenewMany implements store.BatchRenewer: every term in one UPDATE, each
// still scoped to its exact (name, holder, epoch). A term listed twice gets
// the same answer twice.
func (s *Store) RenewMany(ctx context.Context, terms []store.Term, ttl time.Duration) ([]store.Record, []error, error) {
	if err := s.life.Check(ctx); err != nil {
		return nil, nil, err
	}
	if err := kit.CheckTTL("renew", ttl); err != nil {
		return nil, nil, err
	}
	recs := make([]store.Record, len(terms))
	errs := make([]error, len(terms))
	pos := make([]int, len(terms))
	index := make(map[store.Term]int, len(terms))
	var names, holders []string
	var epochs []int64
	for i, t := range terms {
		if errs[i] = kit.CheckTerm("renew", t); errs[i] != nil {
			pos[i] = -1
			continue
		}
		j, ok := index[t]
		if !ok {
			j = len(names)
			index[t] = j
			names, holders, epochs = append(names, t.Name), append(holders, t.Holder), append(epochs, t.Token)
		}
		pos[i] = j
	}
	if len(names) == 0 {
		return recs, errs, nil
	}
	got := make([]store.Record, len(names))
	renewed := make([]bool, len(names))
	args := []any{textArray(names), textArray(holders), int64Array(epochs), ttlMicros(ttl)}
	err := s.retry(ctx, func() error {
		clear(renewed)
		return s.q.query(ctx, s.sql.renewMany, args, func(r rowScanner) error {
			var ord int64
			var x recScan
			if err := r.Scan(append([]any{&ord}, x.dest()...)...); err != nil {
				return err
			}
			j := int(ord - 1)
			if j < 0 || j >= len(got) {
				return fmt.Errorf("renew batch returned ordinal %d of %d", ord, len(got))
			}
			got[j], renewed[j] = x.record(), true
			return nil
		})
	})
	if err != nil {
		return nil, nil, s.opErr("renew", fmt.Sprintf("batch of %d", len(names)), err)
	}
	for i, t := range terms {
		switch j := pos[i]; {
		case j < 0:
		case renewed[j]:
			recs[i] = got[j]
		default:
			errs[i] = kit.Wrap("renew "+t.String(), store.ErrNotHeld)
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
	err := s.retry(ctx, func() error {
		out = out[:0]
		return s.q.query(ctx, s.sql.list, nil, func(r rowScanner) error {
			var x recScan
			if err := r.Scan(x.dest()...); err != nil {
				return err
			}
			out = append(out, x.record())
			return nil
		})
	})
	if err != nil {
		return nil, s.opErr("list", s.qtable, err)
	}
	return out, nil
}

// ForceRelease implements store.ForceReleaser: it ends whatever term of name
// is live, keeps the epoch, and returns the record as it was.
func (s *Store) ForceRelease(ctx context.Context, name string) (store.Record, error) {
	if err := s.life.Check(ctx); err != nil {
		return store.Record{}, err
	}
	if err := kit.CheckName("force-release", name); err != nil {
		return store.Record{}, err
	}
	what := strconv.Quote(name)
	var x recScan
	found := false
	err := s.retry(ctx, func() error {
		found = false
		return s.q.query(ctx, s.sql.forceRelease, []any{name}, func(r rowScanner) error {
			found = true
			return r.Scan(x.dest()...)
		})
	})
	if err != nil {
		return store.Record{}, s.opErr("force-release", what, err)
	}
	if found {
		return x.record(), nil
	}
	_, exists, err := s.get(ctx, name)
	if err != nil {
		return store.Record{}, s.opErr("force-release", what, err)
	}
	if !exists {
		return store.Record{}, kit.Wrap("force-release "+what, store.ErrNotFound)
	}
	return store.Record{}, kit.Errorf("force-release "+what, "no live term: %w", store.ErrNotHeld)
}

// History implements store.Historian from the history table the trigger
// fills: grants and releases by leasehold and by raw SQL clients alike.
// Events: "acquired", "expired-takeover", "released", "force-released". At
// most 1000 entries are kept per lease (older ones are pruned now and then).
func (s *Store) History(ctx context.Context, name string, limit int) ([]store.HistoryEntry, error) {
	if err := s.life.Check(ctx); err != nil {
		return nil, err
	}
	if err := kit.CheckName("history", name); err != nil {
		return nil, err
	}
	if limit <= 0 {
		return nil, kit.Invalid("history", "limit %d is not positive", limit)
	}
	var out []store.HistoryEntry
	err := s.retry(ctx, func() error {
		out = out[:0]
		return s.q.query(ctx, s.sql.history, []any{name, int64(limit)}, func(r rowScanner) error {
			var e store.HistoryEntry
			if err := r.Scan(&e.Name, &e.Holder, &e.Token, &e.Event, &e.At, &e.Metadata); err != nil {
				return err
			}
			out = append(out, e)
			return nil
		})
	})
	if err != nil {
		return nil, s.opErr("history", strconv.Quote(name), err)
	}
	return out, nil
}
