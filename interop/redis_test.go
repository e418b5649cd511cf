// Package interop runs peer libraries against leasehold on the same keys. It
// is its own module, so that the peers never enter leasehold's go.mod.
package interop_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/store"
	lhredis "github.com/leasehold/leasehold/store/redis"
)

// env is one test's Redis: a fresh key prefix on the machine's Redis, a
// go-redis client for the peers, and leasehold store handles.
type env struct {
	t      *testing.T
	addr   string
	prefix string
	client *goredis.Client
}

func newEnv(t *testing.T) *env {
	t.Helper()
	addr := testenv.RequireTCP(t, "Redis", testenv.Env("LEASEHOLD_REDIS_ADDR", "127.0.0.1:6379"),
		"start redis-server on 127.0.0.1:6379 or set LEASEHOLD_REDIS_ADDR")
	b := make([]byte, 6)
	rand.Read(b)
	e := &env{t: t, addr: addr, prefix: "lhinterop:" + hex.EncodeToString(b) + ":"}
	e.client = goredis.NewClient(&goredis.Options{Addr: addr})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		it := e.client.Scan(ctx, 0, e.prefix+"*", 500).Iterator()
		for it.Next(ctx) {
			e.client.Del(ctx, it.Val())
		}
		if err := it.Err(); err != nil {
			t.Errorf("cleanup of %s*: %v", e.prefix, err)
		}
		e.client.Close()
	})
	return e
}

func (e *env) store() *lhredis.Store {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := lhredis.Open(ctx, "redis://"+e.addr+"/0?prefix="+e.prefix)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { st.Close() })
	return st
}

func (e *env) lock(st store.Store, name, identity string) *leasehold.Lock {
	e.t.Helper()
	lk, err := leasehold.NewLock(st, name, leasehold.Config{Identity: identity,
		Timings: leasehold.Timings{LeaseDuration: 30 * time.Second, RetryPeriod: 20 * time.Millisecond}})
	if err != nil {
		e.t.Fatal(err)
	}
	return lk
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestRedislockAndLeaseholdExclude: on one key, a leasehold holder keeps
// bsm/redislock out, and a redislock holder keeps leasehold out; after each
// releases, the other gets in, and leasehold's token still rises.
func TestRedislockAndLeaseholdExclude(t *testing.T) {
	e := newEnv(t)
	ctx := ctxFor(t)
	st := e.store()
	key := st.LockKey("job")
	lk := e.lock(st, "job", "lh")
	rl := redislock.New(e.client)

	held, err := lk.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rl.Obtain(ctx, key, 10*time.Second, nil); !errors.Is(err, redislock.ErrNotObtained) {
		t.Fatalf("redislock.Obtain while leasehold holds %s: err = %v, want ErrNotObtained", key, err)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}

	peer, err := rl.Obtain(ctx, key, 10*time.Second, nil)
	if err != nil {
		t.Fatalf("redislock.Obtain after leasehold released: %v", err)
	}
	var he *leasehold.HeldError
	if _, err := lk.TryAcquire(ctx); !errors.As(err, &he) || he.Record.Holder != peer.Token() || !he.Record.Live() {
		t.Fatalf("leasehold TryAcquire while redislock holds: err = %v, want HeldError naming redislock's value %q", err, peer.Token())
	}
	if err := peer.Release(ctx); err != nil {
		t.Fatalf("redislock Release: %v", err)
	}
	again, err := lk.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("leasehold TryAcquire after redislock released: %v", err)
	}
	if again.Token() <= held.Token() {
		t.Errorf("leasehold token after a redislock term = %d, want above %d", again.Token(), held.Token())
	}
	// redislock cannot release or refresh leasehold's key with its own value.
	if err := peer.Release(ctx); !errors.Is(err, redislock.ErrLockNotHeld) {
		t.Errorf("stale redislock Release over a leasehold term: err = %v, want ErrLockNotHeld", err)
	}
	if err := peer.Refresh(ctx, time.Minute, nil); !errors.Is(err, redislock.ErrNotObtained) {
		t.Errorf("stale redislock Refresh over a leasehold term: err = %v, want ErrNotObtained", err)
	}
	if err := again.Release(ctx); err != nil {
		t.Errorf("leasehold Release after the stale redislock calls: %v (its term was touched)", err)
	}
}

