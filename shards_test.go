package leasehold_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/faultstore"
	"github.com/leasehold/leasehold/store/memstore"
)

// Default timings throughout: lease 15s, renew deadline 10s, renew every 5s,
// retry 2s.

// keeperEnd is when and why a kept lease's context ended.
type keeperEnd struct {
	at    time.Time
	cause error
}

// watchKept records when each lease's context ends.
func watchKept(kps []*leasehold.Lease) func() map[string]keeperEnd {
	var mu sync.Mutex
	ends := map[string]keeperEnd{}
	for _, kp := range kps {
		go func() {
			<-kp.Context().Done()
			mu.Lock()
			ends[kp.Name()] = keeperEnd{time.Now(), context.Cause(kp.Context())}
			mu.Unlock()
		}()
	}
	return func() map[string]keeperEnd {
		mu.Lock()
		defer mu.Unlock()
		out := map[string]keeperEnd{}
		for k, v := range ends {
			out[k] = v
		}
		return out
	}
}

func newKeeper(t *testing.T, st store.Store, identity string, onEvent func(leasehold.Event)) *leasehold.Keeper {
	t.Helper()
	k, err := leasehold.NewKeeper(st, leasehold.Config{Identity: identity, OnEvent: onEvent})
	if err != nil {
		t.Fatalf("NewKeeper: %v", err)
	}
	t.Cleanup(func() { k.Close() })
	return k
}

func keepMany(t *testing.T, k *leasehold.Keeper, n int) []*leasehold.Lease {
	t.Helper()
	var out []*leasehold.Lease
	for i := range n {
		kp, err := k.TryAcquire(context.Background(), fmt.Sprintf("shard/%d", i))
		if err != nil {
			t.Fatalf("TryAcquire shard/%d: %v", i, err)
		}
		out = append(out, kp)
	}
	return out
}

// sleepTo sleeps until start+d of virtual time and lets every goroutine settle.
func sleepTo(start time.Time, d time.Duration) {
	time.Sleep(time.Until(start.Add(d)))
	synctest.Wait()
}

// A thousand leases are renewed in one batched call per renew interval, each
// lease's safeUntil counted from that call's send time.
func TestKeeperRenewsAllInOneBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memstore.NewBackend(nil)
		fs := faultstore.New(memstore.Open(b))
		k := newKeeper(t, fs, "node-a", nil)
		start := time.Now()
		kps := keepMany(t, k, 1000)
		if got := len(k.Terms()); got != 1000 {
			t.Fatalf("Terms() has %d terms, want 1000", got)
		}
		for i, want := range []time.Duration{5 * time.Second, 10 * time.Second, 15 * time.Second} {
			sleepTo(start, want)
			if calls := fs.Calls(faultstore.OpRenew); calls != i+1 {
				t.Fatalf("at +%v: %d renew calls, want %d (one batch per interval)", want, calls, i+1)
			}
			for _, kp := range kps {
				if su := kp.SafeUntil().Sub(start); su != want+10*time.Second {
					t.Fatalf("at +%v: %s safeUntil +%v, want +%v (batch sent now + renewDeadline)", want, kp.Name(), su, want+10*time.Second)
				}
				if kp.Context().Err() != nil {
					t.Fatalf("at +%v: %s context ended: %v", want, kp.Name(), context.Cause(kp.Context()))
				}
			}
			rec, err := memstore.Open(b).Get(context.Background(), "shard/999")
			if err != nil || rec.Remaining != 15*time.Second || rec.Holder != k.Identity() {
				t.Fatalf("at +%v: store record %+v, %v; want renewed for 15s just now", want, rec, err)
			}
		}
	})
}

