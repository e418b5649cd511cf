package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold/store"
)

// MinTTL is the smallest TTL the store accepts. PostgreSQL keeps time to the
// microsecond; a lease shorter than a few round trips is useless anyway.
const MinTTL = 10 * time.Millisecond

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

// Options configure a Store. The zero value is the default: the table
// leader_lease found by the connection's search_path, not created on open,
// with a watch.
type Options struct {
	// Table is the lease table: a plain SQL identifier (lower-case letters,
	// digits, '_', at most 55 bytes), optionally qualified as "schema.table".
	// Default "leader_lease". It is quoted, never interpolated raw; a name
	// such as "x; DROP TABLE y" is refused with store.ErrInvalid.
	Table string
	// Schema qualifies Table (a plain identifier). Empty: the search_path
	// of each connection decides.
	Schema string
	// CreateIfMissing runs Migrate when the store is built. Migrate is
	// idempotent and does nothing (needs no DDL privilege) when the table is
	// current.
	CreateIfMissing bool
	// NoWatch turns off the LISTEN connection: Watch returns ErrNoWatch and
	// waiters poll. Use it where no session-mode connection can be had.
	NoWatch bool
	// SessionConfig is where the store opens its own session connections:
	// the one LISTEN connection per store, and one per advisory lock. Nil:
	// the config of the pool or connection given. Behind a transaction-mode
	// pooler point it at the server or at a session-mode pool.
	SessionConfig *pgx.ConnConfig
}

// Store is the PostgreSQL lease store. It implements store.Store and the
// optional store.Watcher, store.BatchRenewer, store.Lister,
// store.ForceReleaser, store.Migrator and store.Historian. It is safe for
// concurrent use.
type Store struct {
	q             querier
	schema, table string // as configured; schema may be empty
	qtable, qhist string // quoted
	sql           statements
	opts          Options
	closePool     func() // nil when the caller owns the pool

	mu      sync.Mutex
	closed  bool
	closing chan struct{}
	lis     *listener
}

var (
	_ store.Store         = (*Store)(nil)
	_ store.Watcher       = (*Store)(nil)
	_ store.BatchRenewer  = (*Store)(nil)
	_ store.Lister        = (*Store)(nil)
	_ store.ForceReleaser = (*Store)(nil)
	_ store.Migrator      = (*Store)(nil)
	_ store.Historian     = (*Store)(nil)
)

// New returns a store on a pgx pool the caller owns: Close does not close
// the pool.
func New(ctx context.Context, pool *pgxpool.Pool, opts Options) (*Store, error) {
	if pool == nil {
		return nil, fmt.Errorf("leasehold/postgres: pool is nil: %w", store.ErrInvalid)
	}
	def := pool.Config().ConnConfig.DefaultQueryExecMode
	q := &pgxQuerier{db: pool, mode: execMode(def), cfg: func() *pgx.ConnConfig { return pool.Config().ConnConfig }}
	return newStore(ctx, q, opts, nil)
}

// NewConn returns a store on one pgx connection the caller owns. Calls are
// serialised on it; Close does not close it. The connection must not be
// used by anyone else while the store uses it. Watch opens one more
// connection, with the same config, for LISTEN (Options.NoWatch prevents it).
func NewConn(ctx context.Context, conn *pgx.Conn, opts Options) (*Store, error) {
	if conn == nil {
		return nil, fmt.Errorf("leasehold/postgres: connection is nil: %w", store.ErrInvalid)
	}
	q := &pgxQuerier{db: conn, mode: execMode(conn.Config().DefaultQueryExecMode), mu: new(sync.Mutex), cfg: conn.Config}
	return newStore(ctx, q, opts, nil)
}

// NewDB returns a store on a database/sql pool the caller owns, such as one
// opened with the pgx stdlib driver (sql.Open("pgx", dsn)). Close does not
// close it. With another driver, the lease statements work, and Watch and
// advisory locks need Options.SessionConfig.
func NewDB(ctx context.Context, db *sql.DB, opts Options) (*Store, error) {
	if db == nil {
		return nil, fmt.Errorf("leasehold/postgres: database is nil: %w", store.ErrInvalid)
	}
	return newStore(ctx, newSQLQuerier(db), opts, nil)
}

