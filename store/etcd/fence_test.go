package etcd

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store"
)

// fencedPut writes key=val in one transaction guarded by cmp and reports
// whether it applied.
func fencedPut(t *testing.T, cli *clientv3.Client, f Fencing, key, val string) bool {
	t.Helper()
	resp, err := cli.Txn(testCtx(t, 10*time.Second)).If(fenceCmp(f)).Then(clientv3.OpPut(key, val)).Commit()
	if err != nil {
		t.Fatalf("fenced put: %v", err)
	}
	return resp.Succeeded
}

// TestFence: the comparison from Fence lets a write apply while the exact
// term holds, and never after it was released, expired, or replaced (even by
// the same holder).
func TestFence(t *testing.T) {
	m := shared(t)
	prefix := uniquePrefix("fence")
	a, b := openStore(t, prefix, m.clientURL), openStore(t, prefix, m.clientURL)
	ctx := testCtx(t, 30*time.Second)
	data := prefix + "data"

	// Released.
	t1, err := a.Acquire(ctx, "job", "node-a", time.Minute, "")
	if err != nil {
		t.Fatal(err)
	}
	cmp1, err := a.Fence(ctx, t1.Term)
	if err != nil {
		t.Fatalf("Fence of the live term: %v", err)
	}
	// Another handle (no memory of the term) finds the same key.
	if cmpB, err := b.Fence(ctx, t1.Term); err != nil || cmpB != cmp1 {
		t.Fatalf("Fence through another handle: %v, %v; want the same comparison", cmpB, err)
	}
	if !fencedPut(t, a.Client(), cmp1, data, "t1") {
		t.Fatal("fenced write of the live term did not apply")
	}
	if err := a.Release(ctx, t1.Term); err != nil {
		t.Fatal(err)
	}
	if fencedPut(t, a.Client(), cmp1, data, "t1-late") {
		t.Fatal("fenced write of a released term applied")
	}
	if _, err := b.Fence(ctx, t1.Term); !errors.Is(err, store.ErrNotHeld) {
		t.Fatalf("Fence of a released term: %v, want ErrNotHeld", err)
	}

	// Replaced by the same holder's new term.
	t2, err := a.Acquire(ctx, "job", "node-a", time.Minute, "")
	if err != nil {
		t.Fatal(err)
	}
	cmp2, _ := a.Fence(ctx, t2.Term)
	t3, err := a.Acquire(ctx, "job", "node-a", time.Minute, "")
	if err != nil {
		t.Fatal(err)
	}
	if fencedPut(t, a.Client(), cmp2, data, "t2-late") {
		t.Fatal("fenced write of a term replaced by the same holder applied")
	}
	cmp3, err := b.Fence(ctx, t3.Term)
	if err != nil || !fencedPut(t, b.Client(), cmp3, data, "t3") {
		t.Fatalf("fenced write of the replacing term: %v", err)
	}
	if err := a.Release(ctx, t3.Term); err != nil {
		t.Fatal(err)
	}

	// Expired (a holder that stopped renewing), then taken over.
	t4, err := a.Acquire(ctx, "job", "node-a", MinTTL, "")
	if err != nil {
		t.Fatal(err)
	}
	cmp4, _ := a.Fence(ctx, t4.Term)
	waitNotLive(t, b, "job")
	if fencedPut(t, a.Client(), cmp4, data, "t4-late") {
		t.Fatal("fenced write of an expired term applied")
	}
	t5, err := b.Acquire(ctx, "job", "node-b", time.Minute, "")
	if err != nil {
		t.Fatal(err)
	}
	if fencedPut(t, a.Client(), cmp4, data, "t4-later") {
		t.Fatal("fenced write of an expired term applied after a takeover")
	}
	if cmp, err := b.Fence(ctx, t5.Term); err != nil || !fencedPut(t, b.Client(), cmp, data, "t5") {
		t.Fatalf("fenced write of the new holder: %v", err)
	}
	got, err := a.Client().Get(ctx, data)
	if err != nil || len(got.Kvs) != 1 || string(got.Kvs[0].Value) != "t5" {
		t.Fatalf("data = %v, %v; want the last fenced write t5", got, err)
	}
	// TermKey's key and the token are the same condition.
	key, err := b.TermKey(ctx, t5.Term)
	if err != nil || !fencedPut(t, b.Client(), Fencing{Key: key, CreateRevision: t5.Token}, data, "t5-again") {
		t.Fatalf("FenceCmp(TermKey): %v", err)
	}
}

