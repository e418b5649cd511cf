package chaos

import (
	"os"
	"path/filepath"
	"sync/atomic"
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

// TestStallRecorderJudgesTheSpanToItsStop: a stall that ends just before the
// last work stops (the work's goroutine ran first after it) is recorded
// before the stop returns, though the recorder never ran its overdue wake-up.
func TestStallRecorderJudgesTheSpanToItsStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "history")
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		hw := &historyWriter{f: f, start: time.Now(), clock: func() int64 { return 0 }}
		r := newStallRecorder(hw, stallPeriod, stallThreshold)
		// The process is not run for a second just before the stop: every
		// reading from then on is a second later than the bubble's.
		var frozen atomic.Int64
		r.now = func() time.Time { return time.Now().Add(time.Duration(frozen.Load())) }

		stop := r.workStarted()
		time.Sleep(5*stallPeriod + stallPeriod/2)
		synctest.Wait() // the recorder waits for its sixth wake-up
		frozen.Store(int64(time.Second))
		stop()

		ev, err := readEventFiles([]string{path})
		if err != nil {
			t.Fatal(err)
		}
		spans := stallSpans(ev)
		if len(spans) != 1 {
			t.Fatalf("stall spans %v, want the one second before the stop", spans)
		}
		// Due at 60 ms, stopped at 55 ms + 1 s: 995 ms not run.
		if got, want := time.Duration(spans[0][1]-spans[0][0]), 995*time.Millisecond; got != want {
			t.Fatalf("stall of %v recorded, want %v", got, want)
		}
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