// Open connects a pgx pool to dsn (a postgres:// URL or a key=value
// connection string; pool settings such as pool_max_conns are honoured),
// checks that the server answers, and returns a store that owns the pool:
// Close closes it. Errors never show the password.
func Open(ctx context.Context, dsn string, opts Options) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, parseErr(dsn, err)
	}
	if _, _, err := tableName(opts.Table, opts.Schema); err != nil {
		return nil, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("leasehold/postgres: connect to %s: %w", Redact(dsn), err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		// A parameter the server does not know (a typo in the URL) or a bad
		// value is bad input, not an unreachable server.
		var pe *pgconn.PgError
		if errors.As(err, &pe) && (pe.Code == "42704" || pe.Code == "22023") {
			return nil, fmt.Errorf("leasehold/postgres: connect to %s: %w: %w", Redact(dsn), store.ErrInvalid, err)
		}
		return nil, fmt.Errorf("leasehold/postgres: connect to %s: %w", Redact(dsn), err)
	}
	q := &pgxQuerier{db: pool, mode: execMode(cfg.ConnConfig.DefaultQueryExecMode), cfg: func() *pgx.ConnConfig { return pool.Config().ConnConfig }}
	s, err := newStore(ctx, q, opts, pool.Close)
	if err != nil {
		pool.Close()
		return nil, err
	}
	return s, nil
}

// parseErr reports a connection string that does not parse. pgx's message
// says why and quotes the string with the password redacted on a best-effort
// basis; every password the string holds is scrubbed from it again here.
func parseErr(dsn string, err error) error {
	msg := err.Error()
	for _, secret := range passwordsIn(dsn) {
		msg = strings.ReplaceAll(msg, secret, "xxxxx")
	}
	return fmt.Errorf("leasehold/postgres: %s: %w", msg, store.ErrInvalid)
}

// URL query parameters that OpenURL takes for itself and removes before
// connecting; every other parameter goes to pgx (sslmode, pool_max_conns,
// connect_timeout, application_name, ...).
const (
	ParamTable           = "table"             // Options.Table
	ParamSchema          = "schema"            // Options.Schema
	ParamCreateIfMissing = "create_if_missing" // Options.CreateIfMissing: true or false
	ParamWatch           = "watch"             // false sets Options.NoWatch
	ParamSessionHost     = "session_host"      // host of the session connection (LISTEN, advisory locks)
	ParamSessionPort     = "session_port"      // its port
)

// OpenURL opens a store from a URL of the form
//
//	postgres://user:password@host:5432/db?sslmode=verify-full&table=leader_lease&schema=app
//
// (scheme postgres or postgresql). The parameters table, schema,
// create_if_missing, watch, session_host and session_port configure the
// store (see the Param constants) and are removed; the rest of the URL is
// passed to Open. This is the function the CLI's store registry calls.
func OpenURL(ctx context.Context, u *url.URL) (store.Store, error) {
	if u == nil {
		return nil, fmt.Errorf("leasehold/postgres: URL is nil: %w", store.ErrInvalid)
	}
	if u.Scheme != "postgres" && u.Scheme != "postgresql" {
		return nil, fmt.Errorf("leasehold/postgres: URL scheme %q is not postgres or postgresql: %w", u.Scheme, store.ErrInvalid)
	}
	c := *u
	q := c.Query()
	var opts Options
	opts.Table = q.Get(ParamTable)
	opts.Schema = q.Get(ParamSchema)
	var err error
	if opts.CreateIfMissing, err = boolParam(q, ParamCreateIfMissing, false); err != nil {
		return nil, err
	}
	watch, err := boolParam(q, ParamWatch, true)
	if err != nil {
		return nil, err
	}
	opts.NoWatch = !watch
	sessHost, sessPort := q.Get(ParamSessionHost), q.Get(ParamSessionPort)
	for _, p := range []string{ParamTable, ParamSchema, ParamCreateIfMissing, ParamWatch, ParamSessionHost, ParamSessionPort} {
		q.Del(p)
	}
	// Encode writes a space as '+', which libpq-style parsers read
	// literally; a literal '+' is already %2B.
	c.RawQuery = strings.ReplaceAll(q.Encode(), "+", "%20")
	dsn := c.String()
	if sessHost != "" || sessPort != "" {
		pcfg, err := pgxpool.ParseConfig(dsn) // strips the pool_ parameters
		if err != nil {
			return nil, parseErr(dsn, err)
		}
		cfg := pcfg.ConnConfig
		if sessHost != "" {
			cfg.Host = sessHost
		}
		if sessPort != "" {
			p, err := strconv.ParseUint(sessPort, 10, 16)
			if err != nil {
				return nil, fmt.Errorf("leasehold/postgres: URL parameter %s=%q is not a port: %w", ParamSessionPort, sessPort, store.ErrInvalid)
			}
			cfg.Port = uint16(p)
		}
		cfg.Fallbacks = nil
		opts.SessionConfig = cfg
	}
	return Open(ctx, dsn, opts)
}

func boolParam(q url.Values, name string, def bool) (bool, error) {
	v := q.Get(name)
	if v == "" {
		return def, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("leasehold/postgres: URL parameter %s=%q is not true or false: %w", name, v, store.ErrInvalid)
	}
	return b, nil
}

