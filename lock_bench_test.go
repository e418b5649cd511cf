package leasehold_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store/memstore"
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
