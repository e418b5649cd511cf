package chaos

import (
	"testing"
	"testing/synctest"
	"time"
)

// TestStallRecorderRunsOnlyWhileWorking: the recorder's goroutine exists only
// while some work runs, one for overlapping works, and ends after the last.
func TestStallRecorderRunsOnlyWhileWorking(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newStallRecorder(&historyWriter{}, stallPeriod, stallThreshold)
		running := func() bool {
			r.mu.Lock()
			defer r.mu.Unlock()
			if r.done == nil {
				return false
			}
			select {
			case <-r.done:
				return false
			default:
				return true
			}
		}
		if running() {
			t.Fatal("recording before any work started")
		}
		stopA := r.workStarted()
		first := r.done
		stopB := r.workStarted()
		if r.done != first {
			t.Fatal("a second, overlapping work started a second recorder: its stalls would be written twice")
		}
		stopA()
		stopA() // a second call changes nothing
		time.Sleep(time.Second)
		synctest.Wait()
		if !running() {
			t.Fatal("recorder stopped while a work still ran")
		}
		stopB()
		synctest.Wait()
		if running() {
			t.Fatal("recorder still running after the last work stopped")
		}
		stopC := r.workStarted()
		if !running() || r.done == first {
			t.Fatal("a work started after the others did not get a new recorder")
		}
		stopC()
		synctest.Wait()
	})
}

// TestStallSpansMerge: overlapping stall spans (the recorder's and a blocked
// history write's) count each moment once.
func TestStallSpansMerge(t *testing.T) {
	ev := []event{
		{Kind: evStall, StallFrom: 100, StallTo: 200},
		{Kind: evStall, StallFrom: 150, StallTo: 300},
		{Kind: evStall, StallFrom: 400, StallTo: 450},
		{Kind: evStall, StallFrom: 90, StallTo: 120},
	}
	if got := stalledWithin(stallSpans(ev), 0, 1000); got != 260 {
		t.Fatalf("stalled %d ns of [0, 1000], want 260 (90-300 and 400-450, once each)", got)
	}
}
