package leasehold_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/faultstore"
	"github.com/leasehold/leasehold/store/memstore"
)

func newLock(t *testing.T, st store.Store, identity string, mod func(*leasehold.Config)) *leasehold.Lock {
	t.Helper()
	cfg := leasehold.Config{Identity: identity}
	if mod != nil {
		mod(&cfg)
	}
	l, err := leasehold.NewLock(st, "invoice-42", cfg)
	if err != nil {
		t.Fatalf("NewLock: %v", err)
	}
	return l
}

func TestTryAcquireHeldReturnsHolder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture()
		a := newLock(t, f.faulty(), "node-a", nil)
		b := newLock(t, f.faulty(), "node-b", nil)
		ctx := context.Background()
		held, err := a.TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, err = b.TryAcquire(ctx)
		var he *leasehold.HeldError
		if !errors.Is(err, store.ErrHeld) || !errors.As(err, &he) || he.Record.Term != held.Term() {
			t.Fatalf("TryAcquire of a held lock: %v, want a HeldError naming %v", err, held.Term())
		}
		if err := held.Release(ctx); err != nil {
			t.Fatal(err)
		}
		next, err := b.TryAcquire(ctx)
		if err != nil || next.Token() <= held.Token() {
			t.Fatalf("after release: %v, token %v; want a higher token", err, next)
		}
		next.Release(ctx)
	})
}

// Acquire waits, and wakes at the instant the holder releases.
func TestAcquireWakesOnRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture()
		a := newLock(t, f.faulty(), "node-a", nil)
		b := newLock(t, f.faulty(), "node-b", nil)
		ctx := context.Background()
		held, err := a.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan *leasehold.Lease, 1)
		go func() {
			h, err := b.Acquire(ctx)
			if err != nil {
				t.Error(err)
			}
			got <- h
		}()
		time.Sleep(1700 * time.Millisecond)
		released := time.Now()
		if err := held.Release(ctx); err != nil {
			t.Fatal(err)
		}
		h := <-got
		if !time.Now().Equal(released) || h.Token() != held.Token()+1 {
			t.Fatalf("woke %v after the release with token %d; want at once with token %d", time.Since(released), h.Token(), held.Token()+1)
		}
		h.Release(ctx)
	})
}

// Without keep-alive the held context ends at acquire's send time +
// renewDeadline; the store's lease is not renewed.
func TestLockWithoutKeepAliveEndsAtSafeUntil(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture()
		st := f.faulty()
		l := newLock(t, st, "node-a", func(c *leasehold.Config) { c.Timings.LeaseDuration = 3 * time.Second })
		start := time.Now()
		held, err := l.Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if d := held.SafeUntil().Sub(start); d != 2*time.Second {
			t.Fatalf("safeUntil = +%v, want +2s (2/3 of a 3s lease)", d)
		}
		<-held.Context().Done()
		if d := time.Since(start); d != 2*time.Second || !errors.Is(context.Cause(held.Context()), leasehold.ErrSafeUntilPassed) {
			t.Fatalf("context ended at +%v (%v), want +2s and ErrSafeUntilPassed", d, context.Cause(held.Context()))
		}
		if n := st.Calls(faultstore.OpRenew); n != 0 {
			t.Fatalf("renewals = %d, want none without keep-alive", n)
		}
		if err := held.Release(context.Background()); err != nil {
			t.Fatalf("Release within the store's lease: %v", err)
		}
	})
}

func TestLockKeepAliveOutlastsTheLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture()
		l := newLock(t, f.faulty(), "node-a", func(c *leasehold.Config) {
			c.Timings.LeaseDuration = 3 * time.Second
			c.KeepAlive = true
		})
		held, err := l.Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Minute)
		if err := held.Context().Err(); err != nil {
			t.Fatalf("held context ended under keep-alive: %v", context.Cause(held.Context()))
		}
		if err := held.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := held.Release(context.Background()); err != nil {
			t.Fatalf("second Release = %v, want the first call's nil", err)
		}
		if r := f.get(t, "invoice-42"); r.Live() {
			t.Fatalf("still held after release: %+v", r)
		}
	})
}

