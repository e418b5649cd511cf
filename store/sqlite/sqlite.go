// Package sqlite is a lease store in a SQLite database file, shared by the
// processes of one host. It is pure Go (modernc.org/sqlite, no cgo) and it is
// the store the leasehold command uses when it is given no other.
//
// # What it is
//
// One row per lease in a table shaped like the PostgreSQL store's:
//
//	CREATE TABLE leader_lease (
//	  name       TEXT PRIMARY KEY,
//	  holder     TEXT,                        -- NULL (or '') when free
//	  epoch      INTEGER NOT NULL DEFAULT 0,  -- the fencing token of the last grant
//	  expires_at INTEGER NOT NULL DEFAULT 0,  -- Unix milliseconds, on SQLite's clock
//	  ttl_ms     INTEGER NOT NULL DEFAULT 0,
//	  metadata   TEXT NOT NULL DEFAULT ''
//	) STRICT;
//
// Acquire is one INSERT … ON CONFLICT DO UPDATE … WHERE (free, expired, or
// this holder) … RETURNING epoch, run in a BEGIN IMMEDIATE transaction; Renew
// and Release are one UPDATE each that names the exact term (name, holder,
// epoch) and matches only while it is live. Every expiry decision is made
// inside the statement by SQLite's own clock (unixepoch('subsec')), never by
// a time the Go process passes in, so every process on the host is judged by
// one clock. Triggers keep a history of grants and releases (see History),
// refuse to delete a lease row, refuse to lower an epoch, and keep a
// high-water table (<table>_high_water) of the highest epoch each name was
// granted, below which no row may be inserted: so that raw SQL run by hand,
// INSERT OR REPLACE included (whose delete of the old row fires no delete
// trigger unless the connection set recursive_triggers), cannot reset or
// repeat a fencing token, and a row deleted anyway is granted again above
// every token it had.
//
// The database runs in WAL mode with synchronous=FULL (a committed grant
// survives a power cut, so a token is never handed out twice) and a busy
// timeout (5 s by default), so several processes share the file safely.
//
// # What is guaranteed, and what is not
//
//   - Tokens rise strictly for every grant of a name and never go back, as long
//     as the file is not restored from an older copy, replaced, or edited past
//     the triggers (a row and its high-water mark both deleted). A restored backup hands out old tokens again: treat the
//     file as the fence's source of truth and do not roll it back.
//   - One host only. SQLite's locking does not work over network filesystems
//     (NFS, SMB, most container volume drivers that span hosts): processes on
//     two hosts sharing one file over the network can both be granted the
//     lease. Use the PostgreSQL store across hosts.
//   - The clock is the host's wall clock (CLOCK_REALTIME), read by SQLite.
//     All processes on the host agree on it, but a step of that clock (an
//     operator's date command, an NTP step rather than a slew) moves every
//     expiry with it: a step forward of more than the margin between
//     renew deadline and lease duration can let a rival take over while the
//     holder still trusts its term. Keep the clock slewed (chrony, systemd-
//     timesyncd do so by default for small offsets).
//   - A holder frozen while it is inside a write transaction (a SIGSTOP that
//     lands during the milliseconds of a renewal) holds the file's write lock:
//     nobody can acquire until it resumes or dies. That costs liveness, never
//     safety: every other process waits (busy timeout) and then retries.
//   - Anyone who can write the file can take, release or force-release any
//     lease in it. A file Open creates is made with mode 0600.
//
// The store does not implement store.Watcher: SQLite has no notification
// between processes, and polling PRAGMA data_version would only be a poll by
// another name. Waiters wake when a holder's term expires (the core reads
// Record.Remaining) and poll every retry period for releases.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver

	"github.com/leasehold/leasehold/store"
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

// ErrNoSchema is returned (wrapped) when the lease table does not exist: the
// store was opened with NoCreate on a file nobody has migrated.
var ErrNoSchema = errors.New("leasehold/sqlite: the lease table does not exist; create it with `leasehold migrate --store URL` or (*sqlite.Store).Migrate")