// When every batch hangs, each lease's context is cancelled exactly at the
// send time of its last successful renewal + renewDeadline, while the store
// still holds the lease.
func TestKeeperStepsDownAtSafeUntil(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memstore.NewBackend(nil)
		fs := faultstore.New(memstore.Open(b))
		k := newKeeper(t, fs, "node-a", nil)
		start := time.Now()
		kps := keepMany(t, k, 3)
		ends := watchKept(kps)
		sleepTo(start, 6*time.Second) // the batch at +5s succeeded
		fs.Partition()
		sleepTo(start, 15*time.Second)
		got := ends()
		for _, kp := range kps {
			e, ok := got[kp.Name()]
			if !ok {
				t.Fatalf("%s: context not cancelled at +15s", kp.Name())
			}
			if d := e.at.Sub(start); d != 15*time.Second || !errors.Is(e.cause, leasehold.ErrSafeUntilPassed) {
				t.Errorf("%s: cancelled at +%v with %v, want exactly +15s with ErrSafeUntilPassed", kp.Name(), d, e.cause)
			}
			rec, err := memstore.Open(b).Get(context.Background(), kp.Name())
			if err != nil || !rec.Live() || rec.Remaining != 5*time.Second {
				t.Errorf("%s at +15s: store record %+v, %v; want still live for 5s more", kp.Name(), rec, err)
			}
		}
		// Batches at +5s (answered), +10s, +12s and +14s (each hung until
		// its retry period ran out, then sent again).
		if calls := fs.Calls(faultstore.OpRenew); calls != 4 {
			t.Errorf("%d renew calls by +15s, want 4", calls)
		}
		if n := len(k.Terms()); n != 0 {
			t.Errorf("the keeper still holds %d terms after their safeUntil", n)
		}
	})
}

// A batch that says "not held" for one lease ends that lease alone, with
// ErrLeaseLost, at the moment the answer arrives.
func TestKeeperLosesOneLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memstore.NewBackend(nil)
		fs := faultstore.New(memstore.Open(b))
		var mu sync.Mutex
		var lost []leasehold.Event
		k := newKeeper(t, fs, "node-a", func(ev leasehold.Event) {
			if ev.Kind == leasehold.EventLost {
				mu.Lock()
				lost = append(lost, ev)
				mu.Unlock()
			}
		})
		start := time.Now()
		kps := keepMany(t, k, 3)
		ends := watchKept(kps)
		sleepTo(start, time.Second)
		if !b.ForceRelease("shard/1") {
			t.Fatal("ForceRelease found no live term")
		}
		sleepTo(start, 5*time.Second)
		got := ends()
		if e, ok := got["shard/1"]; !ok || e.at.Sub(start) != 5*time.Second || !errors.Is(e.cause, leasehold.ErrLeaseLost) {
			t.Fatalf("shard/1 ended %+v (ok %v), want at exactly +5s with ErrLeaseLost", e, ok)
		}
		if len(got) != 1 {
			t.Fatalf("leases ended: %v, want only shard/1", got)
		}
		for _, i := range []int{0, 2} {
			if su := kps[i].SafeUntil().Sub(start); su != 15*time.Second {
				t.Errorf("%s safeUntil +%v, want +15s", kps[i].Name(), su)
			}
		}
		mu.Lock()
		if len(lost) != 1 || lost[0].Name != "shard/1" || !errors.Is(lost[0].Err, leasehold.ErrLeaseLost) {
			t.Errorf("EventLost events %+v, want one for shard/1 with ErrLeaseLost", lost)
		}
		mu.Unlock()
		if err := kps[1].Release(context.Background()); !errors.Is(err, store.ErrNotHeld) {
			t.Errorf("Release of the lost lease: %v, want ErrNotHeld", err)
		}
		if err := kps[0].Release(context.Background()); err != nil {
			t.Errorf("Release of a kept lease: %v", err)
		}
		if rec, err := memstore.Open(b).Get(context.Background(), "shard/0"); err != nil || rec.Live() {
			t.Errorf("after Release the store shows %+v, %v; want it free", rec, err)
		}
		if terms := k.Terms(); len(terms) != 1 || terms[0].Name != "shard/2" {
			t.Errorf("Terms() = %v, want only shard/2", terms)
		}
	})
}