// A keep-alive that learns the term was taken over cancels the context, and
// Release then changes nothing.
func TestLockLostUnderKeepAlive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture()
		l := newLock(t, f.faulty(), "node-a", func(c *leasehold.Config) { c.KeepAlive = true })
		held, err := l.Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		f.backend.ForceRelease("invoice-42")
		other, err := memstore.Open(f.backend).Acquire(context.Background(), "invoice-42", "other", 15*time.Second, "")
		if err != nil {
			t.Fatal(err)
		}
		<-held.Context().Done()
		if d := time.Since(start); d != 5*time.Second || !errors.Is(context.Cause(held.Context()), leasehold.ErrLeaseLost) {
			t.Fatalf("context ended at +%v (%v), want +5s (first renewal) with ErrLeaseLost", d, context.Cause(held.Context()))
		}
		if err := held.Release(context.Background()); !errors.Is(err, store.ErrNotHeld) {
			t.Fatalf("Release after loss = %v, want ErrNotHeld", err)
		}
		if r := f.get(t, "invoice-42"); r.Term != other.Term || !r.Live() {
			t.Fatalf("the newer term was touched: %+v", r)
		}
	})
}

// A TryAcquire whose reply is lost leaves nothing held.
func TestTryAcquireLostReplyLeavesNothingHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture()
		st := f.faulty()
		st.Inject(faultstore.Fault{Mode: faultstore.LoseReply, Times: 1}, faultstore.OpAcquire)
		l := newLock(t, st, "node-a", nil)
		if _, err := l.TryAcquire(context.Background()); !errors.Is(err, faultstore.ErrLostReply) {
			t.Fatalf("TryAcquire = %v, want the lost reply", err)
		}
		if r := f.get(t, "invoice-42"); r.Live() || r.Token != 1 {
			t.Fatalf("after a lost reply the store = %+v, want token 1 given back", r)
		}
	})
}

// Acquisitions of one Lock from many goroutines are exclusive, and each gets
// a higher token than the one before.
func TestLockExcludesGoroutines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture()
		l := newLock(t, f.faulty(), "node-a", nil)
		var mu sync.Mutex
		inside, maxInside := 0, 0
		var tokens []int64
		var wg sync.WaitGroup
		for i := 0; i < 8; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				h, err := l.Acquire(context.Background())
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				inside++
				maxInside = max(maxInside, inside)
				tokens = append(tokens, h.Token())
				mu.Unlock()
				time.Sleep(100 * time.Millisecond)
				mu.Lock()
				inside--
				mu.Unlock()
				if err := h.Release(context.Background()); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		if maxInside != 1 || len(tokens) != 8 {
			t.Fatalf("max inside = %d, acquisitions = %d; want 1 and 8", maxInside, len(tokens))
		}
		for i := 1; i < len(tokens); i++ {
			if tokens[i] <= tokens[i-1] {
				t.Fatalf("tokens %v do not rise", tokens)
			}
		}
	})
}

func TestAcquireHonoursContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture()
		a := newLock(t, f.faulty(), "node-a", nil)
		b := newLock(t, f.faulty(), "node-b", nil)
		held, err := a.Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		start := time.Now()
		if _, err := b.Acquire(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Acquire = %v, want DeadlineExceeded", err)
		}
		if d := time.Since(start); d != 5*time.Second {
			t.Fatalf("Acquire returned after %v, want 5s", d)
		}
		held.Release(context.Background())
	})
}