// Options configure Open.
type Options struct {
	// Table is the lease table's name: a plain SQL identifier (letters, digits
	// and '_', not starting with a digit, at most 63 bytes). Default DefaultTable.
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
	db      *sql.DB
	path    string
	table   string
	hist    string
	high    string // the high-water table: the highest epoch of each name ever granted
	created bool
	closed  atomic.Bool
	limit   int
}

var (
	_ store.Store         = (*Store)(nil)
	_ store.Lister        = (*Store)(nil)
	_ store.ForceReleaser = (*Store)(nil)
	_ store.Migrator      = (*Store)(nil)
	_ store.Historian     = (*Store)(nil)
)

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// ValidateTable checks a table name: a plain SQL identifier.
func ValidateTable(name string) error {
	if !identRE.MatchString(name) {
		return fmt.Errorf("%w: table name %q is not a plain SQL identifier (letters, digits and '_', not starting with a digit, at most 63 bytes)", store.ErrInvalid, name)
	}
	if strings.HasPrefix(strings.ToLower(name), "sqlite_") {
		return fmt.Errorf("%w: table name %q: names beginning with sqlite_ are reserved for SQLite's own tables", store.ErrInvalid, name)
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
		return nil, fmt.Errorf("leasehold/sqlite: open: %w", err)
	}
	if opts.BusyTimeout == 0 {
		opts.BusyTimeout = DefaultBusyTimeout
	}
	if opts.BusyTimeout < 0 {
		return nil, fmt.Errorf("leasehold/sqlite: open: %w: busy timeout %v is negative", store.ErrInvalid, opts.BusyTimeout)
	}
	if opts.HistoryLimit == 0 {
		opts.HistoryLimit = DefaultHistoryLimit
	}
	if opts.HistoryLimit < 1 {
		return nil, fmt.Errorf("leasehold/sqlite: open: %w: history limit %d is below 1", store.ErrInvalid, opts.HistoryLimit)
	}
	if path == "" || path == ":memory:" || strings.HasPrefix(path, "file:") {
		return nil, fmt.Errorf("leasehold/sqlite: open: %w: path %q: give the path of a file (an in-memory database is not shared between processes)", store.ErrInvalid, path)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("leasehold/sqlite: open %s: %w", path, err)
	}
	created := false
	if _, err := os.Stat(abs); errors.Is(err, os.ErrNotExist) {
		if opts.NoCreate {
			return nil, fmt.Errorf("leasehold/sqlite: open %s: the file does not exist (and create=false)", abs)
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
			return nil, fmt.Errorf("leasehold/sqlite: open %s: %w", abs, err)
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
		return nil, fmt.Errorf("leasehold/sqlite: open %s: %w", abs, err)
	}
	db.SetMaxIdleConns(2)
	db.SetConnMaxIdleTime(time.Minute)
	s := &Store{db: db, path: abs, table: opts.Table, hist: opts.Table + "_history", high: opts.Table + "_high_water", created: created, limit: opts.HistoryLimit}
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("leasehold/sqlite: open %s: %w", abs, err)
	}
	if !opts.NoCreate {
		if err := s.Migrate(ctx); err != nil {
			db.Close()
			return nil, err
		}
	} else if err := s.checkShape(ctx); err != nil && !errors.Is(err, ErrNoSchema) {
		db.Close()
		return nil, err
	}
	return s, nil
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
	if u.Scheme != "sqlite" {
		return "", opts, fmt.Errorf("leasehold/sqlite: %w: URL scheme %q is not sqlite", store.ErrInvalid, u.Scheme)
	}
	var path string
	switch {
	case u.Opaque != "":
		p, err := url.PathUnescape(u.Opaque)
		if err != nil {
			return "", opts, fmt.Errorf("leasehold/sqlite: %w: URL path %q: %v", store.ErrInvalid, u.Opaque, err)
		}
		path = p
	case u.Host != "" && u.Host != "localhost":
		return "", opts, fmt.Errorf("leasehold/sqlite: %w: URL %q names a host (%q); a SQLite file is local: use sqlite:///absolute/path.db or sqlite:relative/path.db", store.ErrInvalid, u.Redacted(), u.Host)
	default:
		path = u.Path
	}
	if path == "" {
		return "", opts, fmt.Errorf("leasehold/sqlite: %w: URL %q has no file path: use sqlite:///absolute/path.db or sqlite:relative/path.db", store.ErrInvalid, u.Redacted())
	}
	query, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return "", opts, fmt.Errorf("leasehold/sqlite: %w: URL query %q: %v", store.ErrInvalid, u.RawQuery, err)
	}
	for key, vals := range query {
		v := vals[len(vals)-1]
		switch key {
		case "table":
			opts.Table = v
		case "busy_timeout":
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return "", opts, fmt.Errorf("leasehold/sqlite: %w: URL parameter busy_timeout=%q is not a positive duration such as 5s", store.ErrInvalid, v)
			}
			opts.BusyTimeout = d
		case "create":
			b, err := strconv.ParseBool(v)
			if err != nil {
				return "", opts, fmt.Errorf("leasehold/sqlite: %w: URL parameter create=%q is not true or false", store.ErrInvalid, v)
			}
			opts.NoCreate = !b
		default:
			return "", opts, fmt.Errorf("leasehold/sqlite: %w: unknown URL parameter %q (known: table, busy_timeout, create)", store.ErrInvalid, key)
		}
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

