package chaos

import (
	"sort"
	"sync"
	"time"
)

// The stall recorder of a node process: how often it looks, and how late a
// look must be to count as a stall.
const (
	stallPeriod    = 10 * time.Millisecond
	stallThreshold = 50 * time.Millisecond
)

// stallRecorder looks for stalls only while guarded work runs in the
// process: the checker needs them only there (safe-until's exemption counts
// stalls from when a work was told to stop to its late event). A recorder in
// every process, standbys too, woke each of a CI run's 114 node processes
// every 10 ms; that starved the Kubernetes run's API server (accepted writes
// fell from 10,600 to about 1,000, and failovers came late).
type stallRecorder struct {
	hw                *historyWriter
	period, threshold time.Duration
	now               func() time.Time // time.Now; a test's own clock

	mu   sync.Mutex
	n    int              // works running
	stop chan<- time.Time // ends the recording goroutine, with the stop's time; nil when none runs
	done chan struct{}    // closed when it has returned
}

func newStallRecorder(hw *historyWriter, period, threshold time.Duration) *stallRecorder {
	return &stallRecorder{hw: hw, period: period, threshold: threshold, now: time.Now}
}

// workStarted records stalls until the matching call of the function it
// returns; works may overlap (a semaphore's slots), one goroutine records for
// all of them, so no stall is written twice. The last work's stop waits for
// the recorder to end, its last stall written.
func (r *stallRecorder) workStarted() (workStopped func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n++
	if r.n == 1 {
		stop := make(chan time.Time, 1)
		r.stop, r.done = stop, make(chan struct{})
		go func(done chan struct{}) {
			defer close(done)
			recordStalls(stop, r.hw, r.period, r.threshold, r.now)
		}(r.done)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.n--
			if r.n == 0 {
				r.stop <- r.now()
				<-r.done
			}
		})
	}
}

// recordStalls wakes every period on the real monotonic clock (not the
// node's injected clock) and, when a wake-up comes more than threshold after
// it was due, emits an evStall spanning the time from when it was due to
// when it ran: time in which the process was not run (the OS did not
// schedule it, the Go runtime stopped the world, or a SIGSTOP froze it). It
// writes nothing otherwise, so it costs a timer wake-up per period. It
// returns when it receives the time of a stop, once it has judged the span
// up to then the same way: after a stall the work's goroutine may run and
// stop the recording before this one runs its overdue wake-up (a CI run saw
// a work return 1.24 s past safeUntil with no stall recorded, and no write
// for 2 s before), and that stall must not be lost.
func recordStalls(stop <-chan time.Time, hw *historyWriter, period, threshold time.Duration, clock func() time.Time) {
	t := time.NewTimer(period)
	defer t.Stop()
	prev := clock()
	judge := func(now time.Time) {
		// Sub uses the monotonic readings: a step of the host's wall clock
		// does not make a stall, nor hide one.
		if late := now.Sub(prev) - period; late > threshold {
			to := now.UnixNano()
			hw.emit(event{Kind: evStall, StallFrom: to - int64(late), StallTo: to})
		}
		prev = now
	}
	for {
		select {
		case at := <-stop:
			judge(at)
			return
		case <-t.C:
		}
		judge(clock())
		t.Reset(period)
	}
}

// stallSpans are the stalls a process recorded, [from, to] in wall ns,
// sorted and merged: the recorder's spans and those of a blocked history
// write may overlap, and no moment may count twice.
func stallSpans(ev []event) [][2]int64 {
	var in [][2]int64
	for _, e := range ev {
		if e.Kind == evStall && e.StallTo > e.StallFrom {
			in = append(in, [2]int64{e.StallFrom, e.StallTo})
		}
	}
	sort.Slice(in, func(i, j int) bool { return in[i][0] < in[j][0] })
	var out [][2]int64
	for _, s := range in {
		if k := len(out) - 1; k >= 0 && s[0] <= out[k][1] {
			out[k][1] = max(out[k][1], s[1])
			continue
		}
		out = append(out, s)
	}
	return out
}

// stalledWithin is how much of [from, to] (wall ns) the spans cover.
func stalledWithin(spans [][2]int64, from, to int64) int64 {
	var sum int64
	for _, s := range spans {
		if a, b := max(s[0], from), min(s[1], to); b > a {
			sum += b - a
		}
	}
	return sum
}