// A batch whose reply was lost (the store renewed, the keeper cannot know) is
// sent again a retry period later; safeUntil counts from the retry.
func TestKeeperLostReplyRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fs := faultstore.New(memstore.New())
		k := newKeeper(t, fs, "node-a", nil)
		start := time.Now()
		kps := keepMany(t, k, 5)
		fs.Inject(faultstore.Fault{Mode: faultstore.LoseReply, Times: 1}, faultstore.OpRenew)
		sleepTo(start, 5*time.Second)
		if su := kps[0].SafeUntil().Sub(start); su != 10*time.Second {
			t.Fatalf("after a lost reply safeUntil +%v, want still +10s (from the acquire)", su)
		}
		sleepTo(start, 7*time.Second)
		if calls := fs.Calls(faultstore.OpRenew); calls != 2 {
			t.Fatalf("%d renew calls by +7s, want 2 (the lost one and its retry)", calls)
		}
		for _, kp := range kps {
			if su := kp.SafeUntil().Sub(start); su != 17*time.Second {
				t.Fatalf("%s safeUntil +%v, want +17s (retry sent at +7s)", kp.Name(), su)
			}
		}
	})
}

// safeUntil counts from when a batch was sent, not when it was answered.
func TestKeeperSafeUntilFromSendTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fs := faultstore.New(memstore.New())
		k := newKeeper(t, fs, "node-a", nil)
		start := time.Now()
		kps := keepMany(t, k, 2)
		fs.Inject(faultstore.Fault{Latency: time.Second, Times: 1}, faultstore.OpRenew)
		sleepTo(start, 6*time.Second) // the batch sent at +5s is answered at +6s
		for _, kp := range kps {
			if su := kp.SafeUntil().Sub(start); su != 15*time.Second {
				t.Fatalf("%s safeUntil +%v, want +15s (sent at +5s + 10s)", kp.Name(), su)
			}
		}
		// The next batch is due a renew interval after the last was sent.
		sleepTo(start, 10*time.Second)
		if calls := fs.Calls(faultstore.OpRenew); calls != 2 {
			t.Fatalf("%d renew calls by +10s, want 2", calls)
		}
	})
}

// WindDown cancels each lease's context that much before its safeUntil.
func TestKeeperWindDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fs := faultstore.New(memstore.New())
		k, err := leasehold.NewKeeper(fs, leasehold.Config{Identity: "node-a", Timings: leasehold.Timings{WindDown: 2 * time.Second}})
		if err != nil {
			t.Fatal(err)
		}
		defer k.Close()
		start := time.Now()
		kps := keepMany(t, k, 2)
		ends := watchKept(kps)
		fs.Partition() // no renewal ever succeeds: safeUntil stays +10s
		sleepTo(start, 10*time.Second)
		for _, kp := range kps {
			e, ok := ends()[kp.Name()]
			if !ok || e.at.Sub(start) != 8*time.Second || !errors.Is(e.cause, leasehold.ErrSafeUntilPassed) {
				t.Fatalf("%s ended %+v (ok %v), want at exactly +8s (safeUntil +10s - windDown 2s)", kp.Name(), e, ok)
			}
		}
	})
}

// An acquire whose reply was lost (the store granted it) is given back, so
// the keeper neither holds nor leaks the lease.
func TestKeeperLostAcquireReplyGivenBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memstore.NewBackend(nil)
		fs := faultstore.New(memstore.Open(b))
		k := newKeeper(t, fs, "node-a", nil)
		fs.Inject(faultstore.Fault{Mode: faultstore.LoseReply, Times: 1}, faultstore.OpAcquire)
		if _, err := k.TryAcquire(context.Background(), "job"); !errors.Is(err, faultstore.ErrLostReply) {
			t.Fatalf("TryAcquire with a lost reply: %v, want ErrLostReply", err)
		}
		rec, err := memstore.Open(b).Get(context.Background(), "job")
		if err != nil || rec.Live() || rec.Token != 1 {
			t.Fatalf("after the lost reply the store shows %+v, %v; want the granted term given back", rec, err)
		}
		if n := len(k.Terms()); n != 0 {
			t.Fatalf("the keeper holds %d terms, want none", n)
		}
		kp, err := k.TryAcquire(context.Background(), "job")
		if err != nil || kp.Token() != 2 {
			t.Fatalf("TryAcquire afterwards = %v, %v; want token 2", kp, err)
		}
	})
}