// nowMS is SQLite's clock in Unix milliseconds. SQLite evaluates 'now' once
// per statement step, so every use in one statement sees the same instant.
const nowMS = `CAST(unixepoch('subsec')*1000 AS INTEGER)`

func quote(ident string) string { return `"` + ident + `"` }

// Migrate implements store.Migrator: it creates the lease table, the history
// table and the triggers if they are missing, and checks an existing lease
// table's shape. It changes no lease.
func (s *Store) Migrate(ctx context.Context) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	t, h, hw := quote(s.table), quote(s.hist), quote(s.high)
	// raise keeps the high-water mark of a name at the highest epoch granted.
	raise := `INSERT INTO ` + hw + `(name, epoch) VALUES (NEW.name, NEW.epoch)
			ON CONFLICT (name) DO UPDATE SET epoch = excluded.epoch WHERE excluded.epoch > epoch;`
	stmts := []string{
		`CREATE TABLE IF NOT EXISTS ` + t + ` (
			name       TEXT PRIMARY KEY,
			holder     TEXT,
			epoch      INTEGER NOT NULL DEFAULT 0 CHECK (epoch >= 0),
			expires_at INTEGER NOT NULL DEFAULT 0,
			ttl_ms     INTEGER NOT NULL DEFAULT 0,
			metadata   TEXT NOT NULL DEFAULT ''
		) STRICT`,
		`CREATE TABLE IF NOT EXISTS ` + h + ` (
			id       INTEGER PRIMARY KEY AUTOINCREMENT,
			name     TEXT NOT NULL,
			holder   TEXT NOT NULL,
			epoch    INTEGER NOT NULL,
			event    TEXT NOT NULL,
			at_ms    INTEGER NOT NULL,
			metadata TEXT NOT NULL DEFAULT ''
		) STRICT`,
		`CREATE INDEX IF NOT EXISTS ` + quote(s.hist+"_name") + ` ON ` + h + `(name, id)`,
		// The high-water table outlives a lease row that is removed anyway
		// (an INSERT OR REPLACE deletes the row it replaces without firing
		// delete triggers, unless the connection set recursive_triggers; a
		// trigger dropped by hand): Acquire grants above it, and an insert at
		// or below it is refused. It is filled from the lease rows and the
		// history when it is first made, so a row deleted before then is
		// remembered by its history.
		`CREATE TABLE IF NOT EXISTS ` + hw + ` (
			name  TEXT PRIMARY KEY,
			epoch INTEGER NOT NULL CHECK (epoch > 0)
		) STRICT`,
		`INSERT INTO ` + hw + `(name, epoch)
			SELECT name, MAX(epoch) FROM (SELECT name, epoch FROM ` + t + ` UNION ALL SELECT name, epoch FROM ` + h + `)
			WHERE epoch > 0 GROUP BY name
			ON CONFLICT (name) DO UPDATE SET epoch = excluded.epoch WHERE excluded.epoch > epoch`,
		`CREATE TRIGGER IF NOT EXISTS ` + quote(s.high+"_keep_rows") + ` BEFORE DELETE ON ` + hw + `
		BEGIN SELECT RAISE(ABORT, 'leasehold: high-water marks are never deleted: they keep fencing tokens above every token granted'); END`,
		`CREATE TRIGGER IF NOT EXISTS ` + quote(s.high+"_rises") + ` BEFORE UPDATE ON ` + hw + `
		WHEN NEW.epoch < OLD.epoch OR NEW.name IS NOT OLD.name
		BEGIN SELECT RAISE(ABORT, 'leasehold: a high-water mark never decreases'); END`,
		`CREATE TRIGGER IF NOT EXISTS ` + quote(s.high+"_insert_rises") + ` BEFORE INSERT ON ` + hw + `
		WHEN NEW.epoch < (SELECT epoch FROM ` + hw + ` WHERE name = NEW.name)
		BEGIN SELECT RAISE(ABORT, 'leasehold: a high-water mark never decreases'); END`,
		// A lease row may be (re)inserted only above its name's high-water
		// mark: this stops INSERT OR REPLACE, whose delete of the old row
		// fires no delete trigger on a connection without
		// recursive_triggers, from resetting or repeating an epoch.
		`CREATE TRIGGER IF NOT EXISTS ` + quote(s.table+"_insert_above_high") + ` BEFORE INSERT ON ` + t + `
		WHEN NEW.epoch <= (SELECT epoch FROM ` + hw + ` WHERE name = NEW.name)
		BEGIN SELECT RAISE(ABORT, 'leasehold: a lease row is inserted only above the highest epoch (fencing token) its name was ever granted'); END`,
		// Renaming a row would move one lease's counter to another name.
		`CREATE TRIGGER IF NOT EXISTS ` + quote(s.table+"_keep_names") + ` BEFORE UPDATE OF name ON ` + t + `
		WHEN NEW.name IS NOT OLD.name
		BEGIN SELECT RAISE(ABORT, 'leasehold: a lease row is never renamed: its epoch is that name''s fencing token counter'); END`,
		`CREATE TRIGGER IF NOT EXISTS ` + quote(s.table+"_high_insert") + ` AFTER INSERT ON ` + t + `
		WHEN NEW.epoch > 0
		BEGIN ` + raise + ` END`,
		`CREATE TRIGGER IF NOT EXISTS ` + quote(s.table+"_high_update") + ` AFTER UPDATE OF epoch ON ` + t + `
		WHEN NEW.epoch > 0
		BEGIN ` + raise + ` END`,
		// The epoch is the fencing counter: it never goes back, and the row
		// that holds it is never deleted.
		`CREATE TRIGGER IF NOT EXISTS ` + quote(s.table+"_keep_rows") + ` BEFORE DELETE ON ` + t + `
		BEGIN SELECT RAISE(ABORT, 'leasehold: lease rows are never deleted: the epoch column is the fencing token counter'); END`,
		`CREATE TRIGGER IF NOT EXISTS ` + quote(s.table+"_epoch_rises") + ` BEFORE UPDATE OF epoch ON ` + t + `
		WHEN NEW.epoch < OLD.epoch
		BEGIN SELECT RAISE(ABORT, 'leasehold: the epoch (fencing token) of a lease never decreases'); END`,
		`CREATE TRIGGER IF NOT EXISTS ` + quote(s.table+"_history_insert") + ` AFTER INSERT ON ` + t + `
		WHEN NEW.holder IS NOT NULL AND NEW.holder <> '' AND NEW.epoch > 0
		BEGIN
			INSERT INTO ` + h + `(name, holder, epoch, event, at_ms, metadata)
			VALUES (NEW.name, NEW.holder, NEW.epoch, 'acquired', ` + nowMS + `, NEW.metadata);
		END`,
		`CREATE TRIGGER IF NOT EXISTS ` + quote(s.table+"_history_grant") + ` AFTER UPDATE OF epoch ON ` + t + `
		WHEN NEW.epoch > OLD.epoch AND NEW.holder IS NOT NULL AND NEW.holder <> ''
		BEGIN
			INSERT INTO ` + h + `(name, holder, epoch, event, at_ms, metadata)
			VALUES (NEW.name, NEW.holder, NEW.epoch,
				CASE WHEN OLD.holder IS NOT NULL AND OLD.holder <> '' AND OLD.holder <> NEW.holder
				THEN 'expired-takeover' ELSE 'acquired' END,
				` + nowMS + `, NEW.metadata);
			DELETE FROM ` + h + ` WHERE name = NEW.name AND id <= (
				SELECT id FROM ` + h + ` WHERE name = NEW.name ORDER BY id DESC LIMIT 1 OFFSET ` + strconv.Itoa(s.limit) + `);
		END`,
		`CREATE TRIGGER IF NOT EXISTS ` + quote(s.table+"_history_end") + ` AFTER UPDATE OF holder ON ` + t + `
		WHEN NEW.epoch = OLD.epoch AND OLD.holder IS NOT NULL AND OLD.holder <> '' AND (NEW.holder IS NULL OR NEW.holder = '')
		BEGIN
			INSERT INTO ` + h + `(name, holder, epoch, event, at_ms, metadata)
			VALUES (OLD.name, OLD.holder, OLD.epoch, 'released', ` + nowMS + `, OLD.metadata);
		END`,
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return s.fail("migrate", err)
	}
	defer tx.Rollback()
	for _, q := range stmts {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return s.fail("migrate", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return s.fail("migrate", err)
	}
	return s.checkShape(ctx)
}

