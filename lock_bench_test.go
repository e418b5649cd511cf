package leasehold_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store/memstore"
	"github.com/leasehold/leasehold/store/storetest"
)

// BenchmarkLockCycle is one uncontended Acquire and Release of a Lock on
// the in-memory store: the core's own cost per cycle, with no network.
// store is the same cycle through the store alone, the floor the Lock adds
// to; events is a Lock with an OnEvent, as the bench program runs it.
func BenchmarkLockCycle(b *testing.B) {
	ctx := context.Background()
	b.Run("store", func(b *testing.B) {
		st := memstore.New()
		b.ReportAllocs()
		for b.Loop() {
			rec, err := st.Acquire(ctx, "bench", "node-a", 15*time.Second, "")
			if err != nil {
				b.Fatal(err)
			}
			if err := st.Release(ctx, rec.Term); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, tc := range []struct {
		name    string
		onEvent func(leasehold.Event)
	}{{"lock", nil}, {"events", func(leasehold.Event) {}}} {
		b.Run(tc.name, func(b *testing.B) {
			lk, err := leasehold.NewLock(memstore.New(), "bench", leasehold.Config{Identity: "bench", OnEvent: tc.onEvent})
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				h, err := lk.Acquire(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if err := h.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkLockHandoff is the core's own share of a hand-off, on the
// in-memory store (no network): the time from the holder's Release call to
// the waiter's Acquire returning, the waiter settled first (two refused
// attempts: the second after its watch was set). store is the same
// hand-off through the store alone: the release, the watch's wake-up and
// the waiter's Acquire.
func BenchmarkLockHandoff(b *testing.B) {
	ctx := context.Background()
	b.Run("store", func(b *testing.B) {
		storetest.BenchHandoff(b, memstore.New(), "bench", 15*time.Second)
	})
	for _, fair := range []bool{false, true} {
		name := "lock"
		if fair {
			name = "fair"
		}
		b.Run(name, func(b *testing.B) {
			st := memstore.New()
			refused := make(chan struct{}, 16)
			holder, err := leasehold.NewLock(st, "bench", leasehold.Config{Identity: "holder", Fair: fair})
			if err != nil {
				b.Fatal(err)
			}
			waiter, err := leasehold.NewLock(st, "bench", leasehold.Config{Identity: "waiter", Fair: fair, OnEvent: func(e leasehold.Event) {
				if e.Kind == leasehold.EventAcquireAttempt && e.Err != nil {
					refused <- struct{}{}
				}
			}})
			if err != nil {
				b.Fatal(err)
			}
			var total time.Duration
			for i := 0; i < b.N; i++ {
				h, err := holder.Acquire(ctx)
				if err != nil {
					b.Fatal(err)
				}
				for len(refused) > 0 {
					<-refused // a refusal of the last turn's, after its release
				}
				got := make(chan *leasehold.Lease, 1)
				go func() {
					l, err := waiter.Acquire(ctx)
					if err != nil {
						b.Error(err)
					}
					got <- l
				}()
				<-refused
				<-refused
				t0 := time.Now()
				if err := h.Release(ctx); err != nil {
					b.Fatal(err)
				}
				l := <-got
				total += time.Since(t0)
				if l == nil {
					b.FailNow()
				}
				if err := l.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(total.Nanoseconds())/float64(b.N)/1e3, "µs/handoff")
		})
	}
}
