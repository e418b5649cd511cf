package mysql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/storekit"
)

// MinTTL is the smallest TTL the store accepts. DATETIME(6) keeps time to
// the microsecond; a lease shorter than a few round trips is useless anyway.
const MinTTL = 10 * time.Millisecond

var kit = storekit.Kit{Store: "mysql", MinTTL: MinTTL}

var (
	// ErrNotMigrated: the lease table (or its history or high-water table,
	// or a column) does not exist yet. Create it with `leasehold migrate`,
	// (*Store).Migrate, or Options.CreateIfMissing.
	ErrNotMigrated = errors.New("leasehold/mysql: lease table missing or not migrated")
	// ErrBadRow: the lease row holds values no grant may be made from (a
	// negative epoch, or an epoch at the BIGINT limit): it was edited by
	// hand. Nothing was changed. An operator must repair the row; leasehold
	// will not guess a token that might be lower than one already granted.
	ErrBadRow = errors.New("leasehold/mysql: lease row edited into values leasehold will not grant from")
	// ErrNoWatch: the store was opened with Options.NoWatch; waiters poll
	// on their own retry period instead.
	ErrNoWatch = errors.New("leasehold/mysql: watch turned off")
)

// Options configure a Store. The zero value is the default: the table
// leader_lease in the connection's database, not created on open, watched
// by polling every DefaultWatchInterval.
type Options struct {
	// Table is the lease table: a plain SQL identifier (lower-case letters,
	// digits, '_', at most 48 bytes) in the connection's database. Default
	// "leader_lease". It is quoted, never interpolated raw; a name such as
	// "x; DROP TABLE y" is refused with store.ErrInvalid.
	Table string
	// CreateIfMissing runs Migrate when the store is built. Migrate is
	// idempotent and runs no DDL when the schema is current.
	CreateIfMissing bool
	// NoWatch turns Watch off (it returns ErrNoWatch): waiters then learn
	// of a release only at their own retry period.
	NoWatch bool
	// WatchInterval is how often the store reads the leases someone waits
	// for (one query for all of them), while someone waits. Zero:
	// DefaultWatchInterval. A release is seen on average half of it after
	// it happened (at once for a release made through the same Store).
	WatchInterval time.Duration
}

// DefaultWatchInterval is how often a store reads the leases its waiters
// watch. BENCHMARKS.md and the README give what it costs and buys.
const DefaultWatchInterval = 25 * time.Millisecond

// Store is the MySQL/MariaDB lease store. It implements store.Store and the
// optional store.Watcher, store.BatchRenewer, store.Lister,
// store.ForceReleaser, store.Migrator, store.Historian and store.Limiter.
// It is safe for concurrent use.
type Store struct {
	db    *sql.DB
	ownDB bool // Close closes db
	table string
	n     names
	sql   statements
	opts  Options

	// multi: the pool is the store's own, with multiStatements on, so a
	// grant or renewal and the read of its result go in one round trip.
	multi bool

	life storekit.Lifecycle
	hub  storekit.Hub
	poll *poller
}

var (
	_ store.Store         = (*Store)(nil)
	_ store.Watcher       = (*Store)(nil)
	_ store.BatchRenewer  = (*Store)(nil)
	_ store.Lister        = (*Store)(nil)
	_ store.ForceReleaser = (*Store)(nil)
	_ store.Migrator      = (*Store)(nil)
	_ store.Historian     = (*Store)(nil)
	_ store.Limiter       = (*Store)(nil)
)

// Limits reports the store's bounds on timings (store.Limiter): leases of
// at least MinTTL, judged at microsecond resolution on the server's clock.
func (s *Store) Limits() store.Limits {
	return store.Limits{MinLeaseDuration: MinTTL, TimeResolution: 0}
}

// Open connects to the server cfg names (a go-sql-driver/mysql Config, such
// as one from mysql.ParseDSN), checks that it answers, and returns a store
// that owns the pool: Close closes it. The store sets on its copy of cfg
// what its statements need: ClientFoundRows (an UPDATE that matched a row
// reports it even if no value changed), InterpolateParams (one round trip
// per statement, no server-side prepared statements) and ParseTime off.
// Errors never show the password.
func Open(ctx context.Context, cfg *mysql.Config, opts Options) (*Store, error) {
	if cfg == nil {
		return nil, kit.Invalid("open", "config is nil")
	}
	if _, err := tableName(opts.Table); err != nil {
		return nil, err
	}
	c := cfg.Clone()
	c.ClientFoundRows = true
	c.InterpolateParams = true
	c.ParseTime = false
	// Two statements in one round trip: the grant or renewal, and the
	// read of its result (MariaDB's OK packet reports 0 for
	// LAST_INSERT_ID(expr) when the table has triggers). Only the store's
	// own statements run on this pool, each built by the store with its
	// arguments escaped by the driver.
	c.MultiStatements = true
	conn, err := mysql.NewConnector(c)
	if err != nil {
		return nil, kit.Invalid("open", "%s", scrubCfg(c, err.Error()))
	}
	db := sql.OpenDB(conn)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, kit.Errorf("connect to "+redactCfg(c), "%w", &scrubbed{msg: scrubCfg(c, err.Error()), err: err})
	}
	s, err := newStore(ctx, db, true, true, opts)
	if err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
}