// A Lock whose term was won against another holder yields after releasing
// it: its next Acquire makes no attempt for minYield (1 ms; memstore's
// release takes no time), so the waiters the release woke get there first.
// It goes on yielding after its uncontended terms for a lease duration
// after that release (a releaser that wins again at once never meets the
// waiters), and then stops. The control: a Lock that never met another
// holder acquires again at once.
func TestLockYieldsAfterContendedRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture()
		a := newLock(t, f.faulty(), "node-a", nil)
		b := newLock(t, f.faulty(), "node-b", nil)
		ctx := context.Background()
		releaseContendedTerm(t, a, b)
		contendedReleased := time.Now()
		released := contendedReleased
		again, err := b.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if waited := time.Since(released); waited != time.Millisecond {
			t.Fatalf("after a contended release the Lock tried again %v later, want 1ms", waited)
		}
		if err := again.Release(ctx); err != nil {
			t.Fatal(err)
		}
		// again was uncontended, but released within a lease duration of
		// the contended one: the Lock still yields.
		released = time.Now()
		third, err := b.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if waited := time.Since(released); waited != time.Millisecond {
			t.Fatalf("after an uncontended release %v after a contended one the Lock tried again %v later, want 1ms", released.Sub(contendedReleased), waited)
		}
		// Held until a lease duration has passed since the contended
		// release: no yield after it.
		time.Sleep(contendedReleased.Add(leasehold.DefaultTimings().LeaseDuration).Sub(time.Now()))
		if err := third.Release(ctx); err != nil {
			t.Fatal(err)
		}
		released = time.Now()
		fourth, err := b.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if waited := time.Since(released); waited != 0 {
			t.Fatalf("after an uncontended release %v after the last contended one the Lock waited %v, want no wait", released.Sub(contendedReleased), waited)
		}
		fourth.Release(ctx)
		// a never met another holder: it never yields.
		released = time.Now()
		h, err := a.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if waited := time.Since(released); waited != 0 {
			t.Fatalf("uncontended Lock waited %v before acquiring, want no wait", waited)
		}
		h.Release(ctx)
	})
}

// releaseContendedTerm gives b a term won against a's (b's Acquire waits
// while a holds, and takes the lease when a releases), then releases it.
// Call it inside a synctest bubble.
func releaseContendedTerm(t *testing.T, a, b *leasehold.Lock) {
	t.Helper()
	ctx := context.Background()
	first, err := a.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *leasehold.Lease, 1)
	go func() {
		h, err := b.Acquire(ctx) // finds a's term: contended
		if err != nil {
			t.Error(err)
		}
		got <- h
	}()
	synctest.Wait()
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	contended := <-got
	if contended == nil {
		t.FailNow()
	}
	if err := contended.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// laggingStore is a memstore handle whose watch says it learns of changes
// through other handles lag late (store.WatchLagger), as a poller does.
type laggingStore struct {
	*memstore.Store
	lag time.Duration
}

func (s laggingStore) WatchLag() time.Duration { return s.lag }

// laggingLocks returns Locks node-a and node-b, each on a store handle of
// one memstore backend whose watch says it lags lag (behind a faultstore,
// which must pass the lag through). Call it inside a synctest bubble.
func laggingLocks(t *testing.T, lag time.Duration) (a, b *leasehold.Lock) {
	t.Helper()
	f := newFixture()
	open := func() store.Store {
		return faultstore.New(laggingStore{memstore.Open(f.backend), lag})
	}
	return newLock(t, open(), "node-a", nil), newLock(t, open(), "node-b", nil)
}

// On a store whose watch lags (a poller), a Lock yields at least the lag
// after a contended release: waiters in other processes learn of the
// release only at their next poll. The yield stays capped at RetryPeriod.
// The store is wrapped in a faultstore, which must pass the lag through.
func TestLockYieldsTheWatchLag(t *testing.T) {
	retry := leasehold.DefaultTimings().RetryPeriod
	for _, tc := range []struct {
		lag, want time.Duration
	}{
		{30 * time.Millisecond, 30 * time.Millisecond},
		{time.Hour, retry},
	} {
		t.Run(tc.lag.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a, b := laggingLocks(t, tc.lag)
				ctx := context.Background()
				releaseContendedTerm(t, a, b)
				released := time.Now()
				again, err := b.Acquire(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if waited := time.Since(released); waited != tc.want {
					t.Fatalf("with a watch lag of %v the Lock tried again %v after a contended release, want %v", tc.lag, waited, tc.want)
				}
				again.Release(ctx)
			})
		})
	}
}

