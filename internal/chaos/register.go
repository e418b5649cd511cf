package chaos

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	_ "modernc.org/sqlite" // the "sqlite" database/sql driver, for the SQLite register

	"github.com/leasehold/leasehold/fence"
)

// The fenced register is the protected resource of a chaos run: a value per
// resource name and the term, (token, holder), of the last write it accepted.
// It checks the term in the same step as the write, as fence/README.md's
// direct form does: a higher token is admitted from anyone, the same token
// only from the holder it was admitted for (one term writing again). Not
// `last_token <= $token`: that admits one token from two terms, which is what
// a lease store that lost data hands out. The holder is the writing process
// (ProcName: node and incarnation), unique per process as the elector's holder
// identity is, and the same name the HTTP register gives its fence.Guard.
//
//   - PostgreSQL: one statement, UPDATE … WHERE resource = $3 AND
//     (last_token < $2 OR (last_token = $2 AND last_holder = $4)), whose CTE
//     also appends the accepted write to a log table; on its own connection
//     straight to the server, not through the fault proxy, in tables named
//     for the run.
//   - SQLite: the same UPDATE (the holder column is writer), with a trigger
//     that appends the accepted write to a log table, in its own file.
//   - HTTP: a small server in the harness process, on 127.0.0.1, that admits
//     each write through a fence.Guard (the check and the write hold the
//     resource together) and logs every attempt.
//
// With fencing off (the negative control) the term condition is dropped:
// every write is accepted, and the checker must notice.

// Register kinds.
const (
	registerHTTP     = "http"
	registerPostgres = "postgres"
	registerSQLite   = "sqlite"
)

// tableRE is a register table name: a plain lower-case identifier,
// optionally schema-qualified (PostgreSQL).
var tableRE = regexp.MustCompile(`^([a-z_][a-z0-9_]{0,40}\.)?[a-z_][a-z0-9_]{0,40}$`)

// registerClient is a node's connection to the register.
type registerClient interface {
	// Write writes value to resource for the term (token, writer): writer is
	// the holder, the writing process. accepted false with a nil error is a
	// definite refusal; an error means the outcome is unknown.
	Write(ctx context.Context, resource string, token int64, value, writer string) (accepted bool, err error)
	Close() error
}

// registerSpec tells a node how to reach the register.
type registerSpec struct {
	_ [0]func() // not comparable: spares the binary an equality function

	Kind   string
	URL    string // http://127.0.0.1:port, postgres://…, or a SQLite file path
	Table  string // SQL registers
	Fenced bool
}

func openRegisterClient(ctx context.Context, s registerSpec) (registerClient, error) {
	switch s.Kind {
	case registerHTTP:
		return &httpRegisterClient{base: strings.TrimSuffix(s.URL, "/"), hc: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}}, nil
	case registerPostgres:
		if !tableRE.MatchString(s.Table) {
			return nil, fmt.Errorf("%w: register table %q", ErrInvalid, s.Table)
		}
		conn, err := pgx.Connect(ctx, s.URL)
		if err != nil {
			return nil, fmt.Errorf("leasehold/chaos: connect to the register: %w", err)
		}
		q := fmt.Sprintf(`WITH u AS (UPDATE %[1]s SET value = $1, last_token = $2, last_holder = $4 WHERE resource = $3%[2]s RETURNING resource, last_token, value)
INSERT INTO %[1]s_log (resource, token, value, writer) SELECT resource, last_token, value, $4 FROM u`, s.Table, cond(s.Fenced, " AND (last_token < $2 OR (last_token = $2 AND last_holder = $4))"))
		return &pgRegisterClient{conn: conn, q: q}, nil
	case registerSQLite:
		if !tableRE.MatchString(s.Table) {
			return nil, fmt.Errorf("%w: register table %q", ErrInvalid, s.Table)
		}
		db, err := openSQLiteRegister(s.URL)
		if err != nil {
			return nil, err
		}
		q := fmt.Sprintf(`UPDATE %s SET value = ?1, last_token = ?2, writer = ?3 WHERE resource = ?4%s`, s.Table, cond(s.Fenced, " AND (last_token < ?2 OR (last_token = ?2 AND writer = ?3))"))
		return &sqliteRegisterClient{db: db, q: q}, nil
	}
	return nil, fmt.Errorf("%w: unknown register kind %q (want %s, %s or %s)", ErrInvalid, s.Kind, registerHTTP, registerPostgres, registerSQLite)
}

// errNoWriter refuses a write that does not say whose term it is: the
// register could not tell it from another term with the same token.
var errNoWriter = fmt.Errorf("%w: a register write needs its writer (the holder of its term)", ErrInvalid)

func cond(on bool, s string) string {
	if on {
		return s
	}
	return ""
}

type httpRegisterClient struct {
	base string
	hc   *http.Client
}