// TestRedsyncAndLeaseholdExclude: the same with go-redsync's Mutex.
func TestRedsyncAndLeaseholdExclude(t *testing.T) {
	e := newEnv(t)
	ctx := ctxFor(t)
	st := e.store()
	key := st.LockKey("job")
	lk := e.lock(st, "job", "lh")
	rs := redsync.New(redsyncgoredis.NewPool(e.client))
	mutex := func() *redsync.Mutex {
		return rs.NewMutex(key, redsync.WithTries(1), redsync.WithExpiry(10*time.Second))
	}

	held, err := lk.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := mutex().TryLockContext(ctx); err == nil {
		t.Fatalf("redsync TryLock while leasehold holds %s succeeded", key)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}

	m := mutex()
	if err := m.TryLockContext(ctx); err != nil {
		t.Fatalf("redsync TryLock after leasehold released: %v", err)
	}
	var he *leasehold.HeldError
	if _, err := lk.TryAcquire(ctx); !errors.As(err, &he) || he.Record.Holder != m.Value() {
		t.Fatalf("leasehold TryAcquire while redsync holds: err = %v, want HeldError naming redsync's value %q", err, m.Value())
	}
	if ok, err := m.UnlockContext(ctx); !ok || err != nil {
		t.Fatalf("redsync Unlock = %v, %v", ok, err)
	}
	again, err := lk.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("leasehold TryAcquire after redsync unlocked: %v", err)
	}
	if again.Token() <= held.Token() {
		t.Errorf("leasehold token after a redsync term = %d, want above %d", again.Token(), held.Token())
	}
	if ok, _ := m.ExtendContext(ctx); ok {
		t.Errorf("stale redsync Extend over a leasehold term succeeded")
	}
	if ok, _ := m.UnlockContext(ctx); ok {
		t.Errorf("stale redsync Unlock over a leasehold term succeeded")
	}
	if err := again.Release(ctx); err != nil {
		t.Errorf("leasehold Release after the stale redsync calls: %v (its term was touched)", err)
	}
}

// TestMixedContention: leasehold Locks, redislock clients and redsync
// mutexes race for one key; an in-process counter checks that no two of
// them are ever inside at once.
func TestMixedContention(t *testing.T) {
	e := newEnv(t)
	ctx := ctxFor(t)
	st := e.store()
	key := st.LockKey("job")
	const perWorker = 15
	var inside, maxInside, entries atomic.Int64
	enter := func() {
		n := inside.Add(1)
		for {
			m := maxInside.Load()
			if n <= m || maxInside.CompareAndSwap(m, n) {
				break
			}
		}
		entries.Add(1)
		// Yield inside, so that an intruder would be seen.
		for i := 0; i < 20; i++ {
			runtime.Gosched()
		}
		inside.Add(-1)
	}
	var wg sync.WaitGroup
	errc := make(chan error, 16)
	worker := func(name string, cycle func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < perWorker; i++ {
				if err := cycle(); err != nil {
					errc <- fmt.Errorf("%s: %w", name, err)
					return
				}
			}
		}()
	}
	for i := 0; i < 2; i++ {
		lk := e.lock(e.store(), "job", fmt.Sprintf("lh%d", i))
		worker(fmt.Sprintf("leasehold %d", i), func() error {
			h, err := lk.Acquire(ctx)
			if err != nil {
				return err
			}
			enter()
			return h.Release(ctx)
		})
	}
	rl := redislock.New(e.client)
	for i := 0; i < 2; i++ {
		worker(fmt.Sprintf("redislock %d", i), func() error {
			octx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			l, err := rl.Obtain(octx, key, 10*time.Second, &redislock.Options{RetryStrategy: redislock.LinearBackoff(5 * time.Millisecond)})
			if err != nil {
				return err
			}
			enter()
			return l.Release(ctx)
		})
	}
	rs := redsync.New(redsyncgoredis.NewPool(e.client))
	for i := 0; i < 2; i++ {
		worker(fmt.Sprintf("redsync %d", i), func() error {
			m := rs.NewMutex(key, redsync.WithExpiry(10*time.Second), redsync.WithTries(10000),
				redsync.WithRetryDelay(5*time.Millisecond))
			if err := m.LockContext(ctx); err != nil {
				return err
			}
			enter()
			if ok, err := m.UnlockContext(ctx); !ok {
				return fmt.Errorf("unlock: %v", err)
			}
			return nil
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	if got := entries.Load(); got != 6*perWorker {
		t.Errorf("%d critical sections ran, want %d", got, 6*perWorker)
	}
	if m := maxInside.Load(); m != 1 {
		t.Fatalf("%d holders were inside at once, want 1", m)
	}
}
