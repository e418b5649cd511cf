package fleet

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store"
)

// Member is one participant's loop: it contends, leads, steps down and
// contends again, recording into rec, until ctx ends. It returns promptly
// after ctx ends; a non-nil error fails the run.
type Member func(ctx context.Context, rec *Recorder) error

// Options shape a fleet run.
type Options struct {
	// Duration is how long the run lasts (at most, with Until).
	Duration time.Duration
	// Faults, if not nil, are injected while the run lasts.
	Faults *Faults
	// Until, if not nil, is asked every 100 ms about the terms and waits so
	// far (see Recorder.Snapshot); the run ends early once it says true.
	Until func([]Term, []Wait) bool
}

// Run runs members side by side as o says, and returns what happened.
func Run(ctx context.Context, o Options, members ...Member) Result {
	rec := NewRecorder()
	ctx, cancel := context.WithTimeout(ctx, o.Duration)
	defer cancel()
	faults := o.Faults
	var wg sync.WaitGroup
	if o.Until != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(100 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				if o.Until(rec.Snapshot()) {
					cancel()
					return
				}
			}
		}()
	}
	errs := make([]error, len(members))
	for i, m := range members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = m(ctx, rec)
		}()
	}
	if faults != nil {
		if faults.Leader == nil {
			faults.Leader = rec.Leader
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			faults.Run(ctx)
		}()
	}
	wg.Wait()
	terms, waits := rec.Stop()
	res := Result{Rec: rec, Terms: terms, Waits: waits, Err: errors.Join(errs...)}
	if faults != nil {
		res.Faults, res.FaultCount, res.FaultEvents = faults.String(), faults.Total(), faults.Events()
	}
	res.Overlaps = Exclusion(terms)
	res.AsActed = AsActed(terms)
	res.Fairness = Fairness(terms, waits, res.FaultEvents)
	res.LateLoss = LateLoss(terms)
	return res
}

// Involving returns an Until that ends the run once an overlap involves a
// participant whose name begins with who.
func Involving(who string) func([]Term, []Wait) bool {
	return func(terms []Term, _ []Wait) bool {
		for _, o := range Exclusion(terms) {
			if strings.HasPrefix(o.A.Who, who) || strings.HasPrefix(o.B.Who, who) {
				return true
			}
		}
		return false
	}
}

// WaitedOver returns an Until that ends the run once a leasehold node has
// waited through more than n peer terms (every one: for runs without faults).
func WaitedOver(n int) func([]Term, []Wait) bool {
	return func(terms []Term, waits []Wait) bool {
		f := Fairness(terms, waits, nil)
		return len(f) > 0 && slices.Max(f) > n
	}
}

// Result is what a fleet run did, and what the checks found.
type Result struct {
	Rec        *Recorder
	Terms      []Term
	Waits      []Wait
	Err        error // members' errors
	Faults     string
	FaultCount int
	// FaultEvents are the faults injected, in the order they began.
	FaultEvents []FaultEvent
	// Overlaps are the exclusion check's violations (must be none).
	Overlaps []Overlap
	// AsActed are the overlaps with peers trusted until their own loss signal.
	AsActed []Overlap
	// Fairness is, per leasehold wait, the peer terms begun during it while
	// the waiter's own connection was free of lasting faults (see Fairness).
	Fairness []int
	// LateLoss is how late each peer's loss signal came after its deadline.
	LateLoss []time.Duration
}

// MaxWait is the largest number of peer terms a leasehold node waited
// through.
func (r Result) MaxWait() int {
	if len(r.Fairness) == 0 {
		return 0
	}
	return slices.Max(r.Fairness)
}

