package redis_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store"
)

// BenchmarkLockUnlock is one client taking and releasing a free lock with
// leasehold.Lock (TryAcquire, then Release): two scripts, two round trips.
func BenchmarkLockUnlock(b *testing.B) {
	addr := redisAddr(b)
	st := openStore(b, storeURL(addr, freshPrefix(b, addr)))
	lk, err := leasehold.NewLock(st, "bench", leasehold.LockConfig{Identity: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		h, err := lk.TryAcquire(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := h.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStoreAcquireRelease is the same at the store contract, without
// the Lock's holding goroutine.
func BenchmarkStoreAcquireRelease(b *testing.B) {
	addr := redisAddr(b)
	st := openStore(b, storeURL(addr, freshPrefix(b, addr)))
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		rec, err := st.Acquire(ctx, "bench", "node-a", 30*time.Second, "")
		if err != nil {
			b.Fatal(err)
		}
		if err := st.Release(ctx, rec.Term); err != nil {
			b.Fatal(err)
		}
	}
}

// noWatch hides the store's Watcher, so that waiters poll.
type noWatch struct{ store.Store }

// BenchmarkHandoff measures how long a waiter blocked in Lock.Acquire takes
// to hold the lock after the holder's Release returns: woken by the release's
// publish (pubsub, with a 2 s retry period that polling could not explain),
// or by polling every 100 ms (poll). The handoff-µs metric is that delay.
func BenchmarkHandoff(b *testing.B) {
	b.Run("pubsub", func(b *testing.B) { benchHandoff(b, false, 2*time.Second) })
	b.Run("poll", func(b *testing.B) { benchHandoff(b, true, 100*time.Millisecond) })
}

func benchHandoff(b *testing.B, poll bool, retry time.Duration) {
	addr := redisAddr(b)
	prefix := freshPrefix(b, addr)
	var stA, stB store.Store = openStore(b, storeURL(addr, prefix)), openStore(b, storeURL(addr, prefix))
	if poll {
		stB = noWatch{stB}
	}
	timings := leasehold.Timings{LeaseDuration: 30 * time.Second, RetryPeriod: retry, Jitter: 0.01}
	lkA, err := leasehold.NewLock(stA, "handoff", leasehold.LockConfig{Identity: "a", Timings: timings})
	if err != nil {
		b.Fatal(err)
	}
	refused := make(chan struct{}, 1)
	lkB, err := leasehold.NewLock(stB, "handoff", leasehold.LockConfig{Identity: "b", Timings: timings,
		OnEvent: func(e leasehold.Event) {
			if e.Kind == leasehold.EventAcquireAttempt && errors.Is(e.Err, store.ErrHeld) {
				select {
				case refused <- struct{}{}:
				default:
				}
			}
		}})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	type result struct {
		h   *leasehold.Held
		at  time.Time
		err error
	}
	got := make(chan result, 1)
	var total time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		hA, err := lkA.TryAcquire(ctx)
		if err != nil {
			b.Fatal(err)
		}
		go func() {
			h, err := lkB.Acquire(ctx)
			got <- result{h, time.Now(), err}
		}()
		<-refused // B was refused once and now waits
		if err := hA.Release(ctx); err != nil {
			b.Fatal(err)
		}
		released := time.Now()
		r := <-got
		if r.err != nil {
			b.Fatal(r.err)
		}
		total += r.at.Sub(released)
		if err := r.h.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(total.Microseconds())/float64(b.N), "handoff-µs")
}
