package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/leasehold/leasehold/store"
)

// BenchHandoff measures a store's own hand-off, b.N times on lease name:
// a holder's Release, the wake-up of a watch set before it, and a waiter's
// Acquire. It reports the mean as µs/handoff. st must be a store.Watcher.
func BenchHandoff(b *testing.B, st store.Store, name string, ttl time.Duration) {
	b.Helper()
	w, ok := st.(store.Watcher)
	if !ok {
		b.Fatalf("%T is not a store.Watcher", st)
	}
	ctx := context.Background()
	var total time.Duration
	for i := 0; i < b.N; i++ {
		h, err := st.Acquire(ctx, name, "holder", ttl, "")
		if err != nil {
			b.Fatal(err)
		}
		wctx, cancel := context.WithCancel(ctx)
		ch, err := w.Watch(wctx, name)
		if err != nil {
			b.Fatal(err)
		}
		for len(ch) > 0 {
			<-ch // a wake-up from before the release
		}
		t0 := time.Now()
		if err := st.Release(ctx, h.Term); err != nil {
			b.Fatal(err)
		}
		<-ch
		got, err := st.Acquire(ctx, name, "waiter", ttl, "")
		if err != nil {
			b.Fatal(err)
		}
		total += time.Since(t0)
		cancel()
		if err := st.Release(ctx, got.Term); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(total.Nanoseconds())/float64(b.N)/1e3, "µs/handoff")
}
