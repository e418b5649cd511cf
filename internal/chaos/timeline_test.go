package chaos

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// The timeline lives in the tests, not in the checker, so that it adds
// nothing to the leasehold binary (which links the checker for `leasehold
// verify` and is held under 35 MB by TestBinarySize).

// failoverTimeline is, for a failover violation of h (a leader late after
// the heal at v.Wall), what every process and fault did from one bound
// before the heal to the first leader after it (at most four bounds after
// it), so that a failure seen only in a CI log can be read without the
// history file, which the test's temporary directory does not keep. It is
// empty for any other violation.
func failoverTimeline(h *history, v Violation) string {
	if v.Check != chkFailover || v.Wall == 0 {
		return ""
	}
	bound := int64(h.failoverBound())
	until := v.Wall + 4*bound
	lead := leaderTimes(h)
	if i := sort.Search(len(lead), func(i int) bool { return lead[i] >= v.Wall }); i < len(lead) {
		until = min(lead[i], until)
	}
	return timeline(h, v.Wall-bound, until, v.Wall)
}

// maxTimelineLines bounds a timeline, so that a violation's detail stays
// readable in a test log.
const maxTimelineLines = 300

// timeline lists the faults and the events of every process (but their
// writes to the register) from from to until (wall ns), one line each, with times relative to zero: when, which
// process, what, and the event's fields that say why (the call, its token,
// error, latency).
func timeline(h *history, from, until, zero int64) string {
	type line struct {
		wall int64
		text string
	}
	var lines []line
	for _, f := range h.Faults {
		if f.End < from || f.Start > until {
			continue
		}
		lines = append(lines, line{f.Start, fmt.Sprintf("fault %s on %s, %v long", f.Kind, f.Target, time.Duration(f.End-f.Start).Round(time.Millisecond))})
	}
	for _, e := range h.Events {
		if e.Wall < from || e.Wall > until || e.Kind == evWriteCall || e.Kind == evWriteReturn {
			continue // the register's writes say nothing of who leads
		}
		var b strings.Builder
		fmt.Fprintf(&b, "%-6s %s", e.Proc(), e.Kind)
		if e.Call != "" {
			fmt.Fprintf(&b, " %s#%d", e.Call, e.Req)
		}
		if e.Lease != "" {
			fmt.Fprintf(&b, " lease=%s", e.Lease)
		}
		if e.Token != 0 {
			fmt.Fprintf(&b, " token=%d", e.Token)
		}
		if e.Latency != 0 {
			fmt.Fprintf(&b, " latency=%v", time.Duration(e.Latency).Round(time.Microsecond))
		}
		if e.Reason != "" {
			fmt.Fprintf(&b, " reason=%s", e.Reason)
		}
		if e.Err != "" {
			fmt.Fprintf(&b, " err=%q", e.Err)
		}
		if e.Detail != "" {
			fmt.Fprintf(&b, " %s", e.Detail)
		}
		if e.Kind == evStall {
			fmt.Fprintf(&b, " for %v", time.Duration(e.StallTo-e.StallFrom).Round(time.Millisecond))
		}
		lines = append(lines, line{e.Wall, b.String()})
	}
	sort.SliceStable(lines, func(i, j int) bool { return lines[i].wall < lines[j].wall })
	var b strings.Builder
	fmt.Fprintf(&b, "what happened from %v before to %v after it (ms from it):", time.Duration(zero-from).Round(time.Millisecond), time.Duration(until-zero).Round(time.Millisecond))
	for i, l := range lines {
		if i == maxTimelineLines {
			fmt.Fprintf(&b, "\n  ... %d more", len(lines)-i)
			break
		}
		fmt.Fprintf(&b, "\n  %+9.1f %s", float64(l.wall-zero)/1e6, l.text)
	}
	return b.String()
}

// failoverDigest sums up, a line per process, what each process of the
// violation's group asked the store and heard from the heal to the next
// leader (or four bounds on): its calls by kind and answer, and its last
// event. It is short enough for CI's summary of failures, which drops a
// timeline's lines.
func failoverDigest(h *history, v Violation) []string {
	if v.Check != chkFailover || v.Wall == 0 {
		return nil
	}
	until := v.Wall + 4*int64(h.failoverBound())
	lead := leaderTimes(h)
	if i := sort.Search(len(lead), func(i int) bool { return lead[i] >= v.Wall }); i < len(lead) {
		until = min(lead[i], until)
	}
	type proc struct {
		answers map[string]int // "call: answer"
		last    event
	}
	procs := map[string]*proc{}
	for _, e := range h.Events {
		if e.Wall < v.Wall || e.Wall > until || e.Kind == evWriteCall || e.Kind == evWriteReturn {
			continue
		}
		p := procs[e.Proc()]
		if p == nil {
			p = &proc{answers: map[string]int{}}
			procs[e.Proc()] = p
		}
		p.last = e
		if e.Kind != evAnswer {
			continue
		}
		ans := "ok"
		if e.Detail != "" { // an enqueue's places ahead
			ans = e.Detail
		}
		if e.Err != "" {
			ans = e.Err
			if len(ans) > 80 {
				ans = ans[:80] + "..."
			}
		}
		p.answers[e.Call+": "+ans]++
	}
	names := make([]string, 0, len(procs))
	for n := range procs {
		names = append(names, n)
	}
	sort.Strings(names)
	out := []string{fmt.Sprintf("from the heal to %v after it, each process's store answers and last event:", time.Duration(until-v.Wall).Round(time.Millisecond))}
	for _, n := range names {
		p := procs[n]
		kinds := make([]string, 0, len(p.answers))
		for k := range p.answers {
			kinds = append(kinds, k)
		}
		sort.Strings(kinds)
		var b strings.Builder
		fmt.Fprintf(&b, "%s:", n)
		for _, k := range kinds {
			fmt.Fprintf(&b, " [%s x%d]", k, p.answers[k])
		}
		fmt.Fprintf(&b, " last %s", strings.TrimSpace(p.last.Kind+" "+p.last.Call))
		fmt.Fprintf(&b, " at %+.1f ms", float64(p.last.Wall-v.Wall)/1e6)
		out = append(out, b.String())
	}
	if len(names) == 0 {
		out = append(out, "no process recorded anything")
	}
	return out
}
