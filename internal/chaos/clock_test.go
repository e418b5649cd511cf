package chaos

import (
	"testing"
	"testing/synctest"
	"time"
)

// The drift clock's tests run in a synctest bubble: time is virtual, so the
// rates are checked exactly and nothing waits for real.

func TestDriftClockRateAndOffset(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, err := newDriftClock(5*time.Second, 2)
		if err != nil {
			t.Fatal(err)
		}
		if off := c.Now().Sub(time.Now()); off != 5*time.Second {
			t.Fatalf("offset = %v, want 5s", off)
		}
		t0 := c.Now()
		time.Sleep(time.Second) // virtual
		if d := c.Now().Sub(t0); d != 2*time.Second {
			t.Fatalf("after 1s of real time a rate-2 clock advanced %v", d)
		}
		if err := c.Set(0.5, 3*time.Second); err != nil {
			t.Fatal(err)
		}
		if d := c.Now().Sub(t0); d != 5*time.Second {
			t.Fatalf("after a 3s step the clock advanced %v, want 5s", d)
		}
		time.Sleep(2 * time.Second)
		if d := c.Now().Sub(t0); d != 6*time.Second {
			t.Fatalf("rate 0.5 for 2s: advanced %v, want 6s", d)
		}
	})
}

func TestDriftClockTimers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, _ := newDriftClock(0, 2)
		start := time.Now()
		tm := c.NewTimer(4 * time.Second) // 2 s of real time at rate 2
		<-tm.C()
		if real := time.Since(start); real != 2*time.Second {
			t.Fatalf("timer fired after %v of real time, want 2s", real)
		}

		// A rate change re-arms a pending timer: 4 s on the clock, 1 s of it
		// at rate 2 (0.5 s real), then 3 s at rate 1 (3 s real).
		start = time.Now()
		tm = c.NewTimer(4 * time.Second)
		time.Sleep(500 * time.Millisecond)
		c.Set(1, 0)
		<-tm.C()
		if real := time.Since(start); real != 3500*time.Millisecond {
			t.Fatalf("re-armed timer fired after %v, want 3.5s", real)
		}

		// A forward step past the target fires at once.
		tm = c.NewTimer(10 * time.Second)
		c.Set(1, 11*time.Second)
		synctest.Wait()
		select {
		case <-tm.C():
		default:
			t.Fatal("a step past the target did not fire the timer")
		}

		// Stop and Reset discard a firing that was not received.
		tm = c.NewTimer(time.Second)
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if tm.Stop() {
			t.Fatal("Stop of a fired timer reported it active")
		}
		select {
		case <-tm.C():
			t.Fatal("a stale firing survived Stop")
		default:
		}
		if tm.Reset(time.Second) {
			t.Fatal("Reset of a stopped timer reported it active")
		}
		if !tm.Reset(2 * time.Second) {
			t.Fatal("Reset of an armed timer reported it inactive")
		}
		start = time.Now()
		<-tm.C()
		if real := time.Since(start); real != 2*time.Second { // the rate is 1 since the step above
			t.Fatalf("reset timer fired after %v, want 2s", real)
		}
	})
}

func TestDriftClockRejectsBadInput(t *testing.T) {
	for _, r := range []float64{0, -1} {
		if _, err := newDriftClock(0, r); err == nil {
			t.Errorf("rate %v accepted", r)
		}
	}
	c, _ := newDriftClock(0, 1)
	if err := c.Set(1, -time.Second); err == nil {
		t.Error("a backward step was accepted")
	}
}
