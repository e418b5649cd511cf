package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/leasehold/leasehold/store"
)

// fleet is the lease groups of one run: they share the store, so a real
// store restart is made by one group at a time, reaches every group's
// proxies and is recorded in every group's history; and they count their
// faults together, for Config.UntilFaults.
type fleet struct {
	restartMu sync.Mutex // held for a real store restart
	until     int64
	injected  atomic.Int64

	mu sync.Mutex
	hs []*harness
}

func newFleet(until int) *fleet { return &fleet{until: int64(until)} }

func (fl *fleet) add(h *harness) {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	fl.hs = append(fl.hs, h)
}

func (fl *fleet) remove(h *harness) {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	fl.hs = slices.DeleteFunc(fl.hs, func(x *harness) bool { return x == h })
}

// enough reports whether the groups have injected UntilFaults faults.
func (fl *fleet) enough() bool { return fl.until > 0 && fl.injected.Load() >= fl.until }

// allProxies are the proxies of every group.
func (fl *fleet) allProxies() []*proxy {
	fl.mu.Lock()
	hs := append([]*harness(nil), fl.hs...)
	fl.mu.Unlock()
	var out []*proxy
	for _, h := range hs {
		out = append(out, h.allProxies()...)
	}
	return out
}

// echo records f, a store restart by group from, in every other group.
func (fl *fleet) echo(from *harness, f fault) {
	fl.mu.Lock()
	hs := append([]*harness(nil), fl.hs...)
	fl.mu.Unlock()
	for _, h := range hs {
		if h == from {
			continue
		}
		e := f
		e.Echo, e.Leader, e.Token = true, false, 0
		e.Detail = fmt.Sprintf("made by group %s: %s", from.group, f.Detail)
		h.mu.Lock()
		h.faults = append(h.faults, e)
		h.mu.Unlock()
	}
}

// groupSeed is the seed of group i (0-based) of a run with seed s: group 0
// keeps the run's seed, so a one-group run and the first group of a fleet
// draw the same schedule.
func groupSeed(s uint64, i int) uint64 {
	if i == 0 {
		return s
	}
	return s*0x9e3779b97f4a7c15 + uint64(i)*0xbf58476d1ce4e5b9
}

// runFleet runs c.Groups lease groups at once and adds up their outcomes.
func runFleet(ctx context.Context, c Config) (*Outcome, error) {
	dir := c.Dir
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "leasehold-chaos-"); err != nil {
			return nil, fmt.Errorf("leasehold/chaos: %w", err)
		}
	} else {
		if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
			return nil, fmt.Errorf("%w: the output directory %s is not empty; give each run its own", ErrInvalid, dir)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("leasehold/chaos: %w", err)
		}
	}
	u, desc, _, err := parseStoreURL(c.StoreURL, c.AllowRemote)
	if err != nil {
		return nil, err
	}
	local := desc.Reach == store.ReachLocal
	fl := newFleet(c.UntilFaults)
	outs := make([]*Outcome, c.Groups)
	errs := make([]error, c.Groups)
	var wg sync.WaitGroup
	for i := range c.Groups {
		gc := c
		gc.Groups = 1
		gc.Seed = groupSeed(c.Seed, i)
		gc.Dir = filepath.Join(dir, groupName(i))
		gc.FairGroups = 0
		if i >= c.Groups-c.FairGroups {
			gc.FairGroups = 1
		}
		if local {
			// A file store: each group its own file, beside the given one.
			// Groups on one file would share its lock, and a node frozen
			// inside a write would stall every group's renewals at once.
			gu := *u
			ext := filepath.Ext(gu.Path)
			gu.Path = strings.TrimSuffix(gu.Path, ext) + "-" + groupName(i) + ext
			gc.StoreURL = gu.String()
		}
		if c.StoreControl != nil && i > 0 {
			// The first group's schedule makes the real restarts (of the
			// one store every group uses); the others feel them.
			gc.Faults = slices.DeleteFunc(slices.Clone(c.Faults), func(k string) bool { return k == faultStoreRestart })
			if len(gc.Faults) == 0 {
				return nil, fmt.Errorf("%w: with --groups %d and a real store restart, the store restart cannot be the only fault: the other groups would have none of their own", ErrInvalid, c.Groups)
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[i], errs[i] = runGroup(ctx, gc, fl, groupName(i))
		}()
	}
	wg.Wait()
	return finishFleet(dir, c.Seed, outs, errs)
}

// finishFleet adds up the groups' outcomes (outs[i] and errs[i] are group
// i's) and writes the run's history, result and report. A group that
// failed is reported in the summary and the result with its error, and the
// run with it: its history, if it recorded one, is counted with the
// others'; one that recorded nothing adds only its error. The returned
// error names every group that failed.
func finishFleet(dir string, seed uint64, outs []*Outcome, errs []error) (*Outcome, error) {
	var failed []error
	var lost []GroupError // failed groups with no outcome to carry their error
	var done []*Outcome
	for i, o := range outs {
		g := groupName(i)
		if errs[i] != nil {
			failed = append(failed, fmt.Errorf("group %s: %w", g, errs[i]))
		}
		if o == nil {
			if errs[i] != nil {
				lost = append(lost, GroupError{Group: g, Error: errs[i].Error()})
			}
			continue
		}
		o.Group = g
		done = append(done, o)
	}
	if len(done) == 0 {
		return nil, errors.Join(failed...)
	}
	out := mergeOutcomes(dir, seed, done)
	out.History.Groups = len(outs)
	out.Result.GroupErrors = append(out.Result.GroupErrors, lost...)
	sort.Slice(out.Result.GroupErrors, func(i, j int) bool { return out.Result.GroupErrors[i].Group < out.Result.GroupErrors[j].Group })
	out.Summary = summaryLine(out.History, out.Result)
	if err := writeFleetOutputs(out); err != nil {
		return nil, errors.Join(append(failed, err)...)
	}
	return out, errors.Join(failed...)
}

