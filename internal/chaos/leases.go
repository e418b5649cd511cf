package chaos

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/leasehold/leasehold"
)

// A semaphore's run and a schedule's run hold more than one lease: each
// semaphore slot is a lease of its own with its own tokens, and a schedule
// runs under its run lease (and claims each period with a lease of the
// period's own). Their histories name the lease of each event, and the
// checker runs the checks of one lease on each working lease's part of the
// history (each slot, or the run lease), then the checks of the whole:
// failover (some slot held, some run made), at-most-n (a semaphore) and
// once-per-period (a schedule).

// workLeases are the leases under which h's nodes ran guarded work, with
// the label of each: a semaphore's slots (and any slot beyond Slots a
// broken node used), or a schedule's run lease.
func workLeases(h *history) (names, labels []string) {
	if h.Mode == ModeSchedule {
		return []string{h.Lease}, []string{"run"}
	}
	n := h.Slots
	for _, e := range h.Events {
		if i := slotIndex(h.Lease, e.Lease); i >= n {
			n = i + 1
		}
	}
	for i := range n {
		names = append(names, leasehold.SlotName(h.Lease, i))
		labels = append(labels, fmt.Sprintf("slot-%d", i))
	}
	return names, labels
}

// processEvents are the events of a process as a whole, kept in every
// lease's part of a history (the clock readings bound its steps; its
// stalls are what safe-until weighs an overrun against).
var processEvents = map[string]bool{evStart: true, evClockBefore: true, evClock: true, evExit: true, evStall: true}

// leaseHistory is the part of h about lease name, whose writes go to res:
// its events, the process-wide ones, the register's log and reads of res,
// and every fault (aimed at its holder only if it held this lease).
func leaseHistory(h *history, name string, res []string) *history {
	sub := *h
	sub.Mode, sub.Events, sub.Register, sub.Reads, sub.Faults = "", nil, nil, nil, nil
	sub.Resources = res
	in := map[string]bool{}
	for _, r := range res {
		in[r] = true
	}
	for _, e := range h.Events {
		if e.Lease == name || (e.Lease == "" && processEvents[e.Kind]) {
			sub.Events = append(sub.Events, e)
		}
	}
	for _, r := range h.Register {
		if in[r.Resource] {
			sub.Register = append(sub.Register, r)
		}
	}
	for _, r := range h.Reads {
		if in[r.Resource] {
			sub.Reads = append(sub.Reads, r)
		}
	}
	for _, f := range h.Faults {
		if f.Lease != "" && f.Lease != name {
			f.Leader, f.Token = false, 0
		}
		sub.Faults = append(sub.Faults, f)
	}
	return &sub
}

// checkLeases checks a semaphore's or a schedule's history: the checks of
// one lease on each working lease, failover on the whole, and the mode's own.
func checkLeases(h *history, opts checkOptions) *Result {
	names, labels := workLeases(h)
	parts := make([]*checker, len(names))
	results := make([]*Result, len(names))
	for i, name := range names {
		res := h.Resources
		if h.Mode == ModeSemaphore {
			res = nil
			if i < len(h.Resources) {
				res = h.Resources[i : i+1]
			}
		}
		parts[i] = checkLease(leaseHistory(h, name, res), opts, map[string]bool{chkFailover: true})
		results[i] = parts[i].res
	}
	merged := mergeResults(labels, results, false)
	w := &checker{h: h, opts: opts, res: merged}
	w.index()
	// The whole history's own counts, where a part's would miss or repeat
	// something: faults and processes once each; terms, failovers and
	// linearizability are the parts'.
	s := &merged.Stats
	whole := &Result{}
	w.res = whole
	w.stats()
	w.res = merged
	s.FaultsByKind, s.Processes, s.Reads, s.FailoverBound = whole.Stats.FaultsByKind, whole.Stats.Processes, whole.Stats.Reads, whole.Stats.FailoverBound
	w.run(chkFailover, w.checkFailover)
	switch h.Mode {
	case ModeSemaphore:
		w.run(chkAtMostN, func() string { return w.checkAtMostN(parts, labels) })
	case ModeSchedule:
		w.run(chkOncePerPeriod, w.checkOncePerPeriod)
	}
	return merged
}