// checkShape checks that the lease table has the columns this store uses.
func (s *Store) checkShape(ctx context.Context) error {
	rows, err := s.db.QueryContext(ctx, `SELECT name, type FROM pragma_table_info(?)`, s.table)
	if err != nil {
		return s.fail("check schema", err)
	}
	defer rows.Close()
	want := map[string]string{"name": "TEXT", "holder": "TEXT", "epoch": "INTEGER", "expires_at": "INTEGER", "ttl_ms": "INTEGER", "metadata": "TEXT"}
	seen := 0
	for rows.Next() {
		var name, typ string
		if err := rows.Scan(&name, &typ); err != nil {
			return s.fail("check schema", err)
		}
		seen++
		if w, ok := want[name]; ok {
			if !strings.EqualFold(typ, w) {
				return fmt.Errorf("leasehold/sqlite: table %s in %s: column %s has type %s, this store needs %s", s.table, s.path, name, typ, w)
			}
			delete(want, name)
		}
	}
	if err := rows.Err(); err != nil {
		return s.fail("check schema", err)
	}
	if seen == 0 {
		return fmt.Errorf("leasehold/sqlite: %s in %s: %w", s.table, s.path, ErrNoSchema)
	}
	for col := range want {
		return fmt.Errorf("leasehold/sqlite: table %s in %s has no column %s: it was not made by this store (see the package doc for the shape)", s.table, s.path, col)
	}
	return nil
}

