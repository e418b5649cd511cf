package postgres_test

import (
	"context"
	"database/sql"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/postgres"
	"github.com/leasehold/leasehold/store/storetest"
)

// harnessMinTTL is the shortest lease the suite waits out.
const harnessMinTTL = 100 * time.Millisecond

// harnessQueueTTL is the shortest queue place the suite waits on: an
// Enqueue is a transaction of several round trips and a commit, and on a
// loaded machine a place of 100 ms expired before the next waiter's Enqueue
// had counted it (TestLeastPrivilege/QueueDeadPlaceExpires, MySQL at load 27).
const harnessQueueTTL = time.Second

// TestConformance runs the suite on stores from Open, each subtest in its
// own schema.
func TestConformance(t *testing.T) {
	t.Parallel() // each in schemas of its own; the suite mostly waits on leases
	h := openHarness(t, nil)
	h.Losses = pgLosses()
	storetest.Run(t, h)
}

// openHarness is the suite's harness on stores from Open with a small pool,
// each subtest in a migrated schema of its own, which prepare (if not nil)
// changes before the stores open.
func openHarness(t *testing.T, prepare func(testing.TB, string)) storetest.Harness {
	dsn := withParams(t, testDSN(t), "pool_max_conns", "2")
	return storetest.Harness{
		New: func(t *testing.T) func() (store.Store, error) {
			schema := migrated(t)
			if prepare != nil {
				prepare(t, schema)
			}
			return func() (store.Store, error) {
				return postgres.Open(context.Background(), dsn, postgres.Options{Schema: schema})
			}
		},
		MinTTL:   harnessMinTTL,
		QueueTTL: harnessQueueTTL,
	}
}

// TestConformanceWithoutLeaseFunctions runs the suite on a schema whose lease
// functions were dropped (as on a database an earlier version migrated): the
// store sends its statements itself, and must keep every rule the same way.
func TestConformanceWithoutLeaseFunctions(t *testing.T) {
	t.Parallel() // each in schemas of its own; the suite mostly waits on leases
	storetest.Run(t, openHarness(t, dropLeaseFunctions))
}

// TestConformanceIsolation runs the suite with pools whose every
// transaction is REPEATABLE READ or SERIALIZABLE: racing statements then
// fail with serialization errors, which the store must retry rather than
// report (the race test has 16 acquirers per round).
func TestConformanceIsolation(t *testing.T) {
	t.Parallel() // each in schemas of its own; the suite mostly waits on leases
	for _, level := range []string{"repeatable read", "serializable"} {
		t.Run(level, func(t *testing.T) {
			dsn := withParams(t, testDSN(t), "default_transaction_isolation", level)
			conn, err := pgx.Connect(ctxFor(t), dsn)
			if err != nil {
				t.Fatal(err)
			}
			var got string
			if err := conn.QueryRow(ctxFor(t), "SHOW transaction_isolation").Scan(&got); err != nil || got != level {
				t.Fatalf("pool isolation = %q, %v; want %q", got, err, level)
			}
			conn.Close(context.Background())
			dsn = withParams(t, dsn, "pool_max_conns", "2")
			storetest.Run(t, storetest.Harness{
				New: func(t *testing.T) func() (store.Store, error) {
					schema := migrated(t)
					return func() (store.Store, error) {
						return postgres.Open(context.Background(), dsn, postgres.Options{Schema: schema})
					}
				},
				MinTTL:   harnessMinTTL,
				QueueTTL: harnessQueueTTL,
			})
		})
	}
}

// TestConformanceDatabaseSQL runs the suite through database/sql with the
// pgx stdlib driver.
func TestConformanceDatabaseSQL(t *testing.T) {
	t.Parallel() // each in schemas of its own; the suite mostly waits on leases
	dsn := testDSN(t)
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T) func() (store.Store, error) {
			schema := migrated(t)
			return func() (store.Store, error) {
				db, err := sql.Open("pgx", dsn)
				if err != nil {
					return nil, err
				}
				db.SetMaxOpenConns(2)
				t.Cleanup(func() { db.Close() })
				return postgres.NewDB(context.Background(), db, postgres.Options{Schema: schema})
			}
		},
		MinTTL:   harnessMinTTL,
		QueueTTL: harnessQueueTTL,
	})
}

// TestConformancePgxConn runs the suite on single pgx connections.
func TestConformancePgxConn(t *testing.T) {
	t.Parallel() // each in schemas of its own; the suite mostly waits on leases
	dsn := testDSN(t)
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T) func() (store.Store, error) {
			schema := migrated(t)
			return func() (store.Store, error) {
				conn, err := pgx.Connect(context.Background(), dsn)
				if err != nil {
					return nil, err
				}
				t.Cleanup(func() { conn.Close(context.Background()) })
				return postgres.NewConn(context.Background(), conn, postgres.Options{Schema: schema})
			}
		},
		MinTTL:   harnessMinTTL,
		QueueTTL: harnessQueueTTL,
		Handles:  3,
	})
}

