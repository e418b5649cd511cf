package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store/faultstore"
	"github.com/leasehold/leasehold/store/postgres"
)

// TestKeeperOnPostgres holds a thousand leases with one Keeper. Each batch
// is one UPDATE, so every lease it renews gets the same now(): after a batch
// all thousand rows share one expires_at. A lease a raw SQL client takes
// over ends alone, with ErrLeaseLost, at the next batch.
func TestKeeperOnPostgres(t *testing.T) {
	schema := migrated(t)
	st := openStore(t, schema, postgres.Options{})
	counted := faultstore.New(st)
	raw := rawClient(t, schema)
	ctx := ctxFor(t)
	// A long lease: under load the 999 releases after Close can take seconds,
	// and a term that expired meanwhile is not released (its row stays named).
	k, err := leasehold.NewKeeper(counted, leasehold.Config{Identity: "node-a",
		Timings: leasehold.Timings{LeaseDuration: 30 * time.Second, RenewDeadline: 20 * time.Second, RenewInterval: 500 * time.Millisecond, RetryPeriod: 400 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	const n = 1000
	kept := make([]*leasehold.Lease, n)
	for i := range n {
		if kept[i], err = k.TryAcquire(ctx, fmt.Sprintf("shard/%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	distinctExpiries := func() (rows, distinct int) {
		if err := raw.QueryRow(ctx, `SELECT count(*), count(DISTINCT expires_at) FROM leader_lease WHERE holder = $1`, k.Identity()).Scan(&rows, &distinct); err != nil {
			t.Fatal(err)
		}
		return rows, distinct
	}
	if rows, distinct := distinctExpiries(); rows != n || distinct < 2 {
		t.Fatalf("after the acquires: %d rows, %d distinct expiries; want %d rows acquired one by one", rows, distinct, n)
	}
	// Wait for a batch sent after the last acquire.
	before := counted.Calls(faultstore.OpRenew)
	waitFor(t, "two batches after the acquires", func() bool { return counted.Calls(faultstore.OpRenew) >= before+2 })
	if rows, distinct := distinctExpiries(); rows != n || distinct != 1 {
		t.Fatalf("after a batch: %d rows with %d distinct expiries; want %d rows renewed by one statement (one now())", rows, distinct, n)
	}

	// A raw client takes shard/7 over (as after an expiry): only it is lost.
	victim := kept[7]
	if _, err := raw.Exec(ctx, `UPDATE leader_lease SET holder = 'thief', epoch = epoch + 1, expires_at = now() + interval '1 minute' WHERE name = $1`, victim.Name()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-victim.Context().Done():
	case <-ctx.Done():
		t.Fatal("the taken-over lease's context was not cancelled")
	}
	if cause := context.Cause(victim.Context()); !errors.Is(cause, leasehold.ErrLeaseLost) {
		t.Fatalf("taken-over lease ended with %v, want ErrLeaseLost", cause)
	}
	before = counted.Calls(faultstore.OpRenew)
	waitFor(t, "another batch", func() bool { return counted.Calls(faultstore.OpRenew) >= before+2 })
	for i, kp := range kept {
		if i != 7 && kp.Context().Err() != nil {
			t.Fatalf("%s ended with %v; only shard/7 was taken", kp.Name(), context.Cause(kp.Context()))
		}
	}
	if got := len(k.Terms()); got != n-1 {
		t.Fatalf("the keeper holds %d terms, want %d", got, n-1)
	}
	if err := victim.Release(ctx); err == nil {
		t.Fatal("Release of the taken-over lease succeeded")
	}
	k.Close()
	for _, kp := range kept {
		kp.Release(ctx)
	}
	var held int
	if err := raw.QueryRow(ctx, `SELECT count(*) FROM leader_lease WHERE holder IS NOT NULL`).Scan(&held); err != nil || held != 1 {
		t.Fatalf("after releasing everything %d rows are held (%v), want only the thief's", held, err)
	}
}
