package cli

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestRunStoreRefusesWrites: a PostgreSQL role that may read the lease table
// but not write it. run must say so and exit 69, not report "outcome
// unknown" every retry period for ever.
func TestRunStoreRefusesWrites(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, schema := migratedPGSchema(t, ctx, "lh_cli_ro")
	role := schema
	t.Cleanup(func() { // the role owns grants in the schema: drop the schema first
		conn.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
		conn.Exec(context.Background(), "DROP ROLE IF EXISTS "+role)
	})
	var out, errb bytes.Buffer
	for _, q := range []string{
		"CREATE ROLE " + role + " LOGIN",
		"GRANT USAGE ON SCHEMA " + schema + " TO " + role,
		"GRANT SELECT ON ALL TABLES IN SCHEMA " + schema + " TO " + role,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	ro := "postgres://" + role + "@127.0.0.1:5432/test?sslmode=disable&schema=" + schema
	out.Reset()
	errb.Reset()
	start := time.Now()
	code := Main(ctx, []string{"run", "--store", ro, "--lease", "job", "--lease-duration", "3s", "--", "true"}, strings.NewReader(""), &out, &errb)
	took := time.Since(start)
	if code != ExitStoreUnavailable || !strings.Contains(errb.String(), "answers reads but refuses writes") || !strings.Contains(errb.String(), "permission denied") {
		t.Fatalf("run on a read-only role: exit %d after %v, want %d and a message that the store refuses writes:\n%s", code, took, ExitStoreUnavailable, errb.String())
	}
	if ctx.Err() != nil {
		t.Fatalf("run went on until the test's deadline")
	}
	var rows int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM "+schema+".leader_lease").Scan(&rows); err != nil || rows != 0 {
		t.Fatalf("lease rows after a refused run: %d, %v", rows, err)
	}
	t.Logf("run stopped after %v: %s", took.Round(time.Millisecond), strings.TrimSpace(errb.String()))
}

// migratedPGSchema makes a schema named prefix and a random number on the
// test server, migrated by `leasehold migrate`, and returns an admin
// connection and the schema's name. Both are dropped at cleanup (the schema
// after the test's own cleanups).
func migratedPGSchema(t *testing.T, ctx context.Context, prefix string) (*pgx.Conn, string) {
	t.Helper()
	requireTCP(t, "PostgreSQL", "127.0.0.1:5432")
	schema := fmt.Sprintf("%s_%d", prefix, rand.Uint64()%1_000_000_000)
	conn, err := pgx.Connect(ctx, pgAdmin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
		conn.Close(context.Background())
	})
	var out, errb bytes.Buffer
	if code := Main(ctx, []string{"migrate", "--store", pgAdmin + "&schema=" + schema}, nil, &out, &errb); code != 0 {
		t.Fatalf("migrate: %d %s", code, errb.String())
	}
	return conn, schema
}

// pgAdmin is the test server as its superuser.
const pgAdmin = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
