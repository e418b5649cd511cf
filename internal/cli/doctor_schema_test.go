package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// TestDoctorSaysTheSchemaIsBehind: on PostgreSQL whose lease functions are
// missing (a schema an earlier version migrated), doctor says to run
// `leasehold migrate`, and still exits 0 (the store works); after migrate it
// says the schema is current. The control is the first half: the same
// command, the same store, a different answer.
func TestDoctorSaysTheSchemaIsBehind(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, schema := migratedPGSchema(t, ctx, "lh_cli_doctor")
	url := pgAdmin + "&schema=" + schema
	var out, errb bytes.Buffer
	if _, err := conn.Exec(ctx, "DROP FUNCTION "+schema+".leader_lease_acquire(text, text, float8, text, text)"); err != nil {
		t.Fatal(err)
	}
	doctor := func() string {
		t.Helper()
		out.Reset()
		errb.Reset()
		if code := Main(ctx, []string{"doctor", "--store", url, "--samples", "1"}, nil, &out, &errb); code != 0 {
			t.Fatalf("doctor: exit %d\n%s%s", code, out.String(), errb.String())
		}
		return out.String()
	}
	if got := doctor(); !strings.Contains(got, "schema made by an earlier version") || !strings.Contains(got, "leasehold migrate") {
		t.Fatalf("doctor on a schema without its lease functions says:\n%s\nwant it to say to run leasehold migrate", got)
	}
	if code := Main(ctx, []string{"migrate", "--store", url}, nil, &out, &errb); code != 0 {
		t.Fatalf("migrate: %d %s", code, errb.String())
	}
	if got := doctor(); !strings.Contains(got, "schema current") {
		t.Fatalf("doctor after migrate says:\n%s\nwant it to say the schema is current", got)
	}
}
