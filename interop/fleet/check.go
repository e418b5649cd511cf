package fleet

import (
	"fmt"
	"slices"
	"time"
)

// Overlap is two terms that were led at once.
type Overlap struct {
	A, B Term
	// For is how long both led.
	For time.Duration
}

func (o Overlap) String() string {
	return fmt.Sprintf("%s %s (token %d) and %s %s (token %d) led at once for %v",
		o.A.Kind, o.A.Who, o.A.Token, o.B.Kind, o.B.Who, o.B.Token, o.For.Round(time.Millisecond))
}

// Exclusion returns every pair of terms whose intervals [Start, End())
// overlap. Two terms of one participant count too: a node whose old term's
// work still runs when its new term begins leads twice at once.
func Exclusion(terms []Term) []Overlap {
	return overlaps(terms, Term.End)
}

// AsActed is Exclusion with each peer trusted until its own loss signal
// (Lost) instead of the earlier of that and its own deadline: the overlaps a
// user who relied on the peer library's signal alone would have had.
func AsActed(terms []Term) []Overlap {
	return overlaps(terms, func(t Term) time.Time { return t.Lost })
}

func overlaps(terms []Term, end func(Term) time.Time) []Overlap {
	ts := slices.Clone(terms)
	slices.SortFunc(ts, func(a, b Term) int { return a.Start.Compare(b.Start) })
	var out []Overlap
	for i, a := range ts {
		ea := end(a)
		for _, b := range ts[i+1:] {
			if !b.Start.Before(ea) {
				break // sorted by start: no later term begins before a ends
			}
			eb := end(b)
			if !b.Start.Before(eb) {
				continue // empty: b began past its own deadline
			}
			stop := ea
			if eb.Before(stop) {
				stop = eb
			}
			out = append(out, Overlap{A: a, B: b, For: stop.Sub(b.Start)})
		}
	}
	return out
}

// LateLoss returns, for each peer term whose own loss signal came after its
// own deadline, how much later it came; sorted, longest last.
func LateLoss(terms []Term) []time.Duration {
	var out []time.Duration
	for _, t := range terms {
		if t.Role == Peer && !t.Deadline.IsZero() && t.How != "stopped" && t.Lost.After(t.Deadline) {
			out = append(out, t.Lost.Sub(t.Deadline))
		}
	}
	slices.Sort(out)
	return out
}

// Fairness counts, for each wait of a leasehold node, the peer terms begun
// while it waited, in the order of the waits. A wait that ended when the run
// stopped counts too: a node that never got in must not look fair.
//
// A peer term that began while the waiter's own connection was under a
// lasting fault (added delay, partition, down; in faults) is not counted:
// the waiter could not have taken that turn, however fair the protocol. A
// term begun the moment such a fault healed, or after a reset, counts.
func Fairness(terms []Term, waits []Wait, faults []FaultEvent) []int {
	var out []int
	for _, w := range waits {
		if w.Role != Leasehold {
			continue
		}
		n := 0
		for _, t := range terms {
			if t.Role == Peer && !t.Start.Before(w.Start) && t.Start.Before(w.End) && !cutOff(faults, w.Who, t.Start) {
				n++
			}
		}
		out = append(out, n)
	}
	return out
}

// cutOff reports whether who's connection was under a lasting fault at t.
func cutOff(faults []FaultEvent, who string, t time.Time) bool {
	for _, f := range faults {
		if f.Who == who && f.Kind != FaultReset && !t.Before(f.Start) && t.Before(f.End) {
			return true
		}
	}
	return false
}

// Histogram returns counts[i] = how many of xs equal i, up to the largest.
func Histogram(xs []int) []int {
	var h []int
	for _, x := range xs {
		for len(h) <= x {
			h = append(h, 0)
		}
		h[x]++
	}
	return h
}