// Count returns the number of terms by kind, and how they ended.
func (r Result) Count() string {
	kinds := map[string]int{}
	hows := map[string]int{}
	for _, t := range r.Terms {
		kinds[t.Kind]++
		hows[t.How]++
	}
	var ks, hs []string
	for _, k := range slices.Sorted(maps.Keys(kinds)) {
		ks = append(ks, fmt.Sprintf("%s %d", k, kinds[k]))
	}
	for _, h := range slices.Sorted(maps.Keys(hows)) {
		hs = append(hs, fmt.Sprintf("%s %d", h, hows[h]))
	}
	return fmt.Sprintf("%d terms (%s; ended: %s)", len(r.Terms), strings.Join(ks, ", "), strings.Join(hs, ", "))
}

// Summary is the run's figures in a few lines.
func (r Result) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n", r.Count())
	if r.Faults != "" {
		fmt.Fprintf(&b, "%s\n", r.Faults)
	}
	fmt.Fprintf(&b, "exclusion: %d overlaps; trusting peers until their own loss signal: %d overlaps\n", len(r.Overlaps), len(r.AsActed))
	if n := len(r.LateLoss); n > 0 {
		fmt.Fprintf(&b, "peer loss signals after the peer's own deadline: %d, median %v, max %v\n", n,
			r.LateLoss[n/2].Round(time.Millisecond), r.LateLoss[n-1].Round(time.Millisecond))
	} else {
		fmt.Fprintf(&b, "peer loss signals after the peer's own deadline: 0\n")
	}
	fmt.Fprintf(&b, "fairness: %d leasehold waits, peer terms waited through: max %d, histogram %v", len(r.Fairness), r.MaxWait(), Histogram(r.Fairness))
	return b.String()
}

// Node is a leasehold Elector as a fleet member.
type Node struct {
	// Name is the node's identity (a random suffix is added by leasehold).
	Name string
	// Store is the node's own store handle, through its own proxy.
	Store store.Store
	// Lease is the lease name.
	Lease string
	// Timings are the elector's timings.
	Timings leasehold.Timings
	// Hold returns how long to lead before stepping down.
	Hold func() time.Duration
	// Cool is the pause after a term before contending again.
	Cool time.Duration
	// Fair makes the node wait in the store's first-come, first-served
	// queue (leasehold.Config.Fair).
	Fair bool
	// Overtrust, for the negative control: the node goes on leading this
	// long after a term it did not end itself ended (safeUntil passed, or
	// the store said it was lost), as a node that trusts past safeUntil
	// would.
	Overtrust time.Duration
}

// Member returns the node's loop. StopOnLoss is set, so that each wait after
// a loss is recorded.
func (n *Node) Member() Member {
	return func(ctx context.Context, rec *Recorder) error {
		el, err := leasehold.NewElector(n.Store, n.Lease, leasehold.Config{Identity: n.Name, Timings: n.Timings, StopOnLoss: true, Fair: n.Fair})
		if err != nil {
			return err
		}
		for ctx.Err() == nil {
			waited := rec.Waiting(n.Name, Leasehold)
			err := el.Run(ctx, func(wctx context.Context, l *leasehold.Lease) error {
				waited(true)
				t := rec.Begin(n.Name, "leasehold", Leasehold, l.Token())
				firstSafe := l.SafeUntil() // the acquire's send time + RenewDeadline
				hold := time.NewTimer(n.Hold())
				defer hold.Stop()
				select {
				case <-wctx.Done():
					lost, how := time.Now(), "lost"
					if ctx.Err() != nil {
						how = "stopped"
					} else {
						lost = lost.Add(n.Overtrust)
						rec.SetDetail(t, fmt.Sprintf("%v; safeUntil %v at the grant, %v at the loss", context.Cause(wctx), rec.Since(firstSafe), rec.Since(l.SafeUntil())))
					}
					rec.End(t, lost, how)
				case <-hold.C:
					rec.End(t, time.Now(), "released")
				}
				return nil
			})
			waited(false)
			if errors.Is(err, store.ErrInvalid) || errors.Is(err, store.ErrClosed) || errors.Is(err, leasehold.ErrInvalidConfig) {
				return fmt.Errorf("leasehold/interop/fleet: node %s: %w", n.Name, err)
			}
			Pause(ctx, n.Cool)
		}
		return nil
	}
}

