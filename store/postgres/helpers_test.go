package postgres_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/store/postgres"
)

// defaultDSN is the test server on this machine; LEASEHOLD_PG_DSN overrides it.
const defaultDSN = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

const howToGetPG = "start PostgreSQL on 127.0.0.1:5432 (user postgres, trust auth, database test) or set LEASEHOLD_PG_DSN"

// testDSN returns the test server's connection string, or skips (fails in CI).
func testDSN(t testing.TB) string {
	t.Helper()
	d := testenv.Env("LEASEHOLD_PG_DSN", defaultDSN)
	u, err := url.Parse(d)
	if err != nil {
		t.Fatalf("LEASEHOLD_PG_DSN does not parse as a URL: %s", postgres.Redact(d))
	}
	testenv.RequireTCP(t, "PostgreSQL", u.Host, howToGetPG)
	return d
}

// withParams returns dsn with the query parameters kv (pairs) set.
func withParams(t testing.TB, dsn string, kv ...string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("parse dsn: %v", err)
	}
	q := u.Query()
	for i := 0; i+1 < len(kv); i += 2 {
		q.Set(kv[i], kv[i+1])
	}
	u.RawQuery = strings.ReplaceAll(q.Encode(), "+", "%20")
	return u.String()
}

func ctxFor(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// adminConn is a plain connection for setup and for raw SQL, closed at cleanup.
func adminConn(t testing.TB) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctxFor(t), testDSN(t))
	if err != nil {
		t.Fatalf("connect to the test server: %v", err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func randomSuffix() string {
	var b [6]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// freshSchema creates a schema with a random name, dropped at cleanup, so
// that no test sees another's leases.
func freshSchema(t testing.TB) string {
	t.Helper()
	name := "lh_test_" + randomSuffix()
	conn := adminConn(t)
	if _, err := conn.Exec(ctxFor(t), "CREATE SCHEMA "+name); err != nil {
		t.Fatalf("create schema: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, testDSN(t))
		if err != nil {
			t.Errorf("drop schema %s: %v", name, err)
			return
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, "DROP SCHEMA "+name+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", name, err)
		}
	})
	return name
}

// openStore opens a store in schema with a small pool, closed at cleanup.
func openStore(t testing.TB, schema string, opts postgres.Options) *postgres.Store {
	t.Helper()
	opts.Schema = schema
	st, err := postgres.Open(ctxFor(t), withParams(t, testDSN(t), "pool_max_conns", "2"), opts)
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// migrated returns a fresh schema with the lease table in it.
func migrated(t testing.TB) string {
	t.Helper()
	schema := freshSchema(t)
	st := openStore(t, schema, postgres.Options{})
	if err := st.Migrate(ctxFor(t)); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	st.Close()
	return schema
}

// waitFor polls cond every few milliseconds until it holds or 30 s pass.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		timer := time.NewTimer(5 * time.Millisecond)
		<-timer.C
	}
}

// roleConn is a plain connection as the given DSN's user, closed at cleanup.
func roleConn(t testing.TB, dsn string) *pgx.Conn {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Del("pool_max_conns")
	u.RawQuery = q.Encode()
	conn, err := pgx.Connect(ctxFor(t), u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}