// A Lock that yields the store's watch lag after a contended release first
// reads the lease: when a waiter has taken it already, there is nothing to
// yield to, and the Lock waits on the watch like any waiter. Here b
// releases a contended term, a (waiting) takes the lease, b calls Acquire
// at once, and a releases 5 ms later: b takes over then, not when its 30 ms
// yield (the watch lag) ends. A yield of about a release's round trip (no
// watch lag: 1 ms here) is kept whole: a releases after 0.5 ms, and b
// takes over at 1 ms. The control for the lease being free during the
// yield is TestLockYieldsTheWatchLag, where b waits all of it. By hand: with
// the read taken out, the first case fails (30ms); with it made for every
// yield, the second (500µs).
func TestLockYieldEndsWhenTheLeaseIsHeld(t *testing.T) {
	for _, tc := range []struct {
		lag, releaseAfter, want time.Duration
	}{
		{30 * time.Millisecond, 5 * time.Millisecond, 5 * time.Millisecond},
		{0, 500 * time.Microsecond, time.Millisecond},
	} {
		t.Run(tc.lag.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a, b := laggingLocks(t, tc.lag)
				ctx := context.Background()
				first, err := a.Acquire(ctx)
				if err != nil {
					t.Fatal(err)
				}
				acquire := func(l *leasehold.Lock) <-chan *leasehold.Lease {
					got := make(chan *leasehold.Lease, 1)
					go func() {
						h, err := l.Acquire(ctx)
						if err != nil {
							t.Error(err)
						}
						got <- h
					}()
					synctest.Wait()
					return got
				}
				bGot := acquire(b) // finds a's term: contended
				if err := first.Release(ctx); err != nil {
					t.Fatal(err)
				}
				bTerm := <-bGot
				aGot := acquire(a) // waits on b's term
				if err := bTerm.Release(ctx); err != nil {
					t.Fatal(err)
				}
				aTerm := <-aGot
				if aTerm == nil {
					t.FailNow()
				}
				start := time.Now()
				bGot = acquire(b)
				time.Sleep(tc.releaseAfter)
				if err := aTerm.Release(ctx); err != nil {
					t.Fatal(err)
				}
				again := <-bGot
				if again == nil {
					t.FailNow()
				}
				if waited := time.Since(start); waited != tc.want {
					t.Fatalf("b, yielding after its contended release (watch lag %v) while a held the lease, took it %v after calling Acquire; a released after %v; want %v", tc.lag, waited, tc.releaseAfter, tc.want)
				}
				again.Release(ctx)
			})
		})
	}
}

// An Acquire that runs out of time while the store keeps failing says why
// in its error (here a table that does not exist), and still matches the
// context's error. The control: an Acquire that ran out of time waiting on
// another holder's live term adds nothing, since nothing failed.
func TestAcquireSaysWhyItGotNowhere(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture()
		fs := f.faulty()
		missing := errors.New("table leader_lease does not exist")
		fs.Inject(faultstore.Fault{Mode: faultstore.Fail, Err: missing}, faultstore.OpAcquire)
		l := newLock(t, fs, "node-a", nil)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := l.Acquire(ctx)
		if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, missing) || !strings.Contains(err.Error(), "the last attempt failed: "+missing.Error()) {
			t.Fatalf("Acquire against a failing store = %v; want DeadlineExceeded saying the last attempt failed with %q, and matching both with errors.Is", err, missing)
		}

		holder := newLock(t, f.faulty(), "node-h", nil)
		h, err := holder.Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer h.Release(context.Background())
		ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel2()
		_, err = newLock(t, f.faulty(), "node-b", nil).Acquire(ctx2)
		if !errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "failed") {
			t.Fatalf("Acquire of a held lease = %v; want DeadlineExceeded with no failure in it", err)
		}
	})
}