// Pause waits d or until ctx ends: a member's own pacing, not a
// synchronisation.
func Pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// WaitDetail describes the leasehold wait that sat through the most peer
// terms: its span, every term begun during it, and the faults put on the
// waiter that overlapped it (a waiter cut off from the store cannot get in,
// however fair the protocol).
func (r Result) WaitDetail() string {
	worst, most := -1, -1
	i := 0
	for j, w := range r.Waits {
		if w.Role != Leasehold {
			continue
		}
		if i < len(r.Fairness) && r.Fairness[i] > most {
			worst, most = j, r.Fairness[i]
		}
		i++
	}
	if worst < 0 {
		return "no leasehold waits"
	}
	w := r.Waits[worst]
	since := func(t time.Time) time.Duration { return r.Rec.Since(t) }
	var b strings.Builder
	fmt.Fprintf(&b, "longest wait: %s %v..%v (%v), %d peer terms counted (begun during it, the waiter not cut off), won %v\n",
		w.Who, since(w.Start), since(w.End), w.End.Sub(w.Start).Round(time.Millisecond), most, w.Won)
	for _, t := range r.Terms {
		if !t.Start.Before(w.Start) && t.Start.Before(w.End) {
			note := ""
			switch {
			case t.Role != Peer:
				note = "(leasehold: not counted)"
			case cutOff(r.FaultEvents, w.Who, t.Start):
				note = "(waiter cut off: not counted)"
			}
			fmt.Fprintf(&b, "  term  %8v..%-8v %-10s %-24s %s %s\n", since(t.Start), since(t.End()), t.Kind, t.Who, t.How, note)
		}
	}
	for _, e := range r.FaultEvents {
		if e.Who == w.Who && !e.End.Before(w.Start) && e.Start.Before(w.End) {
			fmt.Fprintf(&b, "  fault %8v..%-8v %-10s on the waiter\n", since(e.Start), since(e.End), e.Kind)
		}
	}
	return b.String()
}

// OverlapLookback is how long before the earlier of an overlap's two terms
// OverlapDetail looks for faults: a fault that delayed a grant's answer or
// cut a member off from the store before its term began can explain it.
const OverlapLookback = 5 * time.Second

// OverlapDetail describes an exclusion violation for a failed test's log:
// the two terms with their own deadlines and loss signals, and every fault
// on either member from OverlapLookback before the earlier term began to
// the later term's end.
func (r Result) OverlapDetail(o Overlap) string {
	since := func(t time.Time) time.Duration { return r.Rec.Since(t) }
	from, to := o.A.Start.Add(-OverlapLookback), o.A.End()
	if o.B.Start.Before(o.A.Start) {
		from = o.B.Start.Add(-OverlapLookback)
	}
	if e := o.B.End(); e.After(to) {
		to = e
	}
	var b strings.Builder
	fmt.Fprintf(&b, "overlap of %s and %s, faults on either from %v to %v:\n", o.A.Who, o.B.Who, since(from), since(to))
	for _, t := range []Term{o.A, o.B} {
		fmt.Fprintf(&b, "  term  %8v..%-8v %-10s %-24s %s; saw its end at %v", since(t.Start), since(t.End()), t.Kind, t.Who, t.How, since(t.Lost))
		if !t.Deadline.IsZero() {
			fmt.Fprintf(&b, ", own deadline %v", since(t.Deadline))
		}
		b.WriteByte('\n')
	}
	n := 0
	for _, e := range r.FaultEvents {
		if (e.Who == o.A.Who || e.Who == o.B.Who) && !e.End.Before(from) && e.Start.Before(to) {
			fmt.Fprintf(&b, "  fault %8v..%-8v %-10s on %s\n", since(e.Start), since(e.End), e.Kind, e.Who)
			n++
		}
	}
	if n == 0 {
		b.WriteString("  no fault on either\n")
	}
	return b.String()
}
