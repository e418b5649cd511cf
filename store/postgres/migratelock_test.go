package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold/store/postgres"
)

// TestMigrateCurrentTakesNoLock: Migrate on a schema that is current returns
// while another session holds the migration lock (processes starting at once
// do not queue behind each other), and the negative control: with one
// trigger disabled there is work to do, so Migrate waits for the lock, and
// does the work once it is free.
func TestMigrateCurrentTakesNoLock(t *testing.T) {
	schema := migrated(t)
	s := openStore(t, schema, postgres.Options{})
	ctx := ctxFor(t)
	admin := adminConn(t)
	tx, err := admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, postgres.MigrateLockKey); err != nil {
		t.Fatal(err)
	}

	short, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := s.Migrate(short); err != nil {
		t.Fatalf("Migrate on a current schema while the migration lock is held: %v, want nil without waiting", err)
	}

	other := adminConn(t)
	if _, err := other.Exec(ctx, `ALTER TABLE `+schema+`.leader_lease DISABLE TRIGGER leasehold_changed_insert`); err != nil {
		t.Fatal(err)
	}
	short2, cancel2 := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel2()
	if err := s.Migrate(short2); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Migrate with a trigger disabled while the migration lock is held: %v, want it to wait for the lock (deadline exceeded)", err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("Migrate once the lock is free: %v", err)
	}
	var enabled string
	if err := other.QueryRow(ctx, `SELECT tgenabled::text FROM pg_trigger WHERE tgrelid = $1::regclass AND tgname = 'leasehold_changed_insert'`,
		schema+".leader_lease").Scan(&enabled); err != nil {
		t.Fatal(err)
	}
	if enabled == "D" {
		t.Fatal("Migrate left the disabled trigger disabled")
	}
}
