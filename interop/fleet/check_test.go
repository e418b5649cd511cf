package fleet

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// at is a moment s seconds after a fixed origin.
var origin = time.Now()

func at(s float64) time.Time { return origin.Add(time.Duration(s * float64(time.Second))) }

func TestExclusion(t *testing.T) {
	lh := func(who string, start, end float64) Term {
		return Term{Who: who, Kind: "leasehold", Role: Leasehold, Start: at(start), Lost: at(end)}
	}
	peer := func(who string, start, lost, deadline float64) Term {
		return Term{Who: who, Kind: "peer", Role: Peer, Start: at(start), Lost: at(lost), Deadline: at(deadline)}
	}
	for _, c := range []struct {
		name            string
		terms           []Term
		overlaps, acted int
	}{
		{"back to back", []Term{lh("a", 0, 1), peer("p", 1, 2, 3), lh("b", 2, 3)}, 0, 0},
		{"peer until its own deadline", []Term{peer("p", 0, 5, 2), lh("a", 2.5, 3)}, 0, 1},
		{"peer past its own deadline's end", []Term{peer("p", 0, 5, 3), lh("a", 2.5, 4)}, 1, 1},
		{"two leasehold terms", []Term{lh("a", 0, 2), lh("b", 1, 3)}, 1, 1},
		{"one node twice", []Term{lh("a", 0, 2), lh("a", 1, 3)}, 1, 1},
		{"begun past its own deadline", []Term{lh("a", 0, 2), peer("p", 1, 3, 0.5)}, 0, 1},
		{"nested", []Term{lh("a", 0, 10), peer("p", 2, 3, 4), lh("b", 5, 6)}, 2, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := Exclusion(c.terms); len(got) != c.overlaps {
				t.Errorf("Exclusion = %v, want %d overlaps", got, c.overlaps)
			}
			if got := AsActed(c.terms); len(got) != c.acted {
				t.Errorf("AsActed = %v, want %d overlaps", got, c.acted)
			}
		})
	}
}

func TestFairnessAndLateLoss(t *testing.T) {
	peer := func(start float64) Term { return Term{Who: "p", Role: Peer, Start: at(start), Lost: at(start + 0.5)} }
	lh := Term{Who: "a", Role: Leasehold, Start: at(4), Lost: at(5)}
	terms := []Term{peer(0), peer(1), peer(2), lh, peer(6)}
	waits := []Wait{
		{Who: "a", Role: Leasehold, Start: at(0.5), End: at(4)}, // peers at 1 and 2
		{Who: "a", Role: Leasehold, Start: at(5), End: at(7)},   // the peer at 6, and never got in
		{Who: "p", Role: Peer, Start: at(0), End: at(9)},        // a peer's wait does not count
	}
	if got := Fairness(terms, waits, nil); !slices.Equal(got, []int{2, 1}) {
		t.Errorf("Fairness = %v, want [2 1]", got)
	}
	// A peer term begun while the waiter was cut off is not counted; one
	// begun under a fault on someone else, after a reset, or as the
	// waiter's fault healed, is.
	faults := []FaultEvent{
		{Who: "a", Kind: FaultPartition, Start: at(0.9), End: at(1.5)}, // the peer at 1
		{Who: "p", Kind: FaultDown, Start: at(1.9), End: at(2.5)},      // not the waiter's
		{Who: "a", Kind: FaultReset, Start: at(2), End: at(2)},         // lasts no time
		{Who: "a", Kind: FaultDelay, Start: at(5.5), End: at(6)},       // healed as the peer at 6 began
	}
	if got := Fairness(terms, waits, faults); !slices.Equal(got, []int{1, 1}) {
		t.Errorf("Fairness with faults = %v, want [1 1]", got)
	}
	if h := Histogram([]int{2, 1, 2, 0}); !slices.Equal(h, []int{1, 1, 2}) {
		t.Errorf("Histogram = %v", h)
	}
	late := []Term{
		{Role: Peer, Lost: at(3), Deadline: at(2), How: "lost"},
		{Role: Peer, Lost: at(1), Deadline: at(2), How: "lost"},
		{Role: Peer, Lost: at(9), Deadline: at(2), How: "stopped"},
		{Role: Leasehold, Lost: at(9), How: "lost"},
	}
	if got := LateLoss(late); !slices.Equal(got, []time.Duration{time.Second}) {
		t.Errorf("LateLoss = %v, want [1s]", got)
	}
}

// TestFormatShowsDetail: a lost leasehold term's cause and safeUntil are in
// the timeline a failed check prints.
func TestFormatShowsDetail(t *testing.T) {
	r := NewRecorder()
	term := r.Begin("lh-1", "leasehold", Leasehold, 7)
	r.SetDetail(term, "leasehold: lease lost; safeUntil 1s at the grant, 1s at the loss")
	r.End(term, time.Now(), "lost")
	terms, _ := r.Stop()
	out := r.Format(terms)
	if want := "lost (leasehold: lease lost; safeUntil 1s at the grant, 1s at the loss)"; !strings.Contains(out, want) {
		t.Fatalf("timeline %q does not contain %q", out, want)
	}
}

// OverlapDetail lists the faults on either member of an overlap from
// OverlapLookback before the earlier term to the later one's end, and no
// other: not another member's, not one before the window, not one after it.
func TestOverlapDetail(t *testing.T) {
	r := Result{Rec: NewRecorder()}
	at := func(ms int) time.Time { return r.Rec.origin.Add(time.Duration(ms) * time.Millisecond) }
	a := Term{Who: "client-go-2", Kind: "client-go", Role: Peer, Start: at(20000), Lost: at(21000), Deadline: at(22000), How: "released"}
	b := Term{Who: "lh-1", Kind: "leasehold", Role: Leasehold, Token: 27, Start: at(20030), Lost: at(21800), How: "released"}
	r.FaultEvents = []FaultEvent{
		{Who: "client-go-2", Kind: "delay", Start: at(16000), End: at(16500)},     // in the lookback
		{Who: "lh-1", Kind: "reset", Start: at(20500), End: at(20500)},            // during
		{Who: "lh-2", Kind: "down", Start: at(19000), End: at(21000)},             // another member
		{Who: "lh-1", Kind: "partition", Start: at(10000), End: at(14000)},        // before the window
		{Who: "client-go-2", Kind: "partition", Start: at(23000), End: at(24000)}, // after it
	}
	out := r.OverlapDetail(Overlap{A: a, B: b, For: time.Second})
	for _, want := range []string{"delay      on client-go-2", "reset      on lh-1", "own deadline 22s", "lh-1"} {
		if !strings.Contains(out, want) {
			t.Errorf("detail lacks %q:\n%s", want, out)
		}
	}
	for _, not := range []string{"on lh-2", "partition"} {
		if strings.Contains(out, not) {
			t.Errorf("detail has %q, outside the overlap's members or window:\n%s", not, out)
		}
	}
	r.FaultEvents = nil
	if out := r.OverlapDetail(Overlap{A: a, B: b}); !strings.Contains(out, "no fault on either") {
		t.Errorf("detail without faults:\n%s", out)
	}
}