func (s *Store) check(ctx context.Context) error {
	if s.closed.Load() {
		return store.ErrClosed
	}
	return ctx.Err()
}

// fail wraps an error of the database with the operation, and turns a missing
// table into ErrNoSchema.
func (s *Store) fail(op string, err error) error {
	if s.closed.Load() {
		return fmt.Errorf("leasehold/sqlite: %s: %w", op, store.ErrClosed)
	}
	if strings.Contains(err.Error(), "no such table") {
		return fmt.Errorf("leasehold/sqlite: %s: %w", op, ErrNoSchema)
	}
	return fmt.Errorf("leasehold/sqlite: %s: %w", op, err)
}

func ttlMillis(ttl time.Duration) int64 {
	return int64((ttl + time.Millisecond - 1) / time.Millisecond)
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
	if err := s.check(ctx); err != nil {
		return store.Record{}, err
	}
	if err := store.ValidateAcquire(name, holder, ttl, MinTTL, metadata); err != nil {
		return store.Record{}, err
	}
	tx, err := s.db.BeginTx(ctx, nil) // BEGIN IMMEDIATE: the write lock first
	if err != nil {
		return store.Record{}, s.fail("acquire "+name, err)
	}
	defer tx.Rollback()
	t := quote(s.table)
	ms := ttlMillis(ttl)
	rec, err := scanRecord(tx.QueryRowContext(ctx, `INSERT INTO `+t+` AS l (name, holder, epoch, expires_at, ttl_ms, metadata)
		VALUES (?1, ?2, (SELECT COALESCE(MAX(epoch), 0) + 1 FROM `+quote(s.high)+` WHERE name = ?1), `+nowMS+` + ?3, ?3, ?4)
		ON CONFLICT (name) DO UPDATE SET
			holder = excluded.holder, epoch = MAX(l.epoch + 1, excluded.epoch), expires_at = excluded.expires_at,
			ttl_ms = excluded.ttl_ms, metadata = excluded.metadata
		WHERE l.holder IS NULL OR l.holder = '' OR l.holder = excluded.holder OR l.expires_at <= `+nowMS+`
		RETURNING `+rowCols, name, holder, ms, metadata), name)
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
	rec, err = scanRecord(tx.QueryRowContext(ctx, `SELECT `+rowCols+` FROM `+t+` WHERE name = ?1`, name), name)
	if err != nil {
		return store.Record{}, s.fail("acquire "+name, err)
	}
	tx.Rollback()
	return rec, fmt.Errorf("leasehold/sqlite: acquire %q: %w", name, store.ErrHeld)
}

