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
	requireTCP(t, "PostgreSQL", "127.0.0.1:5432")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n := rand.Uint64() % 1_000_000_000
	schema, role := fmt.Sprintf("lh_cli_ro_%d", n), fmt.Sprintf("lh_cli_ro_%d", n)
	admin := "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	t.Cleanup(func() {
		conn.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
		conn.Exec(context.Background(), "DROP ROLE IF EXISTS "+role)
	})
	var out, errb bytes.Buffer
	if code := Main(ctx, []string{"migrate", "--store", admin + "&schema=" + schema}, nil, &out, &errb); code != 0 {
		t.Fatalf("migrate: %d %s", code, errb.String())
	}
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
