package chaos

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// Bursts: reproducible, at most one fault per node and one store restart
// per burst, the faults of a burst overlapping, and each burst a quiet
// period after the previous one's last heal.
func TestPlanBurstsOverlapAndKeepQuietPeriods(t *testing.T) {
	pc := planConfig(11)
	pc.Overlap = 3
	pc.Span = 120 * time.Second
	a, err := planFaults(pc)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := planFaults(pc)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("the same seed gave two schedules")
	}
	one := planConfig(11)
	one.Span = 120 * time.Second
	single, _ := planFaults(one)
	if len(a) <= len(single) {
		t.Errorf("overlapping bursts gave %d faults, one at a time %d: no more volume", len(a), len(single))
	}
	quiet := failoverBound(testTimings(), time.Second)
	bursts := map[int][]Planned{}
	var order []int
	for _, p := range a {
		if _, ok := bursts[p.Burst]; !ok {
			order = append(order, p.Burst)
		}
		bursts[p.Burst] = append(bursts[p.Burst], p)
	}
	multi := 0
	var prevEnd time.Duration
	for i, id := range order {
		ps := bursts[id]
		nodes, restarts := map[int]bool{}, 0
		start, end := ps[0].At, time.Duration(0)
		for _, p := range ps {
			if p.Kind == faultStoreRestart {
				restarts++
			} else if nodes[p.Node] {
				t.Errorf("burst %d hits node %d twice: %v", id, p.Node, ps)
			} else {
				nodes[p.Node] = true
			}
			start = min(start, p.At)
			end = max(end, p.At+p.Duration)
			if p.At-ps[0].At > testTimings().LeaseDuration*3/4 {
				t.Errorf("burst %d: %v starts more than 3/4 lease after its first fault", id, p)
			}
		}
		if len(ps) > 3 || restarts > 1 {
			t.Errorf("burst %d = %v: more than 3 faults or 2 restarts", id, ps)
		}
		if len(ps) > 1 {
			multi++
		}
		if i > 0 && start < prevEnd+quiet {
			t.Errorf("burst %d starts at %v, within the quiet period after %v", id, start, prevEnd)
		}
		if end+quiet > pc.Span {
			t.Errorf("burst %d does not heal a quiet period before the end", id)
		}
		prevEnd = end
	}
	if multi == 0 {
		t.Error("no burst had more than one fault")
	}
}

// The failover check judges a run of overlapping faults from its last heal:
// a leader missing while a second fault still holds is no violation, a
// leader missing after the last heal is.
func TestFailoverJudgesOverlappingFaultsFromTheLastHeal(t *testing.T) {
	h := cleanHistory()
	f := h.Faults[0]
	bound := failoverBound(h.Timings, h.Slack)
	// A second fault overlapping the first, healing much later; the run
	// goes on long enough to judge it.
	g := fault{Kind: faultBlackhole, Target: "n2.1", Start: f.Start + int64(100*time.Millisecond), End: f.End + int64(3*bound)}
	h.Faults = append(h.Faults, g)
	h.End = g.End + int64(2*bound)
	eps := faultEpisodes(h.Faults, int64(bound))
	if len(eps) != 1 || eps[0].n != 2 || eps[0].end != g.End {
		t.Fatalf("episodes = %+v, want one of 2 faults ending at the second heal", eps)
	}
	r := checkHistory(h, checkOptions{})
	if violationsOf(r)[chkFailover] == 0 {
		t.Fatalf("no leader after the last heal, and failover found nothing: %v", violationsOf(r))
	}
	var msg string
	for _, v := range r.Violations {
		if v.Check == chkFailover {
			msg = v.Msg
		}
	}
	if !strings.Contains(msg, "the last of 2 overlapping faults") {
		t.Errorf("failover violation = %q", msg)
	}
	// The same run where a leader came back within the bound of the
	// last heal passes, though none did between the two heals.
	h.Events = append(h.Events, event{Kind: evRenewed, Node: "n2", Inc: 1, Wall: g.End + int64(bound/2), Token: 2})
	sortEvents(h.Events)
	if n := violationsOf(checkHistory(h, checkOptions{}))[chkFailover]; n != 0 {
		t.Errorf("a leader within the bound of the last heal: %d failover violations", n)
	}
}

// A fault another group made (an echo) is judged but not counted again.
func TestEchoedFaultsAreNotCountedTwice(t *testing.T) {
	h := cleanHistory()
	e := h.Faults[0]
	e.Kind, e.Target, e.Echo = faultStoreRestart, "store", true
	h.Faults = append(h.Faults, e)
	r := checkHistory(h, checkOptions{})
	if r.Stats.FaultsByKind[faultStoreRestart] != 0 || faultTotal(r) != 1 {
		t.Errorf("faults by kind = %v: the echo was counted", r.Stats.FaultsByKind)
	}
}

// Merging groups adds up their figures and names each violation's group.
func TestMergeOutcomesAddsUpGroups(t *testing.T) {
	mk := func(breakIt bool) *Outcome {
		h := cleanHistory()
		if breakIt {
			h.Register[0].Token = 99 // the register says it accepted a token nobody was granted
		}
		return &Outcome{History: h, Result: checkHistory(h, checkOptions{})}
	}
	good, bad := mk(false), mk(true)
	if bad.Result.OK() {
		t.Fatal("the broken history passed")
	}
	out := mergeOutcomes(t.TempDir(), 5, []*Outcome{good, bad})
	s, gs := out.Result.Stats, good.Result.Stats
	if s.WritesAccepted != gs.WritesAccepted+bad.Result.Stats.WritesAccepted || faultTotal(out.Result) != 2 || len(s.Failovers) != len(gs.Failovers)+len(bad.Result.Stats.Failovers) {
		t.Errorf("merged stats = %+v", s)
	}
	if out.Result.OK() || len(out.Result.Violations) != len(bad.Result.Violations) {
		t.Fatalf("merged violations = %v", out.Result.Violations)
	}
	for _, v := range out.Result.Violations {
		if !strings.HasPrefix(v.Msg, "g02: ") {
			t.Errorf("violation %q does not name its group", v.Msg)
		}
	}
	if !strings.Contains(out.Summary, "FAIL") || !strings.Contains(out.Summary, "2 groups") {
		t.Errorf("summary = %s", out.Summary)
	}
	if err := writeFleetOutputs(out); err != nil {
		t.Fatal(err)
	}
}

func TestReportDrawsVolumeCharts(t *testing.T) {
	h := cleanHistory()
	r := checkHistory(h, checkOptions{})
	var b strings.Builder
	writeVolume(&b, h, r)
	for _, want := range []string{`aria-label="faults per kind over time"`, `aria-label="failover distribution"`, "failover bound", "pause 1"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("volume charts lack %q", want)
		}
	}
}