// OpenDSN is Open with a go-sql-driver/mysql DSN
// ("user:password@tcp(host:3306)/db?tls=true").
func OpenDSN(ctx context.Context, dsn string, opts Options) (*Store, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, kit.Invalid("open", "the DSN does not parse: %s", scrubDSN(dsn, err.Error()))
	}
	return Open(ctx, cfg, opts)
}

// NewDB returns a store on a database/sql pool the caller owns, opened
// with github.com/go-sql-driver/mysql: Close does not close it. Open the
// pool with interpolateParams=true, or every statement costs two round
// trips (prepare, execute); clientFoundRows=true saves a read after a
// renewal that changed nothing (the store checks either way).
func NewDB(ctx context.Context, db *sql.DB, opts Options) (*Store, error) {
	if db == nil {
		return nil, kit.Invalid("open", "database is nil")
	}
	return newStore(ctx, db, false, false, opts)
}

func newStore(ctx context.Context, db *sql.DB, own, multi bool, opts Options) (*Store, error) {
	table, err := tableName(opts.Table)
	if err != nil {
		return nil, err
	}
	if opts.WatchInterval < 0 {
		return nil, kit.Invalid("open", "watch interval %v is negative", opts.WatchInterval)
	}
	if opts.WatchInterval == 0 {
		opts.WatchInterval = DefaultWatchInterval
	}
	n := newNames(table)
	s := &Store{db: db, ownDB: own, multi: multi, table: table, n: n, sql: newStatements(n), opts: opts}
	s.poll = newPoller(s)
	s.hub.Idle = s.poll.idle
	if opts.CreateIfMissing {
		if err := s.Migrate(ctx); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func tableName(table string) (string, error) {
	if table == "" {
		table = DefaultTable
	}
	if err := kit.SQLIdent("open", "table", table, maxTableLen); err != nil {
		return "", err
	}
	return table, nil
}

// Table returns the lease table's name as the store quotes it in SQL.
func (s *Store) Table() string { return s.n.table }

// DB is the pool the store uses.
func (s *Store) DB() *sql.DB { return s.db }

// opErr wraps a driver error once, naming the operation, and turns the
// errors with a definite meaning into the store's sentinels.
func (s *Store) opErr(op string, err error) error {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case errNoTable:
			return kit.Errorf(op, "%s (table %s): %w; create it with `leasehold migrate`, (*mysql.Store).Migrate, or Options.CreateIfMissing", me.Message, s.n.table, ErrNotMigrated)
		case errBadField:
			return kit.Errorf(op, "%s: table %s is not a migrated lease table: %w; `leasehold migrate` or (*mysql.Store).Migrate adds what is missing", me.Message, s.n.table, ErrNotMigrated)
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

const maxRetries = 10

// retries counts statements sent again, for tests.
var retries atomic.Int64

// retry runs fn again after a deadlock or lock wait timeout, with a short
// jittered backoff, until it gives another answer or ctx ends.
func retry(ctx context.Context, fn func() error) error {
	for attempt := 0; ; attempt++ {
		err := fn()
		if err == nil || attempt == maxRetries || !retryable(err) {
			return err
		}
		retries.Add(1)
		d := time.Duration(1<<min(attempt, 6)) * time.Millisecond
		d += time.Duration(rand.Int64N(int64(d)))
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

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

// grantKind picks the grant statements: a lease (expiring) or a GET_LOCK
// term (a held row with no expiry of its own).
type grantKind int

const (
	grantLease grantKind = iota
	grantLock
)

// grant makes a new term of name for holder: one conditional UPDATE whose
// OK packet carries the new epoch (LAST_INSERT_ID(expr)); for a name never
// granted, one INSERT. If the UPDATE matches no row, one read reports the
// live term with ErrHeld. If the guard refuses the grant below the name's
// high-water mark (a row lost and re-created at a lower epoch), the store
// reads the mark and asks again above it.
func (s *Store) grant(ctx context.Context, q execer, op, name, holder string, ttl time.Duration, metadata string, kind grantKind) (store.Record, error) {
	var floor int64
	us := ttlMicros(ttl)
	for range maxAcquireRounds {
		var n, token int64
		var err error
		if kind == grantLease {
			n, token, err = s.execID(ctx, q, s.sql.acquire, floor, holder, us, metadata, us, floor, name, holder)
		} else {
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
			if kind == grantLease {
				_, token, err = s.execID(ctx, q, s.sql.insert, name, holder, floor, us, metadata, us, floor)
			} else {
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
	if err := s.life.Check(ctx); err != nil {
		return store.Record{}, err
	}
	if err := kit.CheckAcquire(name, holder, ttl, metadata); err != nil {
		return store.Record{}, err
	}
	return s.grant(ctx, s.db, "acquire "+strconv.Quote(name), name, holder, ttl, metadata, grantLease)
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

// Close implements store.Store: it stops the watch poller and, for a store
// made by Open, OpenDSN or OpenURL, closes its pool. A pool given to NewDB
// is left open. No lease is released, and GET_LOCK locks taken from the
// store stay with their own connections until released.
func (s *Store) Close() error {
	return s.life.Close(func() error {
		s.hub.Close()
		s.poll.stop()
		if s.ownDB {
			return s.db.Close()
		}
		return nil
	})
}

// scrubbed is a driver's error with the password removed from its message,
// still matching what it wraps (errors.As finds the *mysql.MySQLError).
type scrubbed struct {
	msg string
	err error
}

func (e *scrubbed) Error() string { return e.msg }
func (e *scrubbed) Unwrap() error { return e.err }
