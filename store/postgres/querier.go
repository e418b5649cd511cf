package postgres

import (
	"context"
	"database/sql"
	"errors"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
)

// querier is the little the store needs from a driver: one statement at a
// time, a transaction for Migrate, and the config of a dedicated session
// connection for LISTEN and advisory locks. Two adapters implement it: pgx
// (a pool, a connection, or a transaction) and database/sql.
type querier interface {
	// query runs one statement and calls each for every row before it returns.
	query(ctx context.Context, sql string, args []any, each func(rowScanner) error) error
	// exec runs a statement that returns no rows. Without args it may be
	// several statements separated by ';'.
	exec(ctx context.Context, sql string, args ...any) error
	// inTx runs fn in one transaction, committed if fn returns nil.
	inTx(ctx context.Context, fn func(querier) error) error
	// sessionConfig returns a copy of the connection config, for a dedicated
	// session connection the store opens itself.
	sessionConfig(ctx context.Context) (*pgx.ConnConfig, error)
	// prepare makes later statements named prepared statements, cached per
	// connection, where the driver can (Options.PreparedStatements).
	prepare()
}

type rowScanner interface{ Scan(dest ...any) error }

// pgxDB is what *pgxpool.Pool, *pgx.Conn and pgx.Tx have in common.
type pgxDB interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Begin(ctx context.Context) (pgx.Tx, error)
}

// pgxQuerier adapts pgx. Every lease statement is sent with mode, by default
// pgx.QueryExecModeExec: the extended protocol with the unnamed statement, in
// one round trip, so no named prepared statement is left on a server
// connection that a transaction pooler might hand to someone else.
type pgxQuerier struct {
	db   pgxDB
	mode pgx.QueryExecMode
	// mu serialises calls on a single *pgx.Conn, which is not safe for
	// concurrent use; nil for a pool or a transaction.
	mu  *sync.Mutex
	cfg func() *pgx.ConnConfig
}

// execMode is the mode for lease statements on a connection configured with
// def: exec (no session state), unless the caller chose the simple protocol.
func execMode(def pgx.QueryExecMode) pgx.QueryExecMode {
	if def == pgx.QueryExecModeSimpleProtocol {
		return def
	}
	return pgx.QueryExecModeExec
}

// prepare implements querier: lease statements become named prepared
// statements, cached per connection (not on the simple protocol).
func (q *pgxQuerier) prepare() {
	if q.mode == pgx.QueryExecModeExec {
		q.mode = pgx.QueryExecModeCacheStatement
	}
}

func (q *pgxQuerier) lock() func() {
	if q.mu == nil {
		return func() {}
	}
	q.mu.Lock()
	return q.mu.Unlock
}

func (q *pgxQuerier) query(ctx context.Context, sql string, args []any, each func(rowScanner) error) error {
	defer q.lock()()
	rows, err := q.db.Query(ctx, sql, append([]any{q.mode}, args...)...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := each(rows); err != nil {
			return err
		}
	}
	rows.Close()
	return rows.Err()
}

func (q *pgxQuerier) exec(ctx context.Context, sql string, args ...any) error {
	defer q.lock()()
	_, err := q.db.Exec(ctx, sql, append([]any{q.mode}, args...)...)
	return err
}

func (q *pgxQuerier) inTx(ctx context.Context, fn func(querier) error) error {
	defer q.lock()()
	tx, err := q.db.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if err := fn(&pgxQuerier{db: tx, mode: q.mode, cfg: q.cfg}); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

func (q *pgxQuerier) sessionConfig(context.Context) (*pgx.ConnConfig, error) {
	return q.cfg(), nil
}

// sqlDB is what *sql.DB and *sql.Tx have in common.
type sqlDB interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// sqlQuerier adapts database/sql. With the pgx stdlib driver each statement
// is sent in pgx's exec mode, as above; other drivers get the statements
// with their own defaults.
type sqlQuerier struct {
	db   sqlDB
	root *sql.DB // for transactions and the session config; nil inside one
	pre  []any   // arguments put before each statement's own: the exec mode for pgx
}

// prepare implements querier: with the pgx stdlib driver, lease statements
// are sent in pgx's statement-caching mode; other drivers keep their own.
func (q *sqlQuerier) prepare() {
	if len(q.pre) == 1 && q.pre[0] == pgx.QueryExecModeExec {
		q.pre = []any{pgx.QueryExecModeCacheStatement}
	}
}

func newSQLQuerier(db *sql.DB) *sqlQuerier {
	q := &sqlQuerier{db: db, root: db}
	if _, ok := db.Driver().(*stdlib.Driver); ok {
		q.pre = []any{pgx.QueryExecModeExec}
	}
	return q
}

func (q *sqlQuerier) query(ctx context.Context, query string, args []any, each func(rowScanner) error) error {
	rows, err := q.db.QueryContext(ctx, query, append(append([]any{}, q.pre...), args...)...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := each(rows); err != nil {
			return err
		}
	}
	if err := rows.Close(); err != nil {
		return err
	}
	return rows.Err()
}

func (q *sqlQuerier) exec(ctx context.Context, query string, args ...any) error {
	if len(args) > 0 {
		args = append(append([]any{}, q.pre...), args...)
	}
	_, err := q.db.ExecContext(ctx, query, args...)
	return err
}

func (q *sqlQuerier) inTx(ctx context.Context, fn func(querier) error) error {
	if q.root == nil {
		return errors.New("leasehold/postgres: nested transaction")
	}
	tx, err := q.root.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := fn(&sqlQuerier{db: tx, pre: q.pre}); err != nil {
		return err
	}
	return tx.Commit()
}

// errNoSessionConfig: a database/sql pool whose driver is not pgx's cannot
// tell the store where to open its own session connection.
var errNoSessionConfig = errors.New("leasehold/postgres: the database/sql driver is not pgx's stdlib driver, so the store cannot open a session connection; set Options.SessionConfig")

func (q *sqlQuerier) sessionConfig(ctx context.Context) (*pgx.ConnConfig, error) {
	if q.root == nil || q.pre == nil {
		return nil, errNoSessionConfig
	}
	c, err := q.root.Conn(ctx)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	var cfg *pgx.ConnConfig
	err = c.Raw(func(dc any) error {
		sc, ok := dc.(*stdlib.Conn)
		if !ok {
			return errNoSessionConfig
		}
		cfg = sc.Conn().Config()
		return nil
	})
	if err != nil {
		return nil, kit.Wrap("session config", err)
	}
	return cfg, nil
}
