package postgres_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store/postgres"
)

// TestFairWaiterThatCannotWriteYieldsItsTurn: three fair Electors on one
// lease of a real server. a leads. b logs in as a role that may queue but
// not write the lease table (the README's grants applied in part), so each
// of its acquires fails with "permission denied" (an unknown outcome to the
// library; `leasehold run` stops on it, a library user's Elector keeps
// trying) while its places are written; b queues first, c after it. Once
// a's work returns, c leads: b gives up its turn after each failed acquire.
// Before, b kept its place first in the queue for as long as it ran, and
// c, who does not try while a place is ahead, never led (shown by hand
// with the core's change undone).
func TestFairWaiterThatCannotWriteYieldsItsTurn(t *testing.T) {
	schema := migrated(t)
	role, roleDSN := leaseRole(t)
	if _, err := adminConn(t).Exec(ctxFor(t), strings.NewReplacer("{s}", schema, "{r}", role).Replace(`
		GRANT USAGE ON SCHEMA {s} TO {r};
		GRANT SELECT ON {s}.leader_lease, {s}.leader_lease_history TO {r};
		GRANT SELECT, INSERT, UPDATE, DELETE ON {s}.leader_lease_queue TO {r};
		GRANT SELECT, INSERT, UPDATE ON {s}.leader_lease_qseq TO {r};`)); err != nil {
		t.Fatalf("grant: %v", err)
	}
	queueOnly, err := postgres.Open(ctxFor(t), withParams(t, roleDSN, "pool_max_conns", "2"), postgres.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { queueOnly.Close() })
	timings := leasehold.Timings{LeaseDuration: 2 * time.Second, RenewDeadline: 1200 * time.Millisecond, RenewInterval: 400 * time.Millisecond, RetryPeriod: 200 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	led := map[string]chan struct{}{"a": make(chan struct{}), "b": make(chan struct{}), "c": make(chan struct{})}
	aDone := make(chan struct{})
	var failed sync.Once
	bFailed := make(chan struct{})
	elect := func(who string, st *postgres.Store) {
		cfg := leasehold.Config{Identity: who, Fair: true, Timings: timings}
		if who == "b" {
			cfg.OnEvent = func(e leasehold.Event) {
				if e.Kind == leasehold.EventAcquireAttempt && e.Err != nil && strings.Contains(e.Err.Error(), "permission denied") {
					failed.Do(func() { close(bFailed) })
				}
			}
		}
		e, err := leasehold.NewElector(st, "job", cfg)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			e.Run(ctx, func(ctx context.Context, l *leasehold.Lease) error {
				select {
				case <-led[who]: // led before (a, once its Elector contends again)
				default:
					close(led[who])
				}
				if who == "a" {
					select {
					case <-aDone:
					case <-ctx.Done():
					}
					return nil
				}
				<-ctx.Done()
				return nil
			})
		}()
	}
	admin := adminConn(t)
	positions := func() int {
		var n int
		if err := admin.QueryRow(ctxFor(t), `SELECT coalesce(max(n), 0) FROM `+schema+`.leader_lease_qseq WHERE name = 'job'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	elect("a", openStore(t, schema, postgres.Options{}))
	<-led["a"]
	elect("b", queueOnly)
	select {
	case <-bFailed:
	case <-time.After(30 * time.Second):
		t.Fatal("b's acquires did not fail with permission denied")
	}
	waitFor(t, "b to queue", func() bool { return positions() >= 1 })
	elect("c", openStore(t, schema, postgres.Options{}))
	waitFor(t, "c to queue", func() bool { return positions() >= 2 })
	close(aDone)
	select {
	case <-led["c"]:
	case <-led["b"]:
		t.Fatal("b, which may not write the lease table, led")
	case <-time.After(20 * time.Second):
		t.Fatal("c did not lead within 20 s of a's work returning")
	}
}
