package redis_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store"
	lhredis "github.com/leasehold/leasehold/store/redis"
)

// BenchmarkLockUnlock is one client taking and releasing a free lock with
// leasehold.Lock (TryAcquire, then Release): two scripts, two round trips.
func BenchmarkLockUnlock(b *testing.B) {
	addr := redisAddr(b)
	st := openStore(b, storeURL(addr, freshPrefix(b, addr)))
	lk, err := leasehold.NewLock(st, "bench", leasehold.Config{Identity: "bench"})
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
	lkA, err := leasehold.NewLock(stA, "handoff", leasehold.Config{Identity: "a", Timings: timings})
	if err != nil {
		b.Fatal(err)
	}
	refused := make(chan struct{}, 1)
	lkB, err := leasehold.NewLock(stB, "handoff", leasehold.Config{Identity: "b", Timings: timings,
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
		h   *leasehold.Lease
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

// The two scripts bsm/redislock v0.9.4 sends per lock+unlock cycle (its
// Obtain and Release), copied from its source (Apache-2.0), for
// BenchmarkRedislockScripts.
var (
	redislockObtain = goredis.NewScript(`
if redis.call("set", KEYS[1], ARGV[1], "NX", "PX", ARGV[3]) then return redis.status_reply("OK") end

local offset = tonumber(ARGV[2])
if redis.call("getrange", KEYS[1], 0, offset-1) == string.sub(ARGV[1], 1, offset) then return redis.call("set", KEYS[1], ARGV[1], "PX", ARGV[3]) end
`)
	redislockRelease = goredis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`)
)

// BenchmarkRedislockScripts is the reference for the two benchmarks above:
// the requests redislock makes for one uncontended cycle (SET NX PX in a
// script, then compare-and-delete in a script), sent on the store's own
// client to the same key, so that the ratio to BenchmarkStoreAcquireRelease
// measures the store's scripts and code. On a loaded machine the load
// changes between benchmarks; BenchmarkVsRedislock compares within one.
func BenchmarkRedislockScripts(b *testing.B) {
	addr := redisAddr(b)
	st := openStore(b, storeURL(addr, freshPrefix(b, addr)))
	c := st.Client()
	key := []string{st.LockKey("bench")}
	ctx := context.Background()
	const ttl = "30000"
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		value := "node-a." + strconv.Itoa(i) // redislock sends a fresh random token each time
		if err := redislockObtain.Run(ctx, c, key, value, len(value), ttl).Err(); err != nil {
			b.Fatal(err)
		}
		if n, err := redislockRelease.Run(ctx, c, key, value).Int64(); err != nil || n != 1 {
			b.Fatalf("release = %d, %v", n, err)
		}
	}
}

// BenchmarkVsRedislock alternates one leasehold cycle and one redislock
// cycle (BenchmarkRedislockScripts's requests) on the same client and
// server, so that both see the same load however it drifts, and reports the
// mean time of each and their ratio (leasehold/redislock: below 1 is faster
// than redislock). store: store.Acquire + store.Release. lock:
// leasehold.Lock's TryAcquire + Release, which adds the Lock's holding
// goroutine and timers.
func BenchmarkVsRedislock(b *testing.B) {
	b.Run("store", func(b *testing.B) {
		benchVsRedislock(b, func(st *lhredis.Store) func(ctx context.Context) error {
			return func(ctx context.Context) error {
				rec, err := st.Acquire(ctx, "bench", "node-a", 30*time.Second, "")
				if err != nil {
					return err
				}
				return st.Release(ctx, rec.Term)
			}
		})
	})
	b.Run("lock", func(b *testing.B) {
		benchVsRedislock(b, func(st *lhredis.Store) func(ctx context.Context) error {
			lk, err := leasehold.NewLock(st, "bench", leasehold.Config{Identity: "bench"})
			if err != nil {
				b.Fatal(err)
			}
			return func(ctx context.Context) error {
				h, err := lk.TryAcquire(ctx)
				if err != nil {
					return err
				}
				return h.Release(ctx)
			}
		})
	})
}

func benchVsRedislock(b *testing.B, newCycle func(*lhredis.Store) func(context.Context) error) {
	addr := redisAddr(b)
	st := openStore(b, storeURL(addr, freshPrefix(b, addr)))
	cycle := newCycle(st)
	c := st.Client()
	key := []string{st.LockKey("bench-redislock")}
	ctx := context.Background()
	const ttl = "30000"
	var lh, rl time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if err := cycle(ctx); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		value := "node-a." + strconv.Itoa(i)
		if err := redislockObtain.Run(ctx, c, key, value, len(value), ttl).Err(); err != nil {
			b.Fatal(err)
		}
		if n, err := redislockRelease.Run(ctx, c, key, value).Int64(); err != nil || n != 1 {
			b.Fatalf("release = %d, %v", n, err)
		}
		lh += t1.Sub(t0)
		rl += time.Since(t1)
	}
	b.ReportMetric(float64(lh.Nanoseconds())/float64(b.N), "ns/leasehold")
	b.ReportMetric(float64(rl.Nanoseconds())/float64(b.N), "ns/redislock")
	b.ReportMetric(float64(lh)/float64(rl), "leasehold/redislock")
}
