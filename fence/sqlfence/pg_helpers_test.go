package sqlfence_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/leasehold/leasehold/fence/sqlfence"
	"github.com/leasehold/leasehold/fence/sqlfence/pgxfence"
	"github.com/leasehold/leasehold/internal/testenv"
)

// pgDSN returns the test server's connection string, or skips (fails in CI)
// when no PostgreSQL listens on 127.0.0.1:5432.
func pgDSN(t testing.TB) string {
	t.Helper()
	testenv.RequireTCP(t, "PostgreSQL", "127.0.0.1:5432", "start PostgreSQL with user postgres (trust) and database test, or set LEASEHOLD_TEST_POSTGRES")
	return testenv.Env("LEASEHOLD_TEST_POSTGRES", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
}

func pgConnect(t testing.TB) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, pgDSN(t))
	if err != nil {
		t.Fatalf("connect to PostgreSQL: %v", err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

func randomSuffix() string {
	b := make([]byte, 6)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// pgEnv is one test's schema: the fence table, a lease table shaped like
// store/postgres's, a table of attempts (written before the claim) and one of
// writes (written after it, numbered in lock order).
type pgEnv struct {
	schema string
	fence  *sqlfence.Fence
	admin  *pgx.Conn
}

func newPgEnv(t testing.TB) *pgEnv {
	t.Helper()
	admin := pgConnect(t)
	ctx := context.Background()
	schema := "sqlfence_" + randomSuffix()
	f, err := sqlfence.New(sqlfence.Config{Dialect: sqlfence.Postgres, Table: schema + ".leasehold_fence", LeaseTable: schema + ".leader_lease"})
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`CREATE SCHEMA ` + schema,
		`CREATE TABLE ` + schema + `.leader_lease (name text PRIMARY KEY, holder text, epoch bigint NOT NULL DEFAULT 0,
			expires_at timestamptz NOT NULL DEFAULT '-infinity')`,
		`CREATE TABLE ` + schema + `.attempts (attempt text PRIMARY KEY, token bigint NOT NULL)`,
		`CREATE TABLE ` + schema + `.writes (seq bigserial PRIMARY KEY, attempt text NOT NULL, token bigint NOT NULL)`,
		`CREATE TABLE ` + schema + `.invoices (id int PRIMARY KEY, status text NOT NULL, last_epoch bigint NOT NULL DEFAULT 0, last_holder text NOT NULL DEFAULT '')`,
		`CREATE TABLE ` + schema + `.counters (id int PRIMARY KEY, n bigint NOT NULL)`,
	} {
		if _, err := admin.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if err := f.Migrate(ctx, pgxfence.Execer(admin)); err != nil {
		t.Fatal(err)
	}
	if err := f.Migrate(ctx, pgxfence.Execer(admin)); err != nil {
		t.Fatalf("second Migrate: %v", err)
	}
	t.Cleanup(func() {
		if _, err := admin.Exec(context.Background(), `DROP SCHEMA `+schema+` CASCADE`); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	return &pgEnv{schema: schema, fence: f, admin: admin}
}

func (e *pgEnv) t(name string) string { return e.schema + "." + name }

func (e *pgEnv) sqlDB(t testing.TB) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", pgDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// waitForLockWait polls until the backend pid waits on a lock, or fails the
// test after a deadline. It waits on the real server's state, never on time.
func (e *pgEnv) waitForLockWait(t testing.TB, pid uint32) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		var wt *string
		err := e.admin.QueryRow(context.Background(),
			`SELECT wait_event_type FROM pg_stat_activity WHERE pid = $1`, pid).Scan(&wt)
		if err != nil {
			t.Fatalf("pg_stat_activity: %v", err)
		}
		if wt != nil && *wt == "Lock" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("backend %d never waited on a lock", pid)
		}
		time.Sleep(2 * time.Millisecond) // poll interval, not synchronisation
	}
}

// lockWaiting reports whether backend pid is waiting on a lock right now.
func (e *pgEnv) lockWaiting(t testing.TB, pid uint32) bool {
	t.Helper()
	var wt *string
	if err := e.admin.QueryRow(context.Background(),
		`SELECT wait_event_type FROM pg_stat_activity WHERE pid = $1`, pid).Scan(&wt); err != nil {
		t.Fatalf("pg_stat_activity: %v", err)
	}
	return wt != nil && *wt == "Lock"
}

func (e *pgEnv) fenceToken(t testing.TB, resource string) int64 {
	t.Helper()
	var tok int64
	err := e.admin.QueryRow(context.Background(), `SELECT token FROM `+e.fence.Table()+` WHERE resource = $1`, resource).Scan(&tok)
	if err == pgx.ErrNoRows {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// fenceTerm returns the fence row's token and holder (0, "" if none).
func (e *pgEnv) fenceTerm(t testing.TB, resource string) (int64, string) {
	t.Helper()
	var tok int64
	var holder string
	err := e.admin.QueryRow(context.Background(), `SELECT token, holder FROM `+e.fence.Table()+` WHERE resource = $1`, resource).Scan(&tok, &holder)
	if err == pgx.ErrNoRows {
		return 0, ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return tok, holder
}

// writesInOrder returns the tokens of the committed writes in lock order.
func (e *pgEnv) writesInOrder(t testing.TB) []int64 {
	t.Helper()
	rows, err := e.admin.Query(context.Background(), `SELECT token FROM `+e.t("writes")+` ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	toks, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	return toks
}

func (e *pgEnv) attempts(t testing.TB) map[string]int64 {
	t.Helper()
	rows, err := e.admin.Query(context.Background(), `SELECT attempt, token FROM `+e.t("attempts"))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	m := map[string]int64{}
	for rows.Next() {
		var a string
		var tok int64
		if err := rows.Scan(&a, &tok); err != nil {
			t.Fatal(err)
		}
		m[a] = tok
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return m
}

func nonDecreasing(toks []int64) (int, bool) {
	for i := 1; i < len(toks); i++ {
		if toks[i] < toks[i-1] {
			return i, false
		}
	}
	return 0, true
}
