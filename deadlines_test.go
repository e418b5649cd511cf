package leasehold

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold/store/memstore"
)

// TestDeadlinesCallEachAtItsTime: deadlines added in any order, while the
// one timer is armed earlier or later than each, are each called once, at
// exactly their time; those stopped first are never called, and Stop says
// which it stopped.
func TestDeadlinesCallEachAtItsTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ds := newDeadlines(SystemClock().(afterFuncClock))
		rng := rand.New(rand.NewPCG(1, 2))
		start := time.Now()
		type entry struct {
			at      time.Time
			d       *deadline
			stopped bool
			calls   []time.Time
		}
		var mu sync.Mutex
		var entries []*entry
		// Eight waves 500 ms apart, each adding deadlines up to 4 s ahead
		// and stopping some of those still pending.
		for wave := 0; wave < 8; wave++ {
			for i := 0; i < 10; i++ {
				e := &entry{at: time.Now().Add(time.Duration(rng.IntN(4000)+1) * time.Millisecond)}
				e.d = ds.at(e.at, func() {
					mu.Lock()
					e.calls = append(e.calls, time.Now())
					mu.Unlock()
				})
				entries = append(entries, e)
			}
			for _, e := range entries {
				if !e.stopped && e.at.After(time.Now()) && rng.IntN(4) == 0 {
					if !e.d.Stop() {
						t.Fatalf("Stop of a deadline %v ahead said it stopped nothing", e.at.Sub(time.Now()))
					}
					e.stopped = true
				}
			}
			time.Sleep(500 * time.Millisecond)
		}
		time.Sleep(5 * time.Second)
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		var called int
		for _, e := range entries {
			switch {
			case e.stopped && len(e.calls) != 0:
				t.Errorf("deadline +%v: stopped, yet called at %v", e.at.Sub(start), e.calls)
			case !e.stopped && len(e.calls) != 1:
				t.Errorf("deadline +%v: called %d times, want once", e.at.Sub(start), len(e.calls))
			case !e.stopped && !e.calls[0].Equal(e.at):
				t.Errorf("deadline +%v: called at +%v", e.at.Sub(start), e.calls[0].Sub(start))
			case !e.stopped:
				called++
				if e.d.Stop() {
					t.Errorf("deadline +%v: Stop after the call said it stopped it", e.at.Sub(start))
				}
			}
		}
		if called == 0 || called == len(entries) {
			t.Fatalf("%d of %d deadlines called: the test stopped none or all", called, len(entries))
		}
	})
}

// countingClock counts the timers armed with AfterFunc.
type countingClock struct {
	afterFuncClock
	armed atomic.Int64
}

func (c *countingClock) AfterFunc(d time.Duration, f func()) Timer {
	c.armed.Add(1)
	return c.afterFuncClock.AfterFunc(d, f)
}

// TestLockArmsATimerOncePerLease: a Lock without KeepAlive that takes and
// gives back its lease a thousand times within a lease arms one timer, not
// one per term (arming one wakes an idle thread, about 15 µs a cycle on a
// 2-core VM); after the lease has passed, with nothing held, the timer
// fires once and arms nothing more. The terms still end at their own
// deadlines (TestLockTermAfterAnEarlierOneEndsAtItsOwnSafeUntil).
func TestLockArmsATimerOncePerLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clock := &countingClock{afterFuncClock: SystemClock().(afterFuncClock)}
		lk, err := NewLock(memstore.New(), "job", Config{Identity: "a", Clock: clock, Timings: Timings{LeaseDuration: 3 * time.Second}})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		for i := 0; i < 1000; i++ {
			l, err := lk.TryAcquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Millisecond) // the clock moves: each term's deadline is later than the last
		}
		if n := clock.armed.Load(); n != 1 {
			t.Fatalf("1000 terms within a lease armed %d timers, want 1", n)
		}
		time.Sleep(3 * time.Second)
		synctest.Wait()
		if n := clock.armed.Load(); n != 1 {
			t.Fatalf("the timer, firing with nothing held, armed %d timers in all, want 1", n)
		}
		l, err := lk.TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		l.Release(ctx)
		if n := clock.armed.Load(); n != 2 {
			t.Fatalf("a term after the timer fired armed %d timers in all, want 2", n)
		}
	})
}

// TestLockTermAfterAnEarlierOneEndsAtItsOwnSafeUntil: the timer armed for
// an earlier term, released before its deadline, is left armed; the next
// term's deadline is later, so nothing new is armed for it. When the timer
// fires with nothing due it arms itself for that term, whose context then
// ends at exactly its safeUntil.
func TestLockTermAfterAnEarlierOneEndsAtItsOwnSafeUntil(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lk, err := NewLock(memstore.New(), "job", Config{Identity: "a", Timings: Timings{LeaseDuration: 3 * time.Second}})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		second, start := secondTermAfterOneReleased(t, lk)
		if d := second.SafeUntil().Sub(start); d != 2*time.Second {
			t.Fatalf("safeUntil = +%v, want +2s", d)
		}
		<-second.Context().Done()
		if d := time.Since(start); d != 2*time.Second || context.Cause(second.Context()) != ErrSafeUntilPassed {
			t.Fatalf("the second term's context ended at +%v (%v), want +2s and ErrSafeUntilPassed", d, context.Cause(second.Context()))
		}
		second.Release(ctx)
	})
}

// secondTermAfterOneReleased takes lk's lease, releases it half a second
// later, and half a second after that takes it again: the second term, and
// when it was asked for. The Lock's deadline timer is then armed for the
// first term's deadline, which is earlier than the second's.
func secondTermAfterOneReleased(t *testing.T, lk *Lock) (*Lease, time.Time) {
	t.Helper()
	ctx := context.Background()
	first, err := lk.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	first.Release(ctx)
	time.Sleep(500 * time.Millisecond)
	start := time.Now()
	second, err := lk.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return second, start
}