func newStore(ctx context.Context, q querier, opts Options, closePool func()) (*Store, error) {
	schema, table, err := tableName(opts.Table, opts.Schema)
	if err != nil {
		return nil, err
	}
	s := &Store{
		q:         q,
		schema:    schema,
		table:     table,
		qtable:    ident(schema, table),
		qhist:     ident(schema, table+"_history"),
		opts:      opts,
		closePool: closePool,
		closing:   make(chan struct{}),
	}
	s.sql = newStatements(s.qtable, s.qhist)
	if opts.CreateIfMissing {
		if err := s.Migrate(ctx); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Table returns the lease table's name as the store quotes it in SQL.
func (s *Store) Table() string { return s.qtable }

func (s *Store) check(ctx context.Context) error {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return store.ErrClosed
	}
	return ctx.Err()
}

func (s *Store) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// opErr wraps a driver error once, naming the operation, and turns the
// errors with a definite meaning into the store's sentinels.
func (s *Store) opErr(op, what string, err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "42P01": // undefined_table
			return fmt.Errorf("leasehold/postgres: %s %s: %s (table %s): %w; create it with `leasehold migrate`, (*postgres.Store).Migrate, or Options.CreateIfMissing",
				op, what, pe.Message, s.qtable, ErrNotMigrated)
		case "42703", "42P10": // undefined_column, no unique constraint for ON CONFLICT
			return fmt.Errorf("leasehold/postgres: %s %s: %s: table %s is not a migrated lease table: %w; `leasehold migrate` or (*postgres.Store).Migrate adds what is missing",
				op, what, pe.Message, s.qtable, ErrNotMigrated)
		case "22003": // numeric_value_out_of_range: epoch + 1 overflowed
			if op == "acquire" {
				return fmt.Errorf("leasehold/postgres: %s %s: the epoch is at the bigint limit: %w", op, what, ErrBadRow)
			}
		}
	}
	if s.isClosed() {
		return fmt.Errorf("leasehold/postgres: %s %s: %w", op, what, store.ErrClosed)
	}
	return fmt.Errorf("leasehold/postgres: %s %s: %w", op, what, err)
}

// retryable reports a serialization failure or deadlock: the statement's
// transaction was rolled back, nothing was written, and it may be sent again.
// Pools whose default isolation is REPEATABLE READ or SERIALIZABLE get these
// when two statements race on one row.
func retryable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40001" || pe.Code == "40P01")
}

const maxRetries = 10

// retries counts statements sent again, for tests.
var retries atomic.Int64

