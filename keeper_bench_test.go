package leasehold_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store/memstore"
)

// BenchmarkHeldLeaseFootprint: the heap bytes and goroutines per held lease
// in one process, at 10,000 and 100,000 leases, for one Keeper holding them
// all against one Elector per lease (each leading, its work blocked), one
// Lock per lease with KeepAlive, and one Lock per lease without it (a term
// that is not renewed keeps a timer, no goroutine). The store is memstore in the same process,
// so the bytes include its record of each lease (the same for every form).
// Default timings (15 s lease): no renewal falls inside the measurement.
//
//	go test -run '^$' -bench HeldLeaseFootprint -benchtime 1x .
func BenchmarkHeldLeaseFootprint(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		for _, form := range []string{"keeper", "elector", "lock", "lock-nokeepalive"} {
			b.Run(fmt.Sprintf("%s/leases=%d", form, n), func(b *testing.B) {
				for b.Loop() {
					bytes, gs := heldFootprint(b, form, n)
					b.ReportMetric(bytes/float64(n), "B/lease")
					b.ReportMetric(gs/float64(n), "goroutines/lease")
					b.ReportMetric(gs, "goroutines")
				}
			})
		}
	}
}

func heapNow() (uint64, int) {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc, runtime.NumGoroutine()
}

// heldFootprint holds n leases of form and returns the heap bytes and
// goroutines they added, then releases them.
func heldFootprint(b *testing.B, form string, n int) (float64, float64) {
	ctx := context.Background()
	st := memstore.New()
	h0, g0 := heapNow()
	var release []func()
	switch form {
	case "keeper":
		k, err := leasehold.NewKeeper(st, leasehold.Config{Identity: "node"})
		if err != nil {
			b.Fatal(err)
		}
		defer k.Close()
		for i := range n {
			l, err := k.TryAcquire(ctx, fmt.Sprintf("shard-%d", i))
			if err != nil {
				b.Fatal(err)
			}
			release = append(release, func() { l.Release(ctx) })
		}
	case "lock", "lock-nokeepalive":
		for i := range n {
			lk, err := leasehold.NewLock(st, fmt.Sprintf("shard-%d", i), leasehold.Config{Identity: "node", KeepAlive: form == "lock"})
			if err != nil {
				b.Fatal(err)
			}
			l, err := lk.TryAcquire(ctx)
			if err != nil {
				b.Fatal(err)
			}
			release = append(release, func() { l.Release(ctx) })
		}
	case "elector":
		for i := range n {
			e, err := leasehold.NewElector(st, fmt.Sprintf("shard-%d", i), leasehold.Config{Identity: "node"})
			if err != nil {
				b.Fatal(err)
			}
			leading, done := make(chan struct{}), make(chan error, 1)
			var once sync.Once
			rctx, cancel := context.WithCancel(ctx)
			go func() {
				done <- e.Run(rctx, func(ctx context.Context, _ *leasehold.Lease) error {
					once.Do(func() { close(leading) })
					<-ctx.Done()
					return nil
				})
			}()
			select {
			case <-leading:
			case err := <-done:
				cancel()
				b.Fatalf("elector %d returned before leading: %v", i, err)
			case <-time.After(time.Minute):
				cancel()
				b.Fatalf("elector %d did not lead within a minute", i)
			}
			release = append(release, func() { cancel(); <-done })
		}
	}
	h1, g1 := heapNow()
	for _, r := range release {
		r()
	}
	return float64(int64(h1) - int64(h0)), float64(g1 - g0)
}
