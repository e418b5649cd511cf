package leasehold

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold/store/memstore"
)

// fakeSuspend is a host whose suspended time the test sets: Go's (virtual)
// monotonic clock does not move while "suspended", as on a real host.
type fakeSuspend struct{ d atomic.Int64 }

func (f *fakeSuspend) read() time.Duration     { return time.Duration(f.d.Load()) }
func (f *fakeSuspend) suspend(d time.Duration) { f.d.Add(int64(d)) }

// A timer of the suspend-aware clock fires within suspendCheck of resuming
// from a suspend that crossed its deadline, and Now counts the suspend.
func TestSuspendAwareTimerFiresAfterSuspend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		host := &fakeSuspend{}
		c := newSuspendAwareClock(host.read)
		start := c.Now()
		tm := c.NewTimer(10 * time.Second)
		time.Sleep(3500 * time.Millisecond)
		host.suspend(30 * time.Second) // resumes now: 33.5s have passed on the host
		if got := c.Now().Sub(start); got != 33500*time.Millisecond {
			t.Fatalf("Now after the suspend is +%v, want +33.5s", got)
		}
		resumed := time.Now()
		<-tm.C()
		if late := time.Since(resumed); late > suspendCheck {
			t.Fatalf("timer fired %v after resuming, want within %v", late, suspendCheck)
		}
	})
}

// Without a suspend the timer fires exactly at its deadline; Stop and Reset
// discard an unread fire, as time.Timer does.
func TestSuspendAwareTimerExactAndReset(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newSuspendAwareClock(func() time.Duration { return 0 })
		start := time.Now()
		tm := c.NewTimer(3700 * time.Millisecond)
		<-tm.C()
		if d := time.Since(start); d != 3700*time.Millisecond {
			t.Fatalf("fired at +%v, want exactly +3.7s", d)
		}
		tm.Reset(time.Second)
		time.Sleep(2 * time.Second) // fired, unread
		tm.Reset(5 * time.Second)
		synctest.Wait()
		select {
		case <-tm.C():
			t.Fatal("a fire from before Reset was delivered")
		default:
		}
	})
}

// cachedClock is the system clock's shape on a fake host: read counted,
// and a shift that moves with each suspend (as Linux's wall clock does) or,
// if stepped, stays put (a wall clock stepped back by the suspend's length
// as the host resumed: the case the shift cannot see).
func cachedClock(host *fakeSuspend, reads *atomic.Int64, stepped bool) *suspendAwareClock {
	return &suspendAwareClock{
		read: func() time.Duration { reads.Add(1); return host.read() },
		shift: func(time.Time) time.Duration {
			if stepped {
				return 0
			}
			return host.read()
		},
	}
}

// Now reads the host's suspended time only when the shift moved or
// rereadEvery passed, and counts a suspend at once when the shift moved.
func TestSuspendAwareClockReadsWhenShiftMoves(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		host := &fakeSuspend{}
		var reads atomic.Int64
		c := cachedClock(host, &reads, false)
		start := c.Now()
		for range 1000 {
			c.Now()
		}
		if n := reads.Load(); n != 1 {
			t.Fatalf("1001 Now calls with nothing moved read the host %d times, want 1", n)
		}
		host.suspend(30 * time.Second)
		if got := c.Now().Sub(start); got != 30*time.Second {
			t.Fatalf("Now right after a 30s suspend is +%v, want +30s", got)
		}
		if n := reads.Load(); n != 2 {
			t.Fatalf("reads = %d after the shift moved, want 2", n)
		}
		time.Sleep(rereadEvery)
		c.Now()
		if n := reads.Load(); n != 3 {
			t.Fatalf("reads = %d after rereadEvery, want 3", n)
		}
	})
}

// Negative control of the cache: a suspend that the shift does not show
// (the wall clock stepped back by its length) is missed by Now for at most
// rereadEvery, and a timer still fires within suspendCheck of resuming: its
// checks read the host afresh (with the cached reading, this timer would
// fire a whole step, 1s, later).
func TestSuspendAwareClockSteppedWallClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		host := &fakeSuspend{}
		var reads atomic.Int64
		c := cachedClock(host, &reads, true)
		start := c.Now()
		tm := c.NewTimer(10 * time.Second)
		// Suspended 5ms before the timer's third step, right after a read.
		time.Sleep(3*time.Second - 5*time.Millisecond)
		c.Now()
		host.suspend(30 * time.Second)
		resumed := time.Now()
		if got := c.Now().Sub(start); got != 3*time.Second-5*time.Millisecond {
			t.Fatalf("Now right after the unseen suspend is +%v, want +2.995s (the cached reading)", got)
		}
		<-tm.C()
		if late := time.Since(resumed); late > suspendCheck/2 {
			t.Fatalf("timer fired %v after resuming, want at its next step, 5ms", late)
		}

		// And Now sees such a suspend rereadEvery later.
		before := c.Now()
		host.suspend(10 * time.Second)
		if got := c.Now().Sub(before); got != 0 {
			t.Fatalf("Now right after the second unseen suspend moved %v, want 0 (cached)", got)
		}
		time.Sleep(rereadEvery)
		if got := c.Now().Sub(before); got != 10*time.Second+rereadEvery {
			t.Fatalf("Now rereadEvery after resuming moved %v, want %v", got, 10*time.Second+rereadEvery)
		}
	})
}

