package mysql_test

import (
	"errors"
	"testing"
	"time"

	lhmysql "github.com/leasehold/leasehold/store/mysql"
)

// TestQueueTablesAddedByMigrate: a database migrated before the fair queue
// existed (here: its queue tables dropped) refuses Enqueue with
// ErrNotMigrated, and Migrate adds the tables without touching the lease.
func TestQueueTablesAddedByMigrate(t *testing.T) {
	db := migrated(t)
	s := openStore(t, db, lhmysql.Options{})
	ctx := ctxFor(t)
	rec, err := s.Acquire(ctx, "job", "node-a", time.Minute, "")
	if err != nil {
		t.Fatal(err)
	}
	mustExec(t, rawDB(t, db), "DROP TABLE leader_lease_queue, leader_lease_qseq")
	if _, err := s.Enqueue(ctx, "job", "node-b", time.Minute); !errors.Is(err, lhmysql.ErrNotMigrated) {
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

// TestQueuedNamesForgottenAfterDequeue: the Store remembers a name whose
// queue its poller must read only while a place queued through it is there,
// so a process that queues for many names over its life does not read (or
// keep) all of them for ever.
func TestQueuedNamesForgottenAfterDequeue(t *testing.T) {
	s := openStore(t, migrated(t), lhmysql.Options{})
	ctx := ctxFor(t)
	names := []string{"a", "b", "c"}
	for _, n := range names {
		for _, h := range []string{"node-1", "node-2"} {
			if _, err := s.Enqueue(ctx, n, h, time.Minute); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got := lhmysql.QueuedNames(s); got != len(names) {
		t.Fatalf("%d queued names after enqueueing %d", got, len(names))
	}
	for _, n := range names {
		if err := s.Dequeue(ctx, n, "node-1"); err != nil {
			t.Fatal(err)
		}
	}
	// node-2 still waits in each queue: its names stay.
	if got := lhmysql.QueuedNames(s); got != len(names) {
		t.Fatalf("%d queued names while node-2 still waits in %d", got, len(names))
	}
	for _, n := range names {
		if err := s.Dequeue(ctx, n, "node-2"); err != nil {
			t.Fatal(err)
		}
	}
	if got := lhmysql.QueuedNames(s); got != 0 {
		t.Fatalf("%d queued names after every place left", got)
	}
}