// plainStore hides every optional capability of the store it wraps.
type plainStore struct{ store.Store }

// Without BatchRenewer the keeper renews one lease per Renew call, on the
// same schedule; a lease whose renewal failed makes the next batch come a
// retry period later.
func TestKeeperWithoutBatchRenewer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fs := faultstore.New(memstore.New())
		k := newKeeper(t, plainStore{fs}, "node-a", nil)
		start := time.Now()
		kps := keepMany(t, k, 20)
		fs.Inject(faultstore.Fault{Mode: faultstore.Fail, Times: 1}, faultstore.OpRenew)
		for _, step := range []struct {
			at    time.Duration
			calls int
		}{{5 * time.Second, 20}, {7 * time.Second, 40}, {12 * time.Second, 60}} {
			sleepTo(start, step.at)
			if calls := fs.Calls(faultstore.OpRenew); calls != step.calls {
				t.Fatalf("at +%v: %d Renew calls, want %d", step.at, calls, step.calls)
			}
		}
		for _, kp := range kps {
			if su := kp.SafeUntil().Sub(start); su != 22*time.Second {
				t.Fatalf("%s safeUntil +%v, want +22s", kp.Name(), su)
			}
		}
	})
}

func TestKeeperAcquireReleaseClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memstore.NewBackend(nil)
		k1 := newKeeper(t, memstore.Open(b), "node-a", nil)
		k2 := newKeeper(t, memstore.Open(b), "node-b", nil)
		ctx := context.Background()
		start := time.Now()

		job, err := k2.TryAcquire(ctx, "job")
		if err != nil {
			t.Fatal(err)
		}
		_, err = k1.TryAcquire(ctx, "job")
		var he *leasehold.HeldError
		if !errors.As(err, &he) || !errors.Is(err, store.ErrHeld) || he.Record.Holder != k2.Identity() {
			t.Fatalf("TryAcquire of another keeper's lease: %v, want a HeldError naming %s", err, k2.Identity())
		}
		x, err := k1.TryAcquire(ctx, "x")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := k1.TryAcquire(ctx, "x"); !errors.Is(err, leasehold.ErrAlreadyKept) {
			t.Fatalf("second TryAcquire of a kept lease: %v, want ErrAlreadyKept", err)
		}
		if _, err := k1.TryAcquire(ctx, "bad name"); !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("TryAcquire of a bad name: %v, want ErrInvalid", err)
		}

		// k1 waits for job; k2 releases it at +3s; k1 takes it at that instant.
		got := make(chan *leasehold.Lease, 1)
		go func() {
			kp, err := k1.Acquire(ctx, "job")
			if err != nil {
				t.Errorf("Acquire: %v", err)
			}
			got <- kp
		}()
		sleepTo(start, 3*time.Second)
		if err := job.Release(ctx); err != nil {
			t.Fatal(err)
		}
		kp := <-got
		if kp == nil {
			t.FailNow()
		}
		if d := time.Since(start); d != 3*time.Second || kp.Token() != job.Token()+1 {
			t.Fatalf("k1 took job at +%v with token %d, want at +3s with %d", d, kp.Token(), job.Token()+1)
		}

		// Close cancels every kept lease; Release afterwards still ends the
		// term in the store.
		k1.Close()
		for _, l := range []*leasehold.Lease{x, kp} {
			if cause := context.Cause(l.Context()); !errors.Is(cause, leasehold.ErrReleased) {
				t.Errorf("%s after Close: cause %v, want ErrReleased", l.Name(), cause)
			}
			if rec, err := memstore.Open(b).Get(ctx, l.Name()); err != nil || !rec.Live() {
				t.Errorf("%s: Close released it in the store (%+v, %v); only Release should", l.Name(), rec, err)
			}
			if err := l.Release(ctx); err != nil {
				t.Errorf("Release of %s after Close: %v", l.Name(), err)
			}
			if rec, err := memstore.Open(b).Get(ctx, l.Name()); err != nil || rec.Live() {
				t.Errorf("%s after Release: %+v, %v; want free", l.Name(), rec, err)
			}
		}
		if _, err := k1.TryAcquire(ctx, "y"); !errors.Is(err, leasehold.ErrKeeperClosed) {
			t.Fatalf("TryAcquire after Close: %v, want ErrKeeperClosed", err)
		}
		if err := k1.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
	})
}