// retry runs fn again after a serialization failure or deadlock, with a
// short jittered backoff, until it gives another answer or ctx ends.
func (s *Store) retry(ctx context.Context, fn func() error) error {
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

// recScan receives the columns of recordCols.
type recScan struct {
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
	if err := s.check(ctx); err != nil {
		return store.Record{}, err
	}
	if err := store.ValidateAcquire(name, holder, ttl, MinTTL, metadata); err != nil {
		return store.Record{}, err
	}
	what := strconv.Quote(name)
	for range maxAcquireRounds {
		var x recScan
		granted := false
		err := s.retry(ctx, func() error {
			granted = false
			return s.q.query(ctx, s.sql.acquire, []any{name, holder, ttlMicros(ttl), metadata}, func(r rowScanner) error {
				granted = true
				return r.Scan(x.dest()...)
			})
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
		case !found:
			// Deleted by hand since: insert it.
		case cur.Token < 0:
			return store.Record{}, fmt.Errorf("leasehold/postgres: acquire %s: epoch is %d: %w", what, cur.Token, ErrBadRow)
		case cur.Holder != "" && cur.Holder != holder && cur.Remaining > 0:
			return cur, fmt.Errorf("leasehold/postgres: acquire %s: held by %s: %w", what, cur.Holder, store.ErrHeld)
		}
	}
	return store.Record{}, fmt.Errorf("leasehold/postgres: acquire %s: the row kept changing between the compare-and-swap and the read (%d rounds); nothing was granted by the last round, retry later", what, maxAcquireRounds)
}

// Renew implements store.Store: one statement naming the exact term.
func (s *Store) Renew(ctx context.Context, t store.Term, ttl time.Duration) (store.Record, error) {
	if err := s.check(ctx); err != nil {
		return store.Record{}, err
	}
	if err := store.ValidateTerm(t); err != nil {
		return store.Record{}, err
	}
	if err := store.ValidateTTL(ttl, MinTTL); err != nil {
		return store.Record{}, err
	}
	var x recScan
	found := false
	err := s.retry(ctx, func() error {
		found = false
		return s.q.query(ctx, s.sql.renew, []any{t.Name, t.Holder, t.Token, ttlMicros(ttl)}, func(r rowScanner) error {
			found = true
			return r.Scan(x.dest()...)
		})
	})
	if err != nil {
		return store.Record{}, s.opErr("renew", t.String(), err)
	}
	if !found {
		return store.Record{}, fmt.Errorf("leasehold/postgres: renew %s: %w", t, store.ErrNotHeld)
	}
	return x.record(), nil
}

// Release implements store.Store: one statement naming the exact term.
func (s *Store) Release(ctx context.Context, t store.Term) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	if err := store.ValidateTerm(t); err != nil {
		return err
	}
	found := false
	err := s.retry(ctx, func() error {
		found = false
		return s.q.query(ctx, s.sql.release, []any{t.Name, t.Holder, t.Token}, func(r rowScanner) error {
			found = true
			var epoch int64
			return r.Scan(&epoch)
		})
	})
	if err != nil {
		return s.opErr("release", t.String(), err)
	}
	if !found {
		return fmt.Errorf("leasehold/postgres: release %s: %w", t, store.ErrNotHeld)
	}
	return nil
}

// Get implements store.Store.
func (s *Store) Get(ctx context.Context, name string) (store.Record, error) {
	if err := s.check(ctx); err != nil {
		return store.Record{}, err
	}
	if err := store.ValidateName(name); err != nil {
		return store.Record{}, err
	}
	rec, found, err := s.get(ctx, name)
	if err != nil {
		return store.Record{}, s.opErr("get", strconv.Quote(name), err)
	}
	if !found {
		return store.Record{}, fmt.Errorf("leasehold/postgres: get %q: %w", name, store.ErrNotFound)
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
	if err := s.check(ctx); err != nil {
		return nil, nil, err
	}
	if err := store.ValidateTTL(ttl, MinTTL); err != nil {
		return nil, nil, err
	}
	recs := make([]store.Record, len(terms))
	errs := make([]error, len(terms))
	pos := make([]int, len(terms))
	index := make(map[store.Term]int, len(terms))
	var names, holders []string
	var epochs []int64
	for i, t := range terms {
		if errs[i] = store.ValidateTerm(t); errs[i] != nil {
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
				return fmt.Errorf("leasehold/postgres: renew batch returned ordinal %d of %d", ord, len(got))
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
			errs[i] = fmt.Errorf("leasehold/postgres: renew %s: %w", t, store.ErrNotHeld)
		}
	}
	return recs, errs, nil
}

// List implements store.Lister: every row, ordered by name (byte order).
func (s *Store) List(ctx context.Context) ([]store.Record, error) {
	if err := s.check(ctx); err != nil {
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
	if err := s.check(ctx); err != nil {
		return store.Record{}, err
	}
	if err := store.ValidateName(name); err != nil {
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
		return store.Record{}, fmt.Errorf("leasehold/postgres: force-release %s: %w", what, store.ErrNotFound)
	}
	return store.Record{}, fmt.Errorf("leasehold/postgres: force-release %s: no live term: %w", what, store.ErrNotHeld)
}

// History implements store.Historian from the history table the trigger
// fills: grants and releases by leasehold and by raw SQL clients alike.
// Events: "acquired", "expired-takeover", "released", "force-released". At
// most 1000 entries are kept per lease (older ones are pruned now and then).
func (s *Store) History(ctx context.Context, name string, limit int) ([]store.HistoryEntry, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	if err := store.ValidateName(name); err != nil {
		return nil, err
	}
	if limit <= 0 {
		return nil, fmt.Errorf("leasehold/postgres: history limit %d is not positive: %w", limit, store.ErrInvalid)
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

// Close implements store.Store: it stops the LISTEN connection and, for a
// store made by Open or OpenURL, closes its pool. A pool, connection or
// database given to New, NewConn or NewDB is left open. No lease is
// released, and advisory locks taken from the store stay with their own
// connections.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.closing)
	lis := s.lis
	s.mu.Unlock()
	if lis != nil {
		lis.stop()
	}
	if s.closePool != nil {
		s.closePool()
	}
	return nil
}

// sessionConfig is the config of the store's own session connections.
func (s *Store) sessionConfig(ctx context.Context) (*pgx.ConnConfig, error) {
	var cfg *pgx.ConnConfig
	if s.opts.SessionConfig != nil {
		cfg = s.opts.SessionConfig.Copy()
	} else {
		var err error
		if cfg, err = s.q.sessionConfig(ctx); err != nil {
			return nil, err
		}
	}
	// A config copied from a live connection carries that connection's
	// notification handler; the session connection needs pgx's own.
	cfg.OnNotification = nil
	return cfg, nil
}
