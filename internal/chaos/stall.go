package chaos

import (
	"context"
	"time"
)

// The stall recorder of a node process: how often it looks, and how late a
// look must be to count as a stall.
const (
	stallPeriod    = 10 * time.Millisecond
	stallThreshold = 50 * time.Millisecond
)

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

// stallSpans are the stalls a process recorded, [from, to] in wall ns, in
// the order recorded (they do not overlap).
func stallSpans(ev []event) [][2]int64 {
	var out [][2]int64
	for _, e := range ev {
		if e.Kind == evStall && e.StallTo > e.StallFrom {
			out = append(out, [2]int64{e.StallFrom, e.StallTo})
		}
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