func TestNewKeeperRefusesBadConfig(t *testing.T) {
	st := memstore.New()
	for _, cfg := range []leasehold.Config{
		{},
		{Identity: "a", Timings: leasehold.Timings{LeaseDuration: time.Second, RenewDeadline: 2 * time.Second}},
		{Identity: "a", Metadata: string(make([]byte, store.MaxMetadataLen+1))},
	} {
		if k, err := leasehold.NewKeeper(st, cfg); !errors.Is(err, leasehold.ErrInvalidConfig) {
			if k != nil {
				k.Close()
			}
			t.Errorf("NewKeeper(%+v): %v, want ErrInvalidConfig", cfg.Timings, err)
		}
	}
	if _, err := leasehold.NewKeeper(nil, leasehold.Config{Identity: "a"}); !errors.Is(err, leasehold.ErrInvalidConfig) {
		t.Errorf("NewKeeper(nil store): %v, want ErrInvalidConfig", err)
	}
}

// A lease whose safeUntil passed while its work still runs is not granted
// again to the same Keeper (same holder: the store would replace the live old
// term at once, with no expiry in between) until Release says the work has
// returned.
func TestKeeperNoNewTermWhileDraining(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memstore.NewBackend(nil)
		fs := faultstore.New(memstore.Open(b))
		k := newKeeper(t, fs, "node-a", nil)
		ctx := context.Background()
		start := time.Now()
		old, err := k.TryAcquire(ctx, "shard/0")
		if err != nil {
			t.Fatal(err)
		}
		fs.Partition()
		sleepTo(start, 11*time.Second) // past safeUntil (+10s); the store's term lives until +15s
		if old.Context().Err() == nil {
			t.Fatal("old term still trusted past its safeUntil")
		}
		fs.Heal()
		// The old term's work has not returned (Release not called).
		for _, try := range []func() (*leasehold.Lease, error){
			func() (*leasehold.Lease, error) { return k.TryAcquire(ctx, "shard/0") },
			func() (*leasehold.Lease, error) { return k.Acquire(ctx, "shard/0") },
		} {
			kp, err := try()
			if !errors.Is(err, leasehold.ErrDraining) {
				t.Fatalf("acquire while the old term drains: %v, %v; want ErrDraining", kp, err)
			}
		}
		if rec, _ := memstore.Open(b).Get(ctx, "shard/0"); rec.Token != old.Token() || !rec.Live() {
			t.Fatalf("the old term was replaced while draining: %+v", rec)
		}
		// The work returns; Release; now a new term may start, with a higher token.
		if err := old.Release(ctx); err != nil {
			t.Fatalf("Release of the drained term: %v", err)
		}
		kp, err := k.TryAcquire(ctx, "shard/0")
		if err != nil {
			t.Fatalf("acquire after Release: %v", err)
		}
		if kp.Token() <= old.Token() {
			t.Fatalf("new token %d, old %d", kp.Token(), old.Token())
		}
	})
}
