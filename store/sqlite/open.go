package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"modernc.org/sqlite" // registers the "sqlite" database/sql driver
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/storekit"
)

// Defaults.
const (
	// DefaultTable is the lease table's name. The history table is its name
	// with "_history" appended.
	DefaultTable = "leader_lease"
	// DefaultBusyTimeout is how long a statement waits for another process's
	// write lock before it fails (outcome unknown; the caller retries).
	DefaultBusyTimeout = 5 * time.Second
	// DefaultHistoryLimit is how many history rows are kept per lease name.
	DefaultHistoryLimit = 1000
	// MinTTL is the smallest TTL the store accepts: expiry is kept in whole
	// milliseconds (a TTL is rounded up to the next millisecond).
	MinTTL = time.Millisecond
)

var kit = storekit.Kit{Store: "sqlite", MinTTL: MinTTL}

// ErrNoSchema is returned (wrapped) when the lease table does not exist: the
// store was opened with NoCreate on a file nobody has migrated.
var ErrNoSchema = errors.New("leasehold/sqlite: the lease table does not exist; create it with `leasehold migrate --store URL` or (*sqlite.Store).Migrate")

// Options configure Open.
type Options struct {
	// Table is the lease table's name: a plain SQL identifier (letters, digits
	// and '_', not starting with a digit, at most 63 bytes: storekit's rule,
	// checked as SQLite sees it, ignoring case). Default DefaultTable.
	Table string
	// BusyTimeout is how long a call waits for another process's lock.
	// Default DefaultBusyTimeout.
	BusyTimeout time.Duration
	// NoCreate opens an existing file only, and creates no table. By default
	// Open creates the file (mode 0600) and the schema if they are missing.
	NoCreate bool
	// HistoryLimit is how many history rows are kept per lease name; default
	// DefaultHistoryLimit. It is applied when the schema is created.
	HistoryLimit int
}

// Store is a lease store on one SQLite file. It is safe for concurrent use.
type Store struct {
	_ [0]func() // not comparable: spares the binary an equality function

	db      *sql.DB
	path    string
	table   string
	hist    string
	high    string // the high-water table: the highest epoch of each name ever granted
	queue   string // the fair queue's table (queue.go)
	created bool
	limit   int
	life    storekit.Lifecycle
}

var (
	_ store.Store         = (*Store)(nil)
	_ store.Lister        = (*Store)(nil)
	_ store.ForceReleaser = (*Store)(nil)
	_ store.Migrator      = (*Store)(nil)
	_ store.Historian     = (*Store)(nil)
	_ store.Queuer        = (*Store)(nil)
)

// ValidateTable checks a table name: a plain SQL identifier (the one rule
// of storekit.Kit.SQLIdentFold: SQLite ignores the case of identifiers), not
// one of the names SQLite reserves for itself.
func ValidateTable(name string) error {
	if err := kit.SQLIdentFold("", "table", name, 0); err != nil {
		return err
	}
	if strings.HasPrefix(strings.ToLower(name), "sqlite_") {
		return kit.Invalid("", "table name %q: names beginning with sqlite_ are reserved for SQLite's own tables", name)
	}
	return nil
}

// Open opens (and by default creates) the lease store in the SQLite file at
// path. The directory must exist. ctx bounds the opening and the schema check.
func Open(ctx context.Context, path string, opts Options) (*Store, error) {
	if opts.Table == "" {
		opts.Table = DefaultTable
	}
	if err := ValidateTable(opts.Table); err != nil {
		return nil, err
	}
	if opts.BusyTimeout == 0 {
		opts.BusyTimeout = DefaultBusyTimeout
	}
	if opts.BusyTimeout < 0 {
		return nil, kit.Invalid("open", "busy timeout %v is negative", opts.BusyTimeout)
	}
	if opts.HistoryLimit == 0 {
		opts.HistoryLimit = DefaultHistoryLimit
	}
	if opts.HistoryLimit < 1 {
		return nil, kit.Invalid("open", "history limit %d is below 1", opts.HistoryLimit)
	}
	if path == "" || path == ":memory:" || strings.HasPrefix(path, "file:") {
		return nil, kit.Invalid("open", "path %q: give the path of a file (an in-memory database is not shared between processes)", path)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, kit.Wrap("open "+path, err)
	}
	created := false
	if _, err := os.Stat(abs); errors.Is(err, os.ErrNotExist) {
		if opts.NoCreate {
			return nil, kit.Errorf("open "+abs, "the file does not exist (and create=false)")
		}
		// Create it ourselves so that it is private to this user: SQLite
		// gives its -wal and -shm files the main file's permissions.
		f, err := os.OpenFile(abs, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
		switch {
		case err == nil:
			f.Close()
			created = true
		case errors.Is(err, os.ErrExist): // another process just made it
		default:
			return nil, kit.Wrap("open "+abs, err)
		}
	}
	mode := "rwc"
	if opts.NoCreate {
		mode = "rw"
	}
	q := url.Values{}
	q.Set("mode", mode)
	q.Set("_txlock", "immediate")
	q.Add("_pragma", "busy_timeout("+strconv.FormatInt(opts.BusyTimeout.Milliseconds(), 10)+")")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(FULL)")
	// With recursive_triggers on, the DELETE that an INSERT OR REPLACE does
	// fires the delete triggers, so that even a REPLACE sent through DB()
	// cannot remove a lease row. Other connections (a sqlite3 shell) do not
	// have it: the insert triggers stop their REPLACE instead (see Migrate).
	q.Add("_pragma", "recursive_triggers(1)")
	dsn := "file:" + (&url.URL{Path: abs}).EscapedPath() + "?" + q.Encode()
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, kit.Wrap("open "+abs, err)
	}
	db.SetMaxIdleConns(2)
	db.SetConnMaxIdleTime(time.Minute)
	s := &Store{db: db, path: abs, table: opts.Table, hist: opts.Table + "_history", high: opts.Table + "_high_water", queue: opts.Table + "_queue", created: created, limit: opts.HistoryLimit}
	// Two processes opening a new file at once (two replicas started
	// together) can find it busy without waiting: where waiting could
	// deadlock, such as switching the file to WAL or reading a WAL another
	// connection is setting up, SQLite returns SQLITE_BUSY at once instead
	// of calling the busy handler, and leaves the retry to its caller. Every
	// step here can be done again (the schema is CREATE ... IF NOT EXISTS),
	// so the whole preparation is retried for up to the busy timeout.
	deadline := time.Now().Add(opts.BusyTimeout)
	for {
		err := s.prepare(ctx, opts.NoCreate)
		if err == nil {
			return s, nil
		}
		if !isBusy(err) || time.Now().After(deadline) {
			db.Close()
			return nil, err
		}
		t := time.NewTimer(20 * time.Millisecond) // for the other opener to finish its step
		select {
		case <-ctx.Done():
			t.Stop()
			db.Close()
			return nil, kit.Wrap("open "+abs, ctx.Err())
		case <-t.C:
		}
	}
}

