package leasehold

import (
	"context"
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

// A leader whose host is suspended past its safeUntil stops trusting its
// term within suspendCheck of resuming, not RenewDeadline of monotonic time
// later (SAFETY.md rule 7: the trust window counts a suspend).
func TestSuspendedLeaderStopsOnResume(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		host := &fakeSuspend{}
		// The store runs elsewhere: its clock goes on while this host sleeps.
		st := memstore.Open(memstore.NewBackend(func() time.Time { return time.Now().Add(host.read()) }))
		e, err := NewElector(st, "job", Config{Identity: "a", Clock: newSuspendAwareClock(host.read)})
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
