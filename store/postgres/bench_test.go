package postgres_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/postgres"
)

// BenchmarkHandoff measures the hand-off after a release: a waiter on a
// second store is blocked in Lock.Acquire, the holder releases, and the
// clock runs from the release call until the waiter holds the lock. With
// "notify" the waiter is woken by LISTEN/NOTIFY (and polls only every eight
// minutes); with "poll-100ms" it has no watch and polls every 100 ms (plus
// up to 20% jitter), for comparison.
func BenchmarkHandoff(b *testing.B) {
	b.Run("notify", func(b *testing.B) { benchHandoff(b, true, slowPoll) })
	b.Run("poll-100ms", func(b *testing.B) {
		benchHandoff(b, false, leasehold.Timings{LeaseDuration: 10 * time.Minute, RenewDeadline: 9 * time.Minute, RenewInterval: time.Minute, RetryPeriod: 100 * time.Millisecond})
	})
}

func benchHandoff(b *testing.B, watch bool, timings leasehold.Timings) {
	schema := migrated(b)
	holderStore := openStore(b, schema, postgres.Options{NoWatch: true})
	waiterStore := openStore(b, schema, postgres.Options{NoWatch: !watch})
	ctx := ctxFor(b)
	holder, err := leasehold.NewLock(holderStore, "job", leasehold.Config{Identity: "holder", Timings: timings})
	if err != nil {
		b.Fatal(err)
	}
	refused := make(chan struct{}, 1)
	waiter, err := leasehold.NewLock(waiterStore, "job", leasehold.Config{Identity: "waiter", Timings: timings, OnEvent: func(ev leasehold.Event) {
		if ev.Kind == leasehold.EventAcquireAttempt && ev.Err != nil {
			select {
			case refused <- struct{}{}:
			default:
			}
		}
	}})
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		h, err := holder.Acquire(ctx)
		if err != nil {
			b.Fatal(err)
		}
		select {
		case <-refused:
		default:
		}
		got := make(chan *leasehold.Lease, 1)
		go func() {
			w, err := waiter.Acquire(ctx)
			if err != nil {
				b.Error(err)
			}
			got <- w
		}()
		<-refused // the waiter is blocked (and, with a watch, watching)
		b.StartTimer()
		if err := h.Release(ctx); err != nil {
			b.Fatal(err)
		}
		w := <-got
		b.StopTimer()
		if w == nil {
			b.FailNow()
		}
		if err := w.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCycle measures one client's Acquire + Release on one
// connection: "functions" through the lease functions (the default on a
// migrated schema), "statements" with the functions dropped (the statements
// themselves, as on a schema migrated by an earlier version), and
// "prepared" with Options.PreparedStatements. server-µs/op is the CPU time
// of the connection's backend per cycle (from /proc/<pid>/schedstat, so
// the server must run on this host), which the commit's WAL flush, whose
// wait dominates the wall time, does not blur. Run with -count to alternate
// the three.
func BenchmarkCycle(b *testing.B) {
	b.Run("functions", func(b *testing.B) { benchCycle(b, false, false, false) })
	b.Run("statements", func(b *testing.B) { benchCycle(b, true, false, false) })
	b.Run("prepared", func(b *testing.B) { benchCycle(b, false, true, false) })
	// unqueued is a fair Lock's uncontended cycle: AcquireUnqueued, whose
	// condition reads the queue table first, then Release.
	b.Run("unqueued", func(b *testing.B) { benchCycle(b, false, false, true) })
	// unqueued-prepared: the same with prepared statements, planned once
	// per connection; without them PostgreSQL plans each statement, and
	// the condition's subquery costs more to plan than the function call.
	b.Run("unqueued-prepared", func(b *testing.B) { benchCycle(b, false, true, true) })
}

func benchCycle(b *testing.B, dropFunctions, prepared, unqueued bool) {
	schema := migrated(b)
	ctx := ctxFor(b)
	if dropFunctions {
		dropLeaseFunctions(b, schema)
	}
	conn, err := pgx.Connect(ctx, testDSN(b))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(context.Background())
	st, err := postgres.NewConn(ctx, conn, postgres.Options{Schema: schema, NoWatch: true, PreparedStatements: prepared})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	acquire := st.Acquire
	if unqueued {
		acquire = st.AcquireUnqueued
	}
	cycle := func() {
		rec, err := acquire(ctx, "job", "node-a", time.Minute, "")
		if err != nil {
			b.Fatal(err)
		}
		if err := st.Release(ctx, rec.Term); err != nil {
			b.Fatal(err)
		}
	}
	for range 20 { // past PL/pgSQL's custom plans, onto its cached one
		cycle()
	}
	cpu := func() time.Duration {
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/schedstat", conn.PgConn().PID()))
		if err != nil {
			return -1
		}
		ns, err := strconv.ParseInt(strings.Fields(string(raw))[0], 10, 64)
		if err != nil {
			return -1
		}
		return time.Duration(ns)
	}
	cpu0 := cpu()
	b.ResetTimer()
	for range b.N {
		cycle()
	}
	b.StopTimer()
	if cpu1 := cpu(); cpu0 >= 0 && cpu1 >= 0 {
		b.ReportMetric(float64((cpu1-cpu0).Nanoseconds())/1000/float64(b.N), "server-µs/op")
	}
}

// BenchmarkRenewMany renews 1,000 and 10,000 leases: "batch" in one
// RenewMany statement, "each" with one Renew statement per lease. ns/lease
// is the cost per renewed lease.
func BenchmarkRenewMany(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("batch-%d", n), func(b *testing.B) { benchRenew(b, n, true) })
		b.Run(fmt.Sprintf("each-%d", n), func(b *testing.B) { benchRenew(b, n, false) })
	}
}

func benchRenew(b *testing.B, n int, batch bool) {
	schema := migrated(b)
	st := openStore(b, schema, postgres.Options{NoWatch: true})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	// n leases of node-a, epoch 1, inserted in one statement.
	if _, err := adminConn(b).Exec(ctx, `INSERT INTO `+schema+`.leader_lease (name, holder, epoch, expires_at, meta_epoch)
		SELECT 'shard/' || i, 'node-a', 1, now() + interval '1 hour', 1 FROM generate_series(0, $1 - 1) AS i`, n); err != nil {
		b.Fatal(err)
	}
	terms := make([]store.Term, n)
	for i := range terms {
		terms[i] = store.Term{Name: fmt.Sprintf("shard/%d", i), Holder: "node-a", Token: 1}
	}
	b.ResetTimer()
	for range b.N {
		if batch {
			_, errs, err := st.RenewMany(ctx, terms, time.Hour)
			if err != nil {
				b.Fatal(err)
			}
			for i, err := range errs {
				if err != nil {
					b.Fatalf("%v: %v", terms[i], err)
				}
			}
		} else {
			for _, t := range terms {
				if _, err := st.Renew(ctx, t, time.Hour); err != nil {
					b.Fatalf("%v: %v", t, err)
				}
			}
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/lease")
}