func (c *httpRegisterClient) Write(ctx context.Context, resource string, token int64, value, writer string) (bool, error) {
	form := url.Values{"res": {resource}, "token": {strconv.FormatInt(token, 10)}, "value": {value}, "writer": {writer}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/write", strings.NewReader(form.Encode()))
	if err != nil {
		return false, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := c.hc.Do(req)
	if err != nil {
		return false, err
	}
	resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		return true, nil
	case http.StatusConflict:
		return false, nil
	}
	return false, fmt.Errorf("leasehold/chaos: register answered %s", resp.Status)
}

func (c *httpRegisterClient) Close() error { c.hc.CloseIdleConnections(); return nil }

type pgRegisterClient struct {
	mu   sync.Mutex
	conn *pgx.Conn
	q    string
}

func (c *pgRegisterClient) Write(ctx context.Context, resource string, token int64, value, writer string) (bool, error) {
	if writer == "" {
		return false, errNoWriter
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn.IsClosed() { // a cancelled query closes the connection: open another
		nc, err := pgx.ConnectConfig(ctx, c.conn.Config())
		if err != nil {
			return false, fmt.Errorf("leasehold/chaos: reconnect to the register: %w", err)
		}
		c.conn = nc
	}
	tag, err := c.conn.Exec(ctx, c.q, value, token, resource, writer)
	if err != nil {
		return false, err
	}
	return tag.RowsAffected() == 1, nil
}

func (c *pgRegisterClient) Close() error { return c.conn.Close(context.Background()) }

type sqliteRegisterClient struct {
	db *sql.DB
	q  string
}

func openSQLiteRegister(path string) (*sql.DB, error) {
	// A short busy timeout: a writer frozen inside a write holds the file's
	// lock, and the other writers should give up (outcome: not written)
	// rather than outlive their own deadline waiting.
	dsn := "file:" + path + "?_pragma=busy_timeout(100)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("leasehold/chaos: open the register %s: %w", path, err)
	}
	db.SetMaxOpenConns(1)
	return db, nil
}

func (c *sqliteRegisterClient) Write(ctx context.Context, resource string, token int64, value, writer string) (bool, error) {
	if writer == "" {
		return false, errNoWriter
	}
	res, err := c.db.ExecContext(ctx, c.q, value, token, writer, resource)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, err
	}
	return n == 1, nil
}

func (c *sqliteRegisterClient) Close() error { return c.db.Close() }

// register is the harness's side of the fenced register: it creates it,
// reads it during the run, and reads its log at the end.
type register interface {
	spec() registerSpec
	// Read returns the value and token a resource holds now.
	Read(ctx context.Context, resource string) (value string, token int64, err error)
	// Log returns the writes the register logged, in its own order.
	Log(ctx context.Context) ([]registerEntry, error)
	// LogsRefused reports whether Log includes refused attempts.
	LogsRefused() bool
	// Close removes what the register created (unless it was asked to keep it).
	Close(ctx context.Context) error
}

// httpRegister is the register served by the harness.
type httpRegister struct {
	ln     net.Listener
	srv    *http.Server
	guard  *fence.Guard
	fenced bool

	mu    sync.Mutex
	state map[string]regState
	log   []registerEntry
}

func newHTTPRegister(resources []string, fenced bool) (*httpRegister, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("leasehold/chaos: register listen: %w", err)
	}
	r := &httpRegister{ln: ln, guard: fence.NewGuard(nil), fenced: fenced, state: map[string]regState{}}
	for _, res := range resources {
		r.state[res] = regState{}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /write", r.handleWrite)
	mux.HandleFunc("GET /read", r.handleRead)
	r.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go r.srv.Serve(ln)
	return r, nil
}

func (r *httpRegister) spec() registerSpec {
	return registerSpec{Kind: registerHTTP, URL: "http://" + r.ln.Addr().String(), Fenced: r.fenced}
}