func groupName(i int) string { return fmt.Sprintf("g%02d", i+1) }

// mergeOutcomes adds up the groups' outcomes: faults (each once), writes,
// terms, processes and failovers are summed, violations and errors listed
// with their group, and a check fails if it failed in any group. Each
// outcome's Group names it (groupName of its index if empty).
func mergeOutcomes(dir string, seed uint64, outs []*Outcome) *Outcome {
	first := outs[0].History
	h := &history{Store: first.Store, Seed: seed, Fenced: first.Fenced, BrokenStore: first.BrokenStore,
		Timings: first.Timings, Slack: first.Slack, Start: first.Start, End: first.End, Resources: first.Resources, Groups: len(outs),
		Mode: first.Mode, Lease: first.Lease, Slots: first.Slots, Every: first.Every}
	for _, o := range outs {
		h.FairGroups += o.History.FairGroups
	}
	labels := make([]string, len(outs))
	results := make([]*Result, len(outs))
	out := &Outcome{Dir: dir, Seed: seed, History: h, Groups: outs}
	for i, o := range outs {
		g := o.Group
		if g == "" {
			g = groupName(i)
		}
		labels[i], results[i] = g, o.Result
		gh := o.History
		h.Start, h.End = min(h.Start, gh.Start), max(h.End, gh.End)
		for _, f := range gh.Faults {
			if f.Echo {
				continue
			}
			if f.Target != "" && f.Target != "store" {
				f.Target = g + "/" + f.Target
			}
			h.Faults = append(h.Faults, f)
		}
		for _, e := range o.UnexpectedExits {
			out.UnexpectedExits = append(out.UnexpectedExits, g+": "+e)
		}
	}
	out.Result = mergeResults(labels, results, true)
	sort.Slice(h.Faults, func(i, j int) bool { return h.Faults[i].Start < h.Faults[j].Start })
	for _, o := range outs {
		out.Plan = append(out.Plan, o.Plan...)
	}
	out.Summary = summaryLine(h, out.Result)
	return out
}

// mergeResults adds up results, each labelled (a group, a semaphore's
// slot): faults, writes, terms, processes, failovers and runs are summed
// (the most live works at once is the most of any), violations listed with their label (and, if
// procs, their process named with it), and a check fails if it failed in
// any.
func mergeResults(labels []string, results []*Result, procs bool) *Result {
	res := &Result{}
	s := &res.Stats
	s.FaultsByKind = map[string]int{}
	s.FailoverBound = results[0].Stats.FailoverBound
	byName := map[string]*checkOutcome{}
	checked := map[string][]string{}
	lin := "Ok"
	for i, gr := range results {
		g := labels[i]
		gs := gr.Stats
		s.WritesAccepted += gs.WritesAccepted
		s.WritesRefused += gs.WritesRefused
		s.WritesUnknown += gs.WritesUnknown
		s.Reads += gs.Reads
		s.Terms += gs.Terms
		s.Processes += gs.Processes
		s.MaxLive = max(s.MaxLive, gs.MaxLive)
		s.Runs += gs.Runs
		s.Periods += gs.Periods
		s.Skips += gs.Skips
		for k, n := range gs.FaultsByKind {
			s.FaultsByKind[k] += n
		}
		s.Failovers = append(s.Failovers, gs.Failovers...)
		switch {
		case gs.Linearizable == "Illegal":
			lin = "Illegal"
		case gs.Linearizable != "Ok" && lin == "Ok":
			lin = gs.Linearizable
		}
		for _, ck := range gr.Checks {
			m := byName[ck.Name]
			if m == nil {
				m = &checkOutcome{Name: ck.Name, Title: ck.Title}
				byName[ck.Name] = m
				res.Checks = append(res.Checks, *m)
			}
			m.Violations += ck.Violations
			checked[ck.Name] = append(checked[ck.Name], g+": "+ck.Checked)
			if ck.Inconclusive != "" {
				m.Inconclusive = strings.TrimPrefix(m.Inconclusive+"; "+g+": "+ck.Inconclusive, "; ")
			}
		}
		for _, e := range gr.GroupErrors {
			if e.Group == "" {
				e.Group = g
			}
			res.GroupErrors = append(res.GroupErrors, e)
		}
		for _, v := range gr.Violations {
			if v.Proc != "" && procs {
				v.Proc = g + "/" + v.Proc
			}
			v.Msg = g + ": " + v.Msg
			res.Violations = append(res.Violations, v)
		}
	}
	for i := range res.Checks {
		m := byName[res.Checks[i].Name]
		m.Checked = strings.Join(checked[m.Name], "; ")
		res.Checks[i] = *m
	}
	s.Linearizable = lin
	sort.Slice(s.Failovers, func(i, j int) bool { return s.Failovers[i] < s.Failovers[j] })
	return res
}

// faultTotal is the number of faults a result counts.
func faultTotal(r *Result) int {
	n := 0
	for _, v := range r.Stats.FaultsByKind {
		n += v
	}
	return n
}