// The system clock reads the host's clocks (system calls) far less often
// than it is read.
func TestSystemClockReadsHostRarely(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the suspended time is read on Linux only")
	}
	var reads atomic.Int64
	c := &suspendAwareClock{read: func() time.Duration { reads.Add(1); return suspendedTime() }, shift: wallShift}
	const calls = 1000
	for range calls {
		c.Now()
	}
	if n := reads.Load(); n > calls/2 {
		t.Fatalf("%d Now calls read the host clocks %d times, want far fewer", calls, n)
	}
}

// suspendClocks are the clocks the suspend tests run on: one that reads the
// host at every Now, the system clock's cached reading, and a suspend the
// cache cannot see (the wall clock stepped back).
var suspendClocks = map[string]func(*fakeSuspend) *suspendAwareClock{
	"exact": func(h *fakeSuspend) *suspendAwareClock { return newSuspendAwareClock(h.read) },
	"cached": func(h *fakeSuspend) *suspendAwareClock {
		return cachedClock(h, new(atomic.Int64), false)
	},
	"cached-stepped": func(h *fakeSuspend) *suspendAwareClock {
		return cachedClock(h, new(atomic.Int64), true)
	},
}

// A leader whose host is suspended past its safeUntil stops trusting its
// term within suspendCheck of resuming, not RenewDeadline of monotonic time
// later (SAFETY.md rule 7: the trust window counts a suspend): with a clock
// that reads the host at every Now, with the system clock's cached reading,
// and with a suspend the cache cannot see (the wall clock stepped back).
func TestSuspendedLeaderStopsOnResume(t *testing.T) {
	for name, clock := range suspendClocks {
		t.Run(name, func(t *testing.T) { testSuspendedLeaderStopsOnResume(t, clock) })
	}
}

func testSuspendedLeaderStopsOnResume(t *testing.T, clock func(*fakeSuspend) *suspendAwareClock) {
	synctest.Test(t, func(t *testing.T) {
		host := &fakeSuspend{}
		// The store runs elsewhere: its clock goes on while this host sleeps.
		st := memstore.Open(memstore.NewBackend(func() time.Time { return time.Now().Add(host.read()) }))
		e, err := NewElector(st, "job", Config{Identity: "a", Clock: clock(host)})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		stopped := make(chan time.Time, 1)
		var resumed time.Time
		var terms atomic.Int32
		done := make(chan error, 1)
		go func() {
			done <- e.Run(ctx, func(ctx context.Context, l *Lease) error {
				if terms.Add(1) > 1 {
					<-ctx.Done() // a later term: wait for the test's end
					return nil
				}
				time.Sleep(2 * time.Second)
				host.suspend(time.Minute) // the lease expired at the store meanwhile
				resumed = time.Now()
				<-ctx.Done()
				stopped <- time.Now()
				return nil
			})
		}()
		at := <-stopped
		if late := at.Sub(resumed); late > suspendCheck {
			t.Fatalf("leader stopped %v after resuming, want within %v", late, suspendCheck)
		}
		cancel()
		<-done
	})
}

// A Lock's holder (no KeepAlive: its terms share the Lock's one deadline
// timer) whose host is suspended past its safeUntil stops trusting its term
// within suspendCheck of resuming, on each of the clocks above. The Lock
// held and released a term first, so the timer is armed for that term's
// earlier deadline when the host sleeps, and on resuming it fires for that
// one and must find the second term due too. The host sleeps 5 ms before
// the timer's next step, right after a read of the clock (the cached
// clocks' hardest case).
func TestSuspendedLockHolderStopsOnResume(t *testing.T) {
	for name, clock := range suspendClocks {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				host := &fakeSuspend{}
				st := memstore.Open(memstore.NewBackend(func() time.Time { return time.Now().Add(host.read()) }))
				clk := clock(host)
				lk, err := NewLock(st, "job", Config{Identity: "a", Clock: clk})
				if err != nil {
					t.Fatal(err)
				}
				ctx := context.Background()
				second, _ := secondTermAfterOneReleased(t, lk)
				time.Sleep(2*time.Second - 5*time.Millisecond) // the timer, armed at 0, steps at 1, 2, 3 s
				clk.Now()
				host.suspend(time.Minute) // the lease expired at the store meanwhile
				resumed := time.Now()
				<-second.Context().Done()
				if late := time.Since(resumed); late > suspendCheck || context.Cause(second.Context()) != ErrSafeUntilPassed {
					t.Fatalf("holder stopped %v after resuming (%v), want within %v and ErrSafeUntilPassed", late, context.Cause(second.Context()), suspendCheck)
				}
				second.Release(ctx)
			})
		})
	}
}