func (r *httpRegister) handleWrite(w http.ResponseWriter, req *http.Request) {
	res, value, writer := req.FormValue("res"), req.FormValue("value"), req.FormValue("writer")
	token, err := strconv.ParseInt(req.FormValue("token"), 10, 64)
	if err != nil || res == "" || value == "" {
		http.Error(w, "bad write", http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	_, known := r.state[res]
	r.mu.Unlock()
	if !known {
		http.Error(w, "unknown resource", http.StatusNotFound)
		return
	}
	apply := func(context.Context) error {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.state[res] = regState{Value: value, Token: token, Writer: writer}
		r.log = append(r.log, registerEntry{Seq: int64(len(r.log) + 1), Wall: time.Now().UnixNano(), Resource: res, Token: token, Value: value, Writer: writer, Result: writeAccepted})
		return nil
	}
	if !r.fenced {
		apply(req.Context())
		w.WriteHeader(http.StatusOK)
		return
	}
	// The writer (node and incarnation) is unique per process, as a holder
	// identity is: the Guard tells two terms with one token apart by it.
	err = r.guard.Do(req.Context(), res, writer, token, apply)
	switch {
	case err == nil:
		w.WriteHeader(http.StatusOK)
	case errors.Is(err, fence.ErrStale):
		r.mu.Lock()
		r.log = append(r.log, registerEntry{Seq: int64(len(r.log) + 1), Wall: time.Now().UnixNano(), Resource: res, Token: token, Value: value, Writer: writer, Result: writeRefused})
		r.mu.Unlock()
		http.Error(w, err.Error(), http.StatusConflict)
	default:
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
	}
}

func (r *httpRegister) handleRead(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	s, ok := r.state[req.FormValue("res")]
	r.mu.Unlock()
	if !ok {
		http.Error(w, "unknown resource", http.StatusNotFound)
		return
	}
	json.NewEncoder(w).Encode(s)
}

func (r *httpRegister) Read(ctx context.Context, resource string) (string, int64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.state[resource]
	if !ok {
		return "", 0, fmt.Errorf("leasehold/chaos: unknown resource %q", resource)
	}
	return s.Value, s.Token, nil
}

func (r *httpRegister) Log(context.Context) ([]registerEntry, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]registerEntry(nil), r.log...), nil
}

func (r *httpRegister) LogsRefused() bool { return true }

func (r *httpRegister) Close(ctx context.Context) error {
	return r.srv.Shutdown(ctx)
}

// pgRegister is the register in PostgreSQL: tables <table> and <table>_log.
type pgRegister struct {
	_ [0]func() // not comparable: spares the binary an equality function

	mu     sync.Mutex
	conn   *pgx.Conn
	url    string
	table  string
	fenced bool
	keep   bool
}

