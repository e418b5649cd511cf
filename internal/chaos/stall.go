package chaos

import (
	"context"
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

	mu   sync.Mutex
	n    int                // works running
	stop context.CancelFunc // ends the recording goroutine; nil when none runs
	done chan struct{}      // closed when it has returned
}

func newStallRecorder(hw *historyWriter, period, threshold time.Duration) *stallRecorder {
	return &stallRecorder{hw: hw, period: period, threshold: threshold}
}

// workStarted records stalls until the matching call of the function it
// returns; works may overlap (a semaphore's slots), one goroutine records for
// all of them, so no stall is written twice.
func (r *stallRecorder) workStarted() (workStopped func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n++
	if r.n == 1 {
		if r.done != nil {
			<-r.done // the last one has been told to stop; let it finish
		}
		ctx, cancel := context.WithCancel(context.Background())
		r.stop, r.done = cancel, make(chan struct{})
		go func(done chan struct{}) {
			defer close(done)
			recordStalls(ctx, r.hw, r.period, r.threshold)
		}(r.done)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.n--
			if r.n == 0 {
				r.stop()
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
// returns when ctx ends.
func recordStalls(ctx context.Context, hw *historyWriter, period, threshold time.Duration) {
	t := time.NewTimer(period)
	defer t.Stop()
	prev := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		// Sub uses the monotonic readings: a step of the host's wall clock
		// does not make a stall, nor hide one.
		if late := now.Sub(prev) - period; late > threshold {
			to := now.UnixNano()
			hw.emit(event{Kind: evStall, StallFrom: to - int64(late), StallTo: to})
		}
		prev = now
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
