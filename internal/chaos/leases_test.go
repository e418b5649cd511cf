package chaos

import (
	"strings"
	"testing"
	"time"
)

// term adds a term of proc on lease: granted at s (a 5 ms acquire), guarded
// work from then until stop.
func (b *histBuilder) term(proc, lease string, token int64, s, stop float64) {
	n := len(b.h.Events)
	b.granted(proc, s, evAcquired, proc+"-h", token, 0.005)
	b.ev(proc, s, event{Kind: evWorkStart, Token: token, SafeUntil: sec(s - 0.005 + 1.4)})
	b.ev(proc, stop, event{Kind: evWorkStop, Token: token, SafeUntil: sec(s - 0.005 + 1.4)})
	for i := n; i < len(b.h.Events); i++ {
		b.h.Events[i].Lease = lease
	}
}

func modeHistory(mode string) *histBuilder {
	b := &histBuilder{h: &history{Store: "test://", Seed: 1, Fenced: true, Timings: testTimings(), Slack: time.Second,
		Start: at(0), End: at(9), Mode: mode, Lease: "sem"}}
	for _, p := range []string{"n1.1", "n2.1", "n3.1"} {
		b.ev(p, 0, event{Kind: evStart, Identity: p[:2], Holder: p + "-h"})
	}
	return b
}

func checkCount(r *Result, name string) int {
	for _, c := range r.Checks {
		if c.Name == name {
			return c.Violations
		}
	}
	return -1
}

// A semaphore of 2 slots: two holders at once pass; a third live holder
// (on a slot beyond the two, as a node configured with 3 slots would use)
// fails at-most-n only, every slot on its own being held rightly.
func TestCheckAtMostN(t *testing.T) {
	for _, tc := range []struct {
		name  string
		third float64 // when n3's term on slot 2 begins
		want  int
	}{
		{"two at once", 1.2, 0},
		{"three at once", 0.5, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := modeHistory(ModeSemaphore)
			b.h.Slots = 2
			b.term("n1.1", "sem.slot-0", 1, 0.1, 1.0)
			b.term("n2.1", "sem.slot-1", 1, 0.2, 1.1)
			if tc.want == 0 {
				// n3 takes slot 0 after n1 let it go.
				b.term("n3.1", "sem.slot-0", 2, tc.third, 2.0)
			} else {
				b.term("n3.1", "sem.slot-2", 1, tc.third, 1.5)
			}
			r := checkHistory(b.h, checkOptions{})
			if got := checkCount(r, chkAtMostN); got != tc.want {
				t.Fatalf("at-most-n found %d violations, want %d: %v", got, tc.want, r.Violations)
			}
			if n := len(r.Violations); n != tc.want {
				t.Fatalf("%d violations in all, want %d (only at-most-n's): %v", n, tc.want, r.Violations)
			}
			if tc.want > 0 && !strings.Contains(r.Violations[0].Msg, "3 processes ran guarded work under the 2 slots at once") {
				t.Errorf("violation: %s", r.Violations[0])
			}
			if want := 2 + tc.want; r.Stats.MaxLive != want {
				t.Errorf("MaxLive %d, want %d", r.Stats.MaxLive, want)
			}
		})
	}
}

// The per-lease checks run per slot: the same token on two slots is two
// slots' first terms, not a token granted twice; one slot granted to two
// live terms at once is caught by exclusive-work on that slot.
func TestCheckSemaphorePerSlot(t *testing.T) {
	b := modeHistory(ModeSemaphore)
	b.h.Slots = 2
	b.term("n1.1", "sem.slot-0", 1, 0.1, 1.0)
	b.term("n2.1", "sem.slot-1", 1, 0.2, 1.1)
	if r := checkHistory(b.h, checkOptions{}); !r.OK() {
		t.Fatalf("two slots' first terms: %v", r.Violations)
	}
	b.term("n3.1", "sem.slot-0", 2, 0.5, 2.0) // while n1 still works on slot 0
	r := checkHistory(b.h, checkOptions{})
	if checkCount(r, chkExclusive) != 1 || !strings.HasPrefix(r.Violations[0].Msg, "slot-0: ") {
		t.Fatalf("slot 0 granted to two live terms: %v", r.Violations)
	}
}

// A schedule: one run per period passes; a period run by two nodes fails
// once-per-period.
func TestCheckOncePerPeriod(t *testing.T) {
	for _, tc := range []struct {
		name   string
		second int64 // the period of n2's run
		want   int
	}{
		{"each period once", 1_700_000_002, 0},
		{"a period twice", 1_700_000_000, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := modeHistory(ModeSchedule)
			b.h.Lease, b.h.Every = "job", 2*time.Second
			b.term("n1.1", "job", 1, 0.1, 1.0)
			b.ev("n1.1", 0.1, event{Kind: evRun, Period: 1_700_000_000, Token: 1, Lease: "job"})
			b.term("n2.1", "job", 2, 2.1, 3.0)
			b.ev("n2.1", 2.1, event{Kind: evRun, Period: tc.second, Token: 2, Lease: "job"})
			r := checkHistory(b.h, checkOptions{})
			if got := checkCount(r, chkOncePerPeriod); got != tc.want || len(r.Violations) != tc.want {
				t.Fatalf("once-per-period found %d violations (all checks %d), want %d: %v", got, len(r.Violations), tc.want, r.Violations)
			}
			if r.Stats.Runs != 2 || r.Stats.Periods != 2-tc.want {
				t.Errorf("runs %d periods %d", r.Stats.Runs, r.Stats.Periods)
			}
		})
	}
}

// A process killed right after its work began leaves an interval of no
// length (its last line is the work-start). It overlaps nothing: later
// holders of both slots are not three at once. (The end of such an interval
// once sorted before its start, so it stayed live for the rest of the run:
// an etcd semaphore run reported at-most-n five times for it.)
func TestCheckAtMostNEmptyInterval(t *testing.T) {
	b := modeHistory(ModeSemaphore)
	b.h.Slots = 2
	b.term("n1.1", "sem.slot-0", 1, 0.1, 1.0)
	// n3.1: granted slot 1 and killed as its work began.
	n := len(b.h.Events)
	b.granted("n3.1", 1.2, evAcquired, "n3.1-h", 1, 0.005)
	b.ev("n3.1", 1.2, event{Kind: evWorkStart, Token: 1, SafeUntil: sec(1.2 - 0.005 + 1.4)})
	for i := n; i < len(b.h.Events); i++ {
		b.h.Events[i].Lease = "sem.slot-1"
	}
	b.term("n1.1", "sem.slot-0", 2, 3.0, 4.0)
	b.term("n2.1", "sem.slot-1", 2, 3.1, 4.1)
	r := checkHistory(b.h, checkOptions{})
	if got := checkCount(r, chkAtMostN); got != 0 {
		t.Fatalf("at-most-n found %d violations, want 0: %v", got, r.Violations)
	}
	if r.Stats.MaxLive != 2 {
		t.Errorf("MaxLive %d, want 2", r.Stats.MaxLive)
	}
}