// Renew implements store.Store: one UPDATE that names the exact term and
// matches only while it is live on SQLite's clock.
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
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return store.Record{}, s.fail("renew "+t.String(), err)
	}
	defer tx.Rollback()
	rec, err := scanRecord(tx.QueryRowContext(ctx, `UPDATE `+quote(s.table)+`
		SET expires_at = `+nowMS+` + ?4, ttl_ms = ?4
		WHERE name = ?1 AND holder = ?2 AND epoch = ?3 AND expires_at > `+nowMS+`
		RETURNING `+rowCols, t.Name, t.Holder, t.Token, ttlMillis(ttl)), t.Name)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return store.Record{}, fmt.Errorf("leasehold/sqlite: renew %s: %w", t, store.ErrNotHeld)
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
	if err := s.check(ctx); err != nil {
		return err
	}
	if err := store.ValidateTerm(t); err != nil {
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
		return fmt.Errorf("leasehold/sqlite: release %s: %w", t, store.ErrNotHeld)
	}
	if err := tx.Commit(); err != nil {
		return s.fail("release "+t.String(), err)
	}
	return nil
}

// Get implements store.Store. A row whose epoch is 0 (inserted by hand and
// never granted) is reported as ErrNotFound.
func (s *Store) Get(ctx context.Context, name string) (store.Record, error) {
	if err := s.check(ctx); err != nil {
		return store.Record{}, err
	}
	if err := store.ValidateName(name); err != nil {
		return store.Record{}, err
	}
	rec, err := scanRecord(s.db.QueryRowContext(ctx, `SELECT `+rowCols+` FROM `+quote(s.table)+` WHERE name = ?1 AND epoch > 0`, name), name)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return store.Record{}, fmt.Errorf("leasehold/sqlite: get %q: %w", name, store.ErrNotFound)
	case err != nil:
		return store.Record{}, s.fail(fmt.Sprintf("get %q", name), err)
	}
	return rec, nil
}

// List implements store.Lister: every lease ever granted, by name.
func (s *Store) List(ctx context.Context) ([]store.Record, error) {
	if err := s.check(ctx); err != nil {
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
	if err := s.check(ctx); err != nil {
		return store.Record{}, err
	}
	if err := store.ValidateName(name); err != nil {
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
		return store.Record{}, fmt.Errorf("leasehold/sqlite: %s: %w", op, store.ErrNotFound)
	case err != nil:
		return store.Record{}, s.fail(op, err)
	case !rec.Live():
		return rec, fmt.Errorf("leasehold/sqlite: %s: no live term (last token %d): %w", op, rec.Token, store.ErrNotHeld)
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
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	if err := store.ValidateName(name); err != nil {
		return nil, err
	}
	if limit < 1 {
		return nil, fmt.Errorf("leasehold/sqlite: history: %w: limit %d is below 1", store.ErrInvalid, limit)
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

// Close implements store.Store. It closes this handle's connections only.
func (s *Store) Close() error {
	if !s.closed.CompareAndSwap(false, true) {
		return nil
	}
	return s.db.Close()
}