// TestConformanceCallerPool runs the suite on a pool the test owns, and
// checks that closing the stores left the pool open.
func TestConformanceCallerPool(t *testing.T) {
	t.Parallel() // each in schemas of its own; the suite mostly waits on leases
	pool, err := pgxpool.New(ctxFor(t), withParams(t, testDSN(t), "pool_max_conns", "4"))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T) func() (store.Store, error) {
			schema := migrated(t)
			return func() (store.Store, error) {
				return postgres.New(context.Background(), pool, postgres.Options{Schema: schema})
			}
		},
		MinTTL:   harnessMinTTL,
		QueueTTL: harnessQueueTTL,
	})
	if err := pool.Ping(ctxFor(t)); err != nil {
		t.Fatalf("the caller's pool no longer works after the stores were closed: %v", err)
	}
}

// TestConformanceSimpleProtocol runs the suite on a pool configured for the
// simple protocol (as some poolers need): the store keeps to it.
func TestConformanceSimpleProtocol(t *testing.T) {
	t.Parallel() // each in schemas of its own; the suite mostly waits on leases
	dsn := withParams(t, testDSN(t), "pool_max_conns", "2", "default_query_exec_mode", "simple_protocol")
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T) func() (store.Store, error) {
			schema := migrated(t)
			return func() (store.Store, error) {
				return postgres.Open(context.Background(), dsn, postgres.Options{Schema: schema})
			}
		},
		MinTTL:   harnessMinTTL,
		QueueTTL: harnessQueueTTL,
	})
}

// TestNoPreparedStatements: after every kind of lease call, the store's
// connection has no named prepared statement that a transaction pooler could
// hand to another client, although pgx's default mode would have made some.
func TestNoPreparedStatements(t *testing.T) {
	conn, st := storeOnConn(t, postgres.Options{})
	ctx := ctxFor(t)
	rec, err := st.Acquire(ctx, "job", "node-a", time.Minute, "")
	if err != nil {
		t.Fatal(err)
	}
	st.Acquire(ctx, "job", "node-b", time.Minute, "") // ErrHeld: the follow-up read
	st.Renew(ctx, rec.Term, time.Minute)
	st.RenewMany(ctx, []store.Term{rec.Term}, time.Minute)
	st.Get(ctx, "job")
	st.List(ctx)
	st.History(ctx, "job", 5)
	st.ForceRelease(ctx, "job")
	st.Release(ctx, rec.Term)
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_prepared_statements`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	// The query just above was itself prepared by pgx's default mode.
	if n != 1 {
		t.Fatalf("%d prepared statements on the store's connection, want only the test's own", n)
	}
}

// TestConformancePreparedStatements runs the suite with the lease statements
// as named prepared statements (the URL parameter prepared_statements=true).
func TestConformancePreparedStatements(t *testing.T) {
	t.Parallel() // each in schemas of its own; the suite mostly waits on leases
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T) func() (store.Store, error) {
			schema := migrated(t)
			u, err := url.Parse(withParams(t, testDSN(t), "pool_max_conns", "2", "schema", schema, postgres.ParamPrepared, "true"))
			if err != nil {
				t.Fatal(err)
			}
			return func() (store.Store, error) { return postgres.OpenURL(context.Background(), u) }
		},
		MinTTL:   harnessMinTTL,
		QueueTTL: harnessQueueTTL,
	})
}

// TestPreparedStatementsOption: with Options.PreparedStatements the store's
// connection keeps a named prepared statement per lease statement it ran
// (TestNoPreparedStatements is the default's side: none).
func TestPreparedStatementsOption(t *testing.T) {
	conn, st := storeOnConn(t, postgres.Options{PreparedStatements: true})
	ctx := ctxFor(t)
	rec, err := st.Acquire(ctx, "job", "node-a", time.Minute, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Renew(ctx, rec.Term, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := st.Release(ctx, rec.Term); err != nil {
		t.Fatal(err)
	}
	again, err := st.Acquire(ctx, "job", "node-b", time.Minute, "")
	if err != nil || again.Term.Token <= rec.Term.Token {
		t.Fatalf("second grant: %+v, %v; want a token above %d", again.Term, err, rec.Term.Token)
	}
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE '%leader_lease%' AND statement NOT LIKE '%pg_prepared_statements%'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n < 3 { // the grant, the renewal and the release, each prepared once
		t.Fatalf("%d prepared lease statements on the store's connection, want at least 3", n)
	}
}

// storeOnConn returns a store with opts in a fresh schema on a connection of
// its own, made with pgx's defaults (which cache prepared statements), so a
// test can look at what the store left on it. Both close at cleanup.
func storeOnConn(t *testing.T, opts postgres.Options) (*pgx.Conn, *postgres.Store) {
	t.Helper()
	opts.Schema = migrated(t)
	conn, err := pgx.Connect(ctxFor(t), testDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	st, err := postgres.NewConn(ctxFor(t), conn, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return conn, st
}