func waitNotLive(t *testing.T, st store.Store, name string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		r, err := st.Get(testCtx(t, 5*time.Second), name)
		if err != nil {
			t.Fatal(err)
		}
		if !r.Live() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%q still live: %+v", name, r)
		}
		time.Sleep(20 * time.Millisecond) // polling the server's state
	}
}

// frozenClock is a Clock whose timers never fire: a contender on it can only
// wake through the store's watch.
type frozenClock struct{}

func (frozenClock) Now() time.Time                         { return time.Now() }
func (frozenClock) NewTimer(time.Duration) leasehold.Timer { return frozenTimer{} }

type frozenTimer struct{}

func (frozenTimer) C() <-chan time.Time      { return nil }
func (frozenTimer) Stop() bool               { return true }
func (frozenTimer) Reset(time.Duration) bool { return true }

// waiterLock is a Lock whose contender can only wake through the watch, and
// which reports its first refused attempt on started.
func waiterLock(t *testing.T, st store.Store, name string) (*leasehold.Lock, <-chan struct{}) {
	t.Helper()
	started := make(chan struct{})
	var once atomic.Bool
	lk, err := leasehold.NewLock(st, name, leasehold.Config{
		Identity: "waiter", Clock: frozenClock{}, Timings: leasehold.Timings{LeaseDuration: time.Minute},
		OnEvent: func(ev leasehold.Event) {
			if ev.Kind == leasehold.EventAcquireAttempt && errors.Is(ev.Err, store.ErrHeld) && once.CompareAndSwap(false, true) {
				close(started)
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return lk, started
}

// TestHandoffThroughWatch: a waiter whose timers never fire gets the lease as
// soon as it is freed, which proves that the watch delivered the change:
// a release the moment after the waiter's first refused attempt (repeated, to
// land at different points of the waiter's wait), an etcd Mutex unlocking, and
// a crashed holder whose etcd lease expires.
func TestHandoffThroughWatch(t *testing.T) {
	m := shared(t)
	prefix := uniquePrefix("handoff")
	holder, waiterStore := openStore(t, prefix, m.clientURL), openStore(t, prefix, m.clientURL)
	ctx := testCtx(t, 60*time.Second)

	acquireVia := func(lk *leasehold.Lock) <-chan *leasehold.Lease {
		got := make(chan *leasehold.Lease, 1)
		go func() {
			h, err := lk.Acquire(ctx)
			if err != nil {
				t.Errorf("waiter Acquire: %v", err)
			}
			got <- h
		}()
		return got
	}

	t.Run("ReleaseRightAfterTheWaiterStarted", func(t *testing.T) {
		for i := 0; i < 10; i++ {
			rec, err := holder.Acquire(ctx, "job", "holder", time.Minute, "")
			if err != nil {
				t.Fatal(err)
			}
			lk, started := waiterLock(t, waiterStore, "job")
			got := acquireVia(lk)
			waitDone(t, started, "the waiter's first attempt")
			if err := holder.Release(ctx, rec.Term); err != nil {
				t.Fatal(err)
			}
			h := waitDone(t, got, "the waiter to acquire after the release (only the watch can wake it)")
			if h == nil {
				t.FailNow()
			}
			if h.Token() <= rec.Token {
				t.Fatalf("waiter token %d not above %d", h.Token(), rec.Token)
			}
			if err := h.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
	})

	t.Run("EtcdMutexUnlocks", func(t *testing.T) {
		mu := concurrency.NewMutex(newSession(t, newClient(t, m.clientURL), 30), holder.ContenderPrefix("job"))
		if err := mu.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		lk, started := waiterLock(t, waiterStore, "job")
		got := acquireVia(lk)
		waitDone(t, started, "the waiter's first attempt")
		if err := mu.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if h := waitDone(t, got, "the waiter to acquire after Mutex.Unlock"); h != nil {
			h.Release(ctx)
		}
	})

	t.Run("CrashedHolderExpires", func(t *testing.T) {
		// The holder acquires with the smallest TTL and never renews or releases.
		rec, err := holder.Acquire(ctx, "job", "crashed", MinTTL, "")
		if err != nil {
			t.Fatal(err)
		}
		lk, started := waiterLock(t, waiterStore, "job")
		got := acquireVia(lk)
		waitDone(t, started, "the waiter's first attempt")
		h := waitDone(t, got, "the waiter to acquire once etcd expired the crashed holder's lease")
		if h == nil {
			t.FailNow()
		}
		if h.Token() <= rec.Token {
			t.Fatalf("waiter token %d not above the crashed holder's %d", h.Token(), rec.Token)
		}
		h.Release(ctx)
	})
}
