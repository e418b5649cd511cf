package mysql

// Options, constructors and the handle's accessors.

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/storekit"
)

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
	// DefaultWatchInterval. Each wait between two reads is drawn from ½
	// to 1½ times it. A release is seen on average half of it after it
	// happened (at once for a release made through the same Store).
	WatchInterval time.Duration
	// Doorbells is how many GET_LOCK doorbells the store keeps at most, as
	// many held as waited on, each on a connection of its own (not from
	// the store's pool). A doorbell wakes waiters in other processes the
	// moment a lease granted through this store is released, instead of
	// at their next poll; the poller keeps polling underneath, so a lease
	// past the limit is only as quick as before. Zero: DefaultDoorbells
	// for a store made by Open, OpenDSN or OpenURL, and none for NewDB
	// (whose connections are the caller's: set it to take the doorbells'
	// connections from that pool). Negative: none. Ignored with NoWatch.
	Doorbells int
}

// DefaultWatchInterval is how often a store reads the leases its waiters
// watch. BENCHMARKS.md and the README give what it costs and buys.
const DefaultWatchInterval = 25 * time.Millisecond

// Store is the MySQL/MariaDB lease store. It implements store.Store and the
// optional store.Watcher, store.BatchRenewer, store.Queuer, store.Lister,
// store.ForceReleaser, store.Migrator, store.MigrationChecker,
// store.Historian and store.Limiter.
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

	life  storekit.Lifecycle
	hub   storekit.Hub
	poll  *poller
	bells *doorbells // nil: none

	qmu sync.Mutex
	// queued: the holders with a place queued through this Store, by name,
	// until they leave it through this Store (Dequeue): the poller reads
	// the head of these names' queues while they are watched.
	queued map[string]map[string]bool
}

var (
	_ store.Store            = (*Store)(nil)
	_ store.Watcher          = (*Store)(nil)
	_ store.Queuer           = (*Store)(nil)
	_ store.UnqueuedAcquirer = (*Store)(nil)
	_ store.BatchRenewer     = (*Store)(nil)
	_ store.Lister           = (*Store)(nil)
	_ store.ForceReleaser    = (*Store)(nil)
	_ store.Migrator         = (*Store)(nil)
	_ store.MigrationChecker = (*Store)(nil)
	_ store.Historian        = (*Store)(nil)
	_ store.Limiter          = (*Store)(nil)
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
	if n := doorbellLimit(opts, DefaultDoorbells); n > 0 {
		// A pool of their own: a doorbell pins its connection for a whole
		// term or wait, which must never leave the store's statements
		// waiting for one.
		s.bells = newDoorbells(s, sql.OpenDB(conn), true, n)
	}
	return s, nil
}

// doorbellLimit is how many doorbells opts asks for, def if it leaves it.
func doorbellLimit(opts Options, def int) int {
	switch {
	case opts.NoWatch || opts.Doorbells < 0:
		return 0
	case opts.Doorbells == 0:
		return def
	}
	return opts.Doorbells
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
	s, err := newStore(ctx, db, false, false, opts)
	if err != nil {
		return nil, err
	}
	if n := doorbellLimit(opts, 0); n > 0 {
		s.bells = newDoorbells(s, db, false, n)
	}
	return s, nil
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