// checkAtMostN: the live intervals of guarded work of every slot (as
// exclusive-work computes them, per slot) never number more than Slots at
// once.
func (c *checker) checkAtMostN(parts []*checker, labels []string) string {
	type edge struct {
		at    int64
		delta int
		iv    int
	}
	type slotWork struct {
		liveWork
		slot string
	}
	var ivs []slotWork
	var edges []edge
	for i, p := range parts {
		for _, iv := range p.workIntervals() {
			if iv.to <= iv.from {
				// No length (a process killed as its work began): it
				// overlaps nothing, and its end, sorted before its start,
				// would leave it live for the rest of the run.
				continue
			}
			edges = append(edges, edge{iv.from, +1, len(ivs)}, edge{iv.to, -1, len(ivs)})
			ivs = append(ivs, slotWork{iv, labels[i]})
		}
	}
	// An interval that ends where another begins does not overlap it.
	sort.Slice(edges, func(i, j int) bool {
		if edges[i].at != edges[j].at {
			return edges[i].at < edges[j].at
		}
		return edges[i].delta < edges[j].delta
	})
	n := c.h.Slots
	live := map[int]bool{}
	most := 0
	var over int64 = -1 // when the count last rose above n
	var who []string
	for _, e := range edges {
		if e.delta > 0 {
			live[e.iv] = true
		} else {
			delete(live, e.iv)
		}
		switch {
		case len(live) > n && over < 0:
			over = e.at
			who = who[:0]
			keys := make([]int, 0, len(live))
			for k := range live {
				keys = append(keys, k)
			}
			sort.Ints(keys)
			for _, k := range keys {
				w := ivs[k]
				who = append(who, fmt.Sprintf("%s (%s, token %d)", w.proc, w.slot, w.token))
			}
		case len(live) <= n && over >= 0:
			c.violate(Violation{Wall: over, Msg: fmt.Sprintf("%d processes ran guarded work under the %d slots at once, none frozen, for %v: %s",
				len(who), n, time.Duration(e.at-over), strings.Join(who, ", "))})
			over = -1
		}
		most = max(most, len(live))
	}
	c.res.Stats.MaxLive = most
	return fmt.Sprintf("%d live intervals over %d slots; at most %d at once", len(ivs), len(parts), most)
}

// checkOncePerPeriod: each period of the schedule ran at most once, across
// every node and incarnation.
func (c *checker) checkOncePerPeriod() string {
	runs := map[int64][]event{}
	s := &c.res.Stats
	for _, e := range c.h.Events {
		switch e.Kind {
		case evRun:
			runs[e.Period] = append(runs[e.Period], e)
			s.Runs++
		case evSkip:
			s.Skips++
		}
	}
	s.Periods = len(runs)
	periods := make([]int64, 0, len(runs))
	for p := range runs {
		periods = append(periods, p)
	}
	sort.Slice(periods, func(i, j int) bool { return periods[i] < periods[j] })
	for _, p := range periods {
		rs := runs[p]
		if len(rs) < 2 {
			continue
		}
		var who []string
		for _, e := range rs {
			who = append(who, fmt.Sprintf("%s (token %d)", e.Proc(), e.Token))
		}
		c.violate(Violation{Wall: rs[1].Wall, Proc: rs[1].Proc(), Token: rs[1].Token,
			Msg: fmt.Sprintf("the period starting %s ran %d times: by %s", time.Unix(p, 0).UTC().Format(time.RFC3339), len(rs), strings.Join(who, ", "))})
	}
	span := time.Duration(c.h.End - c.h.Start)
	return fmt.Sprintf("%d runs of %d periods (the run spanned %d periods of %v); %d periods tried and not run",
		s.Runs, s.Periods, int(span/max(c.h.Every, time.Second)), c.h.Every, s.Skips)
}
