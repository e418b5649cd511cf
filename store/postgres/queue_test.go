package postgres_test

import (
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold/store/postgres"
)

// TestQueueTablesAddedByMigrate: a schema migrated before the fair queue
// existed (here: its queue tables dropped) refuses Enqueue with
// ErrNotMigrated, and Migrate adds the tables without touching the lease.
func TestQueueTablesAddedByMigrate(t *testing.T) {
	schema := migrated(t)
	s := openStore(t, schema, postgres.Options{})
	ctx := ctxFor(t)
	rec, err := s.Acquire(ctx, "job", "node-a", time.Minute, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := adminConn(t).Exec(ctx, `DROP TABLE `+schema+`.leader_lease_queue, `+schema+`.leader_lease_qseq`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Enqueue(ctx, "job", "node-b", time.Minute); !errors.Is(err, postgres.ErrNotMigrated) {
		t.Fatalf("Enqueue without the queue tables: %v, want ErrNotMigrated", err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Enqueue(ctx, "job", "node-b", time.Minute); err != nil || n != 0 {
		t.Fatalf("Enqueue after Migrate: %d ahead, %v; want 0, nil", n, err)
	}
	got, err := s.Get(ctx, "job")
	if err != nil || got.Term != rec.Term {
		t.Fatalf("the lease after Migrate: %+v, %v; want %+v", got.Term, err, rec.Term)
	}
}