// prepare checks the connection and migrates the schema (or, with
// noCreate, checks its shape).
func (s *Store) prepare(ctx context.Context, noCreate bool) error {
	if err := s.db.PingContext(ctx); err != nil {
		return kit.Wrap("open "+s.path, err)
	}
	if !noCreate {
		return s.Migrate(ctx)
	}
	if err := s.checkShape(ctx); err != nil && !errors.Is(err, ErrNoSchema) {
		return err
	}
	return nil
}

// isBusy reports whether err is SQLite's SQLITE_BUSY (with any extended
// code: SQLITE_BUSY_RECOVERY, SQLITE_BUSY_SNAPSHOT, ...).
func isBusy(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_BUSY
}

// OpenURL opens the store a URL names, for the leasehold command:
//
//	sqlite:///absolute/path/leases.db
//	sqlite:relative/path/leases.db
//	sqlite:///path/leases.db?table=my_leases&busy_timeout=10s&create=false
//
// Query parameters: table (the lease table, default leader_lease),
// busy_timeout (a Go duration, default 5s), create (default true: create the
// file and the schema if missing; false: the file must exist). Any other
// parameter is refused, so that a typo is not silently ignored.
func OpenURL(ctx context.Context, u *url.URL) (store.Store, error) {
	path, opts, err := ParseURL(u)
	if err != nil {
		return nil, err
	}
	return Open(ctx, path, opts)
}

// ParseURL returns the file path and options a sqlite: URL names (see OpenURL).
func ParseURL(u *url.URL) (string, Options, error) {
	var opts Options
	if u == nil {
		return "", opts, kit.Invalid("", "URL is nil")
	}
	if u.Scheme != "sqlite" {
		return "", opts, kit.Invalid("", "URL scheme %q is not sqlite", u.Scheme)
	}
	var path string
	switch {
	case u.Opaque != "":
		p, err := url.PathUnescape(u.Opaque)
		if err != nil {
			return "", opts, kit.Invalid("", "URL path %q: %v", u.Opaque, err)
		}
		path = p
	case u.Host != "" && u.Host != "localhost":
		return "", opts, kit.Invalid("", "URL %q names a host (%q); a SQLite file is local: use sqlite:///absolute/path.db or sqlite:relative/path.db", store.RedactURL(u), u.Host)
	default:
		path = u.Path
	}
	if path == "" {
		return "", opts, kit.Invalid("", "URL %q has no file path: use sqlite:///absolute/path.db or sqlite:relative/path.db", store.RedactURL(u))
	}
	p := kit.Params(u)
	opts.Table = p.String("table", "")
	opts.BusyTimeout = p.Duration("busy_timeout", 0)
	opts.NoCreate = !p.Bool("create", true)
	if err := p.Done(); err != nil {
		return "", Options{}, err
	}
	return path, opts, nil
}

// Path is the absolute path of the database file.
func (s *Store) Path() string { return s.path }

// Created reports whether Open created the database file.
func (s *Store) Created() bool { return s.created }

// DB is the underlying database handle, for tests and for tools that read
// the tables. Writing to the lease table through it bypasses nothing the
// triggers guard, but it is the caller's own responsibility.
func (s *Store) DB() *sql.DB { return s.db }

// Close implements store.Store. It closes this handle's connections only.
func (s *Store) Close() error { return s.life.Close(s.db.Close) }
