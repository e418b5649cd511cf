package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"time"

	"cirello.io/pglock"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/lib/pq" // pglock insists on lib/pq

	lhpg "github.com/leasehold/leasehold/store/postgres"
)

// pgEnv is the bench's view of the PostgreSQL server: one schema of its own
// (dropped at the end) holding leasehold's lease table, pglock's table, the
// fence tables and the floor's table.
type pgEnv struct {
	dsn    string // as given: never printed (it may hold a password)
	schema string
	pool   *pgxpool.Pool // the bench's own statements
	st     *lhpg.Store
	stPrep *lhpg.Store // the same table, with Options.PreparedStatements
	pqdb   *sql.DB     // lib/pq, for pglock
}

func withParams(dsn string, kv ...string) (string, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return "", errors.New("postgres DSN is not a URL")
	}
	q := u.Query()
	for i := 0; i+1 < len(kv); i += 2 {
		q.Set(kv[i], kv[i+1])
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}

func openPostgres(ctx context.Context, dsn, runID string) (*pgEnv, error) {
	e := &pgEnv{dsn: dsn, schema: "lhbench_" + runID}
	var err error
	e.pool, err = pgxpool.New(ctx, dsn)
	if err != nil {
		return nil, fmt.Errorf("postgres: %s", lhpg.Redact(err.Error()))
	}
	if err := e.pool.Ping(ctx); err != nil {
		e.pool.Close()
		return nil, fmt.Errorf("postgres: %s", lhpg.Redact(err.Error()))
	}
	if _, err := e.pool.Exec(ctx, `CREATE SCHEMA `+e.schema); err != nil {
		e.pool.Close()
		return nil, fmt.Errorf("postgres: create schema: %w", err)
	}
	e.st, err = lhpg.New(ctx, e.pool, lhpg.Options{Schema: e.schema, CreateIfMissing: true})
	if err != nil {
		e.close()
		return nil, err
	}
	e.stPrep, err = lhpg.New(ctx, e.pool, lhpg.Options{Schema: e.schema, PreparedStatements: true})
	if err != nil {
		e.close()
		return nil, err
	}
	pqdsn, err := withParams(dsn, "sslmode", "disable")
	if err != nil {
		e.close()
		return nil, err
	}
	e.pqdb, err = sql.Open("postgres", pqdsn)
	if err != nil {
		e.close()
		return nil, err
	}
	c, err := pglock.New(e.pqdb, pglock.WithCustomTable(e.schema+".locks"))
	if err != nil {
		e.close()
		return nil, err
	}
	if err := c.TryCreateTable(); err != nil {
		e.close()
		return nil, fmt.Errorf("pglock create table: %w", err)
	}
	return e, nil
}

func (e *pgEnv) version(ctx context.Context) string {
	var v string
	if err := e.pool.QueryRow(ctx, `SHOW server_version`).Scan(&v); err != nil {
		return "?"
	}
	// autovacuum: with it off, the dead rows of leasehold's history table
	// pile up during a run and slow its trim (see BENCHMARKS.md, session 20).
	var sc, fs, av string
	e.pool.QueryRow(ctx, `SELECT current_setting('synchronous_commit'), current_setting('fsync'), current_setting('autovacuum')`).Scan(&sc, &fs, &av)
	return fmt.Sprintf("PostgreSQL %s (synchronous_commit=%s, fsync=%s, autovacuum=%s)", v, sc, fs, av)
}

func (e *pgEnv) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if e.st != nil {
		e.st.Close()
	}
	if e.stPrep != nil {
		e.stPrep.Close()
	}
	if e.pqdb != nil {
		e.pqdb.Close()
	}
	e.pool.Exec(ctx, `DROP SCHEMA IF EXISTS `+e.schema+` CASCADE`)
	e.pool.Close()
}

func (e *pgEnv) libs(handoffTTL, pglockLease time.Duration) []*lib {
	return []*lib{
		lhLockLib("postgres", e.st, handoffTTL, "LISTEN/NOTIFY watch"),
		preparedLib(lhLockLib("postgres", e.stPrep, handoffTTL, "LISTEN/NOTIFY watch, prepared_statements=true")),
		{
			name: "pglock", store: "postgres", peer: true, kind: "lock",
			config: fmt.Sprintf("cirello.io/pglock v1.16.1 on lib/pq, %v lease (its default is 20 s: a waiter polls once per lease)", pglockLease),
			newContender: func(ctx context.Context, lockName string, s setup) (contender, error) {
				if s.ttl == 0 {
					s.ttl = pglockLease
				}
				c, err := pglock.New(e.pqdb, pglock.WithCustomTable(e.schema+".locks"),
					pglock.WithLeaseDuration(s.ttl), pglock.WithHeartbeatFrequency(0))
				if err != nil {
					return nil, err
				}
				return &pglockC{c: c, name: lockName, s: s}, nil
			},
		},
	}
}

type pglockC struct {
	c    *pglock.Client
	name string
	s    setup
}

func (c *pglockC) acquire(ctx context.Context) (held, error) {
	l, err := c.c.AcquireContext(ctx, c.name)
	if err != nil {
		return nil, err
	}
	h := &peerHeld{rel: func(ctx context.Context) error { return c.c.ReleaseContext(ctx, l) }}
	if c.s.keepAlive {
		// pglock's own heartbeat goroutine is off (frequency 0) so that the
		// bench can see when each heartbeat succeeded; it sends the same
		// statement at a third of the lease.
		h.ref = startRefresher(c.s.ttl/3, func(ctx context.Context) error { return c.c.SendHeartbeat(ctx, l) })
	} else {
		h.clock.mark()
	}
	return h, nil
}

func (c *pglockC) close() {}

// session returns one pgx connection with application_name set, for the
// bench's own measurements.
func (e *pgEnv) conn(ctx context.Context, app string) (*pgx.Conn, error) {
	dsn, err := withParams(e.dsn, "application_name", app)
	if err != nil {
		return nil, err
	}
	return pgx.Connect(ctx, dsn)
}

// preparedLib names the PostgreSQL Lock whose store sends its statements as
// named prepared statements (Options.PreparedStatements).
func preparedLib(l *lib) *lib {
	l.name = "leasehold (prepared statements)"
	return l
}