func newPGRegister(ctx context.Context, dsn, table string, resources []string, fenced, keep bool) (*pgRegister, error) {
	if !tableRE.MatchString(table) {
		return nil, fmt.Errorf("%w: register table %q", ErrInvalid, table)
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, fmt.Errorf("leasehold/chaos: connect to the register's database: %w", err)
	}
	ddl := fmt.Sprintf(`CREATE TABLE %[1]s (resource text PRIMARY KEY, value text NOT NULL DEFAULT '', last_token bigint NOT NULL DEFAULT 0,
  last_holder text NOT NULL DEFAULT '');
CREATE TABLE %[1]s_log (seq bigserial PRIMARY KEY, resource text NOT NULL, token bigint NOT NULL, value text NOT NULL, writer text NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())`, table)
	if _, err := conn.Exec(ctx, ddl); err != nil {
		conn.Close(ctx)
		return nil, fmt.Errorf("leasehold/chaos: create the register tables %s: %w", table, err)
	}
	for _, res := range resources {
		if _, err := conn.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (resource) VALUES ($1)`, table), res); err != nil {
			conn.Close(ctx)
			return nil, fmt.Errorf("leasehold/chaos: create the register rows: %w", err)
		}
	}
	return &pgRegister{conn: conn, url: dsn, table: table, fenced: fenced, keep: keep}, nil
}

func (r *pgRegister) spec() registerSpec {
	return registerSpec{Kind: registerPostgres, URL: r.url, Table: r.table, Fenced: r.fenced}
}

// with runs f on the register's connection, opening a new one first if
// the server closed it (a store restart of a server of the test's own kills
// every connection, the register's too), and once more on a new connection
// if f failed because the connection closed under it.
func (r *pgRegister) with(ctx context.Context, f func(*pgx.Conn) error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var err error
	for try := 0; try < 2; try++ {
		// A server down for a restart (another group's fault) is waited
		// for, until ctx ends.
		for r.conn.IsClosed() {
			nc, cerr := pgx.ConnectConfig(ctx, r.conn.Config())
			if cerr == nil {
				r.conn = nc
				break
			}
			if sleepCtx(ctx, 100*time.Millisecond) != nil {
				return fmt.Errorf("leasehold/chaos: reconnect to the register: %w", cerr)
			}
		}
		if err = f(r.conn); err == nil || !r.conn.IsClosed() || ctx.Err() != nil {
			return err
		}
	}
	return err
}

func (r *pgRegister) Read(ctx context.Context, resource string) (string, int64, error) {
	var v string
	var t int64
	err := r.with(ctx, func(c *pgx.Conn) error {
		return c.QueryRow(ctx, fmt.Sprintf(`SELECT value, last_token FROM %s WHERE resource = $1`, r.table), resource).Scan(&v, &t)
	})
	return v, t, err
}

func (r *pgRegister) Log(ctx context.Context) ([]registerEntry, error) {
	var out []registerEntry
	err := r.with(ctx, func(c *pgx.Conn) error {
		out = nil
		rows, err := c.Query(ctx, fmt.Sprintf(`SELECT seq, (extract(epoch FROM at) * 1e9)::bigint, resource, token, value, writer FROM %s_log ORDER BY seq`, r.table))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			e := registerEntry{Result: writeAccepted}
			if err := rows.Scan(&e.Seq, &e.Wall, &e.Resource, &e.Token, &e.Value, &e.Writer); err != nil {
				return err
			}
			out = append(out, e)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("leasehold/chaos: read the register log: %w", err)
	}
	return out, nil
}

func (r *pgRegister) LogsRefused() bool { return false }

func (r *pgRegister) Close(ctx context.Context) error {
	defer func() { r.mu.Lock(); r.conn.Close(ctx); r.mu.Unlock() }()
	if r.keep {
		return nil
	}
	return r.with(ctx, func(c *pgx.Conn) error {
		_, err := c.Exec(ctx, fmt.Sprintf(`DROP TABLE IF EXISTS %[1]s; DROP TABLE IF EXISTS %[1]s_log`, r.table))
		return err
	})
}

// sqliteRegister is the register in its own SQLite file.
type sqliteRegister struct {
	_ [0]func() // not comparable: spares the binary an equality function

	db     *sql.DB
	path   string
	table  string
	fenced bool
}

func newSQLiteRegister(ctx context.Context, path, table string, resources []string, fenced bool) (*sqliteRegister, error) {
	if !tableRE.MatchString(table) {
		return nil, fmt.Errorf("%w: register table %q", ErrInvalid, table)
	}
	db, err := openSQLiteRegister(path)
	if err != nil {
		return nil, err
	}
	stmts := []string{
		// writer is the holder of the last accepted term.
		fmt.Sprintf(`CREATE TABLE %s (resource TEXT PRIMARY KEY, value TEXT NOT NULL DEFAULT '', last_token INTEGER NOT NULL DEFAULT 0, writer TEXT NOT NULL DEFAULT '') STRICT`, table),
		fmt.Sprintf(`CREATE TABLE %s_log (seq INTEGER PRIMARY KEY AUTOINCREMENT, resource TEXT NOT NULL, token INTEGER NOT NULL, value TEXT NOT NULL, writer TEXT NOT NULL, at INTEGER NOT NULL) STRICT`, table),
		// The log row is written by the same statement as the update.
		fmt.Sprintf(`CREATE TRIGGER %[1]s_logged AFTER UPDATE ON %[1]s BEGIN
  INSERT INTO %[1]s_log (resource, token, value, writer, at) VALUES (NEW.resource, NEW.last_token, NEW.value, NEW.writer, CAST(unixepoch('subsec') * 1e9 AS INTEGER));
END`, table),
	}
	for _, s := range stmts {
		if _, err := db.ExecContext(ctx, s); err != nil {
			db.Close()
			return nil, fmt.Errorf("leasehold/chaos: create the register in %s: %w", path, err)
		}
	}
	for _, res := range resources {
		if _, err := db.ExecContext(ctx, fmt.Sprintf(`INSERT INTO %s (resource) VALUES (?)`, table), res); err != nil {
			db.Close()
			return nil, fmt.Errorf("leasehold/chaos: create the register rows: %w", err)
		}
	}
	return &sqliteRegister{db: db, path: path, table: table, fenced: fenced}, nil
}

func (r *sqliteRegister) spec() registerSpec {
	return registerSpec{Kind: registerSQLite, URL: r.path, Table: r.table, Fenced: r.fenced}
}

func (r *sqliteRegister) Read(ctx context.Context, resource string) (string, int64, error) {
	var v string
	var t int64
	err := r.db.QueryRowContext(ctx, fmt.Sprintf(`SELECT value, last_token FROM %s WHERE resource = ?`, r.table), resource).Scan(&v, &t)
	return v, t, err
}

func (r *sqliteRegister) Log(ctx context.Context) ([]registerEntry, error) {
	rows, err := r.db.QueryContext(ctx, fmt.Sprintf(`SELECT seq, at, resource, token, value, writer FROM %s_log ORDER BY seq`, r.table))
	if err != nil {
		return nil, fmt.Errorf("leasehold/chaos: read the register log: %w", err)
	}
	defer rows.Close()
	var out []registerEntry
	for rows.Next() {
		e := registerEntry{Result: writeAccepted}
		if err := rows.Scan(&e.Seq, &e.Wall, &e.Resource, &e.Token, &e.Value, &e.Writer); err != nil {
			return nil, fmt.Errorf("leasehold/chaos: read the register log: %w", err)
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

func (r *sqliteRegister) LogsRefused() bool { return false }

func (r *sqliteRegister) Close(context.Context) error { return r.db.Close() }
