package postgres

import (
	"context"
	"database/sql"
	"errors"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold/store"
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
	// PreparedStatements sends the lease statements as named prepared
	// statements, prepared once per connection and kept (pgx's
	// QueryExecModeCacheStatement), so the server parses and plans each
	// once per connection instead of on every call. Off by default: a named
	// statement lives on a server connection, which PgBouncer in
	// transaction mode hands to other clients unless it tracks prepared
	// statements itself (1.21 and later, with max_prepared_statements set).
	// Ignored on a pool configured for the simple protocol.
	PreparedStatements bool
}

// New returns a store on a pgx pool the caller owns: Close does not close
// the pool.
func New(ctx context.Context, pool *pgxpool.Pool, opts Options) (*Store, error) {
	if pool == nil {
		return nil, kit.Invalid("new", "pool is nil")
	}
	def := pool.Config().ConnConfig.DefaultQueryExecMode
	q := &pgxQuerier{db: pool, mode: execMode(def), cfg: func() *pgx.ConnConfig { return pool.Config().ConnConfig }}
	return newStore(ctx, q, opts, nil)
}

// NewConn returns a store on one pgx connection the caller owns. Calls are
// serialised on it; Close does not close it. The connection must not be
// used by anyone else while the store uses it. Watch opens one more
// connection, with the same config, for LISTEN (Options.NoWatch prevents it).
// The store does not reconnect: a call whose deadline passes mid-statement
// makes pgx close the connection, and every later call fails.
func NewConn(ctx context.Context, conn *pgx.Conn, opts Options) (*Store, error) {
	if conn == nil {
		return nil, kit.Invalid("new", "connection is nil")
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
		return nil, kit.Invalid("new", "database is nil")
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
		return nil, kit.Wrap("connect to "+Redact(dsn), err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		// A parameter the server does not know (a typo in the URL) or a bad
		// value is bad input, not an unreachable server.
		var pe *pgconn.PgError
		if errors.As(err, &pe) && (pe.Code == "42704" || pe.Code == "22023") {
			return nil, kit.Invalid("connect to "+Redact(dsn), "%w", err)
		}
		return nil, kit.Wrap("connect to "+Redact(dsn), err)
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
		msg = strings.ReplaceAll(msg, secret, store.Redacted)
	}
	return kit.Invalid("", "%s", msg)
}

// URL query parameters that OpenURL takes for itself and removes before
// connecting; every other parameter goes to pgx (sslmode, pool_max_conns,
// connect_timeout, application_name, ...).
const (
	ParamTable           = "table"               // Options.Table
	ParamSchema          = "schema"              // Options.Schema
	ParamCreateIfMissing = "create_if_missing"   // Options.CreateIfMissing: true or false
	ParamWatch           = "watch"               // false sets Options.NoWatch
	ParamSessionHost     = "session_host"        // host of the session connection (LISTEN, advisory locks)
	ParamSessionPort     = "session_port"        // its port
	ParamPrepared        = "prepared_statements" // Options.PreparedStatements: true or false
)

// OpenURL opens a store from a URL of the form
//
//	postgres://user:password@host:5432/db?sslmode=verify-full&table=leader_lease&schema=app
//
// (scheme postgres or postgresql). The parameters table, schema,
// create_if_missing, watch, session_host, session_port and
// prepared_statements configure the store (see the Param constants) and are
// removed; the rest of the URL is passed to Open. This is the function the
// CLI's store registry calls.
func OpenURL(ctx context.Context, u *url.URL) (store.Store, error) {
	if u == nil {
		return nil, kit.Invalid("", "URL is nil")
	}
	if u.Scheme != "postgres" && u.Scheme != "postgresql" {
		return nil, kit.Invalid("", "URL scheme %q is not postgres or postgresql", u.Scheme)
	}
	p := kit.Params(u)
	opts := Options{
		Table:              p.String(ParamTable, ""),
		Schema:             p.String(ParamSchema, ""),
		CreateIfMissing:    p.Bool(ParamCreateIfMissing, false),
		NoWatch:            !p.Bool(ParamWatch, true),
		PreparedStatements: p.Bool(ParamPrepared, false),
	}
	sessHost := p.String(ParamSessionHost, "")
	sessPort := p.Int(ParamSessionPort, 0, 1, 65535)
	if err := p.Err(); err != nil {
		return nil, err
	}
	c := *u
	// Encode writes a space as '+', which libpq-style parsers read
	// literally; a literal '+' is already %2B.
	c.RawQuery = strings.ReplaceAll(p.Rest().Encode(), "+", "%20")
	dsn := c.String()
	if sessHost != "" || sessPort != 0 {
		pcfg, err := pgxpool.ParseConfig(dsn) // strips the pool_ parameters
		if err != nil {
			return nil, parseErr(dsn, err)
		}
		cfg := pcfg.ConnConfig
		if sessHost != "" {
			cfg.Host = sessHost
		}
		if sessPort != 0 {
			cfg.Port = uint16(sessPort)
		}
		cfg.Fallbacks = nil
		opts.SessionConfig = cfg
	}
	return Open(ctx, dsn, opts)
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
	}
	s.hub.Idle = s.watchEnded
	places, _ := s.queueNames()
	s.sql = newStatements(s.qtable, s.qhist, places, func(suffix string) string { return ident(schema, table+suffix) }, leaseFunctionsVersion)
	if opts.PreparedStatements {
		q.prepare()
	}
	if opts.CreateIfMissing {
		if err := s.Migrate(ctx); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Table returns the lease table's name as the store quotes it in SQL.
func (s *Store) Table() string { return s.qtable }

// Close implements store.Store: it ends the store's watches, stops the
// LISTEN connection and, for a store made by Open or OpenURL, closes its
// pool. A pool, connection or database given to New, NewConn or NewDB is
// left open. No lease is released, and advisory locks taken from the store
// stay with their own connections.
func (s *Store) Close() error {
	return s.life.Close(func() error {
		s.hub.Close()
		s.mu.Lock()
		lis := s.lis
		s.mu.Unlock()
		if lis != nil {
			lis.stop()
		}
		if s.closePool != nil {
			s.closePool()
		}
		return nil
	})
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

// Redact returns a connection string (URL or key=value form) fit for a log
// line or an error message: the password, in the user info or as a
// parameter, is replaced by "xxxxx". Leasehold never prints a connection
// string any other way.
func Redact(dsn string) string {
	if strings.Contains(dsn, "://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return "(unparseable connection URL)"
		}
		return store.RedactURL(u)
	}
	return kvPassword.ReplaceAllString(dsn, "${1}"+store.Redacted)
}

// kvPassword matches password=value in the key=value form, the value bare or
// single-quoted (with \' escapes).
var kvPassword = regexp.MustCompile(`((?:^|\s)(?:ssl)?password\s*=\s*)(?:'(?:[^'\\]|\\.)*'|\S*)`)

var (
	urlUserPassword = regexp.MustCompile(`://[^/?#@]*?:([^/?#@]*)@`)
	urlParamSecret  = regexp.MustCompile(`[?&](?i:ssl)?password=([^&#]*)`)
	kvSecret        = regexp.MustCompile(`(?:^|\s)(?:ssl)?password\s*=\s*('(?:[^'\\]|\\.)*'|\S*)`)
)

// passwordsIn returns every password-like value in a connection string, as
// written and unescaped, longest first, even when the string does not parse.
func passwordsIn(dsn string) []string {
	var out []string
	add := func(v string) {
		if v == "" {
			return
		}
		out = append(out, v)
		if u, err := url.PathUnescape(v); err == nil && u != v {
			out = append(out, u)
		}
		if u, err := url.QueryUnescape(v); err == nil && u != v {
			out = append(out, u)
		}
	}
	if m := urlUserPassword.FindStringSubmatch(dsn); m != nil {
		add(m[1])
	}
	for _, m := range urlParamSecret.FindAllStringSubmatch(dsn, -1) {
		add(m[1])
	}
	for _, m := range kvSecret.FindAllStringSubmatch(dsn, -1) {
		v := m[1]
		if len(v) >= 2 && v[0] == '\'' && v[len(v)-1] == '\'' {
			v = v[1 : len(v)-1]
		}
		add(v)
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}
