package chaos

import (
	"fmt"
	"html"
	"io"
	"math"
	"sort"
	"strings"
	"time"
)

// percentile returns the q-quantile (0 < q <= 1) of sorted durations by the
// nearest-rank method, or 0 for none.
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	i = max(0, min(i, len(sorted)-1))
	return sorted[i]
}

// faultCounts is "pause 2, kill 1" in the order of AllFaults.
func faultCounts(by map[string]int) string {
	var parts []string
	total := 0
	for _, k := range AllFaults {
		if n := by[k]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", k, n))
			total += n
		}
	}
	if total == 0 {
		return "0"
	}
	return fmt.Sprintf("%d (%s)", total, strings.Join(parts, ", "))
}

func violationCounts(r *Result) string {
	var parts []string
	total := 0
	for _, c := range r.Checks {
		if c.Violations > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", c.Name, c.Violations))
			total += c.Violations
		}
	}
	if total == 0 {
		return "0"
	}
	return fmt.Sprintf("%d (%s)", total, strings.Join(parts, ", "))
}

func round(d time.Duration) string {
	switch {
	case d >= 10*time.Second:
		return d.Round(100 * time.Millisecond).String()
	case d >= time.Second:
		return d.Round(10 * time.Millisecond).String()
	default:
		return d.Round(time.Millisecond).String()
	}
}

// summaryLine is the one-line summary of a run: the verdict, faults by kind,
// writes accepted and refused, violations by check, failover p50/p99/max,
// and the linearizability verdict.
func summaryLine(h *history, r *Result) string {
	verdict := "PASS"
	if !r.OK() {
		verdict = "FAIL"
	}
	for _, c := range r.Checks {
		if c.Inconclusive != "" && r.OK() {
			verdict = "PASS (inconclusive: " + c.Name + ")"
		}
	}
	s := r.Stats
	fo := "none measured"
	if n := len(s.Failovers); n > 0 {
		fo = fmt.Sprintf("p50 %s p99 %s max %s (n=%d)", round(percentile(s.Failovers, 0.5)), round(percentile(s.Failovers, 0.99)), round(s.Failovers[n-1]), n)
	}
	fenced := ""
	if !h.Fenced {
		fenced = " UNFENCED"
	}
	if h.BrokenStore != "" {
		fenced += " BROKEN-STORE " + h.BrokenStore
	}
	groups := ""
	switch {
	case h.Groups > 1 && h.FairGroups > 0:
		groups = fmt.Sprintf("%d groups (%d fair), ", h.Groups, h.FairGroups)
	case h.Groups > 1:
		groups = fmt.Sprintf("%d groups, ", h.Groups)
	case h.FairGroups > 0:
		groups = "fair, "
	}
	mode := ""
	switch h.Mode {
	case ModeSemaphore:
		mode = fmt.Sprintf(" | semaphore of %d slots: at most %d live at once", h.Slots, s.MaxLive)
	case ModeSchedule:
		mode = fmt.Sprintf(" | schedule every %v: %d runs of %d periods, %d periods tried and not run", h.Every, s.Runs, s.Periods, s.Skips)
	}
	return fmt.Sprintf("leasehold verify: %s | %s%s seed %d | %s%d processes, %s | faults %s | writes %d accepted, %d refused, %d unknown | violations %s | failover %s | linearizable %s%s%s",
		verdict, h.Store, fenced, h.Seed, groups, s.Processes, round(time.Duration(h.End-h.Start)),
		faultCounts(s.FaultsByKind), s.WritesAccepted, s.WritesRefused, s.WritesUnknown,
		violationCounts(r), fo, s.Linearizable, mode, groupErrors(r.GroupErrors))
}

// groupErrors is the summary's part for groups that ended in an error:
// the first three with their errors (result.json has them all).
func groupErrors(es []GroupError) string {
	if len(es) == 0 {
		return ""
	}
	var b strings.Builder
	if len(es) == 1 && es[0].Group == "" {
		return " | run ended in an error: " + oneLine(es[0].Error)
	}
	if len(es) == 1 {
		b.WriteString(" | 1 group ended in an error: ")
	} else {
		fmt.Fprintf(&b, " | %d groups ended in an error: ", len(es))
	}
	for i, e := range es {
		if i == 3 {
			fmt.Fprintf(&b, "; and %d more (result.json lists them)", len(es)-3)
			break
		}
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%s: %s", e.Group, oneLine(e.Error))
	}
	return b.String()
}

// oneLine keeps an error to one line of the summary.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// term is one held term of one process, for the timeline.
type term struct {
	_ [0]func() // not comparable: spares the binary an equality function

	token      int64
	start, end int64
	// safe is when the holder's last safeUntil fell, in wall time (mapped
	// from its own clock at the event that set it); 0 if unknown.
	safe   int64
	reason string
	open   bool // no loss recorded: the process died or the run ended
}

type procRow struct {
	name        string
	identity    string
	holder      string
	start, end  int64
	terms       []term
	accepted    []int64
	refused     []event
	unknown     []event
	killed      bool
	clockDetail string
}

func buildRows(h *history) []*procRow {
	rows := map[string]*procRow{}
	var order []string
	ev := append([]event(nil), h.Events...)
	sortEvents(ev)
	open := map[string]*term{}
	for _, e := range ev {
		p := e.Proc()
		r := rows[p]
		if r == nil {
			r = &procRow{name: p, start: e.Wall}
			rows[p] = r
			order = append(order, p)
		}
		r.end = e.Wall
		switch e.Kind {
		case evStart:
			r.identity, r.holder, r.clockDetail = e.Identity, e.Holder, e.Detail
		case evAcquired:
			open[p] = &term{token: e.Token, start: e.Wall, open: true, safe: e.Wall + (e.SafeUntil - e.Clock)}
		case evRenewed:
			if t := open[p]; t != nil && t.token == e.Token && e.SafeUntil != 0 {
				t.safe = e.Wall + (e.SafeUntil - e.Clock)
			}
		case evLost:
			if t := open[p]; t != nil && t.token == e.Token {
				t.end, t.reason, t.open = e.Wall, e.Reason, false
				r.terms = append(r.terms, *t)
				delete(open, p)
			}
		case evWriteReturn:
			switch e.Result {
			case writeAccepted:
				r.accepted = append(r.accepted, e.Wall)
			case writeRefused:
				r.refused = append(r.refused, e)
			default:
				r.unknown = append(r.unknown, e)
			}
		}
	}
	for _, f := range h.Faults {
		if f.Kind == faultKill {
			if r := rows[f.Target]; r != nil {
				r.killed = true
				r.end = max(r.end, f.Start)
			}
		}
	}
	for p, t := range open {
		t.end = rows[p].end
		rows[p].terms = append(rows[p].terms, *t)
	}
	sort.SliceStable(order, func(i, j int) bool { return procLess(order[i], order[j]) })
	out := make([]*procRow, len(order))
	for i, p := range order {
		out[i] = rows[p]
	}
	return out
}

// procLess orders n1.1 < n1.2 < n1b.1 < n2.1 < n10.1.
func procLess(a, b string) bool {
	ka, kb := procKey(a), procKey(b)
	for i := range ka {
		if ka[i] != kb[i] {
			return ka[i] < kb[i]
		}
	}
	return a < b
}

func procKey(p string) [3]int {
	var n, inc int
	var twin int
	slot, incs, _ := strings.Cut(p, ".")
	if strings.HasSuffix(slot, "b") {
		twin = 1
		slot = strings.TrimSuffix(slot, "b")
	}
	fmt.Sscanf(strings.TrimPrefix(slot, "n"), "%d", &n)
	fmt.Sscanf(incs, "%d", &inc)
	return [3]int{n, twin, inc}
}

func tokenColor(tok int64) string {
	return fmt.Sprintf("hsl(%d,62%%,52%%)", (tok*67+200)%360)
}

var faultColors = map[string]string{
	faultPause:        "#3b6fd8",
	faultKill:         "#c0392b",
	faultBlackhole:    "#222222",
	faultReset:        "#e67e22",
	faultLatency:      "#f1c40f",
	faultStoreRestart: "#c0392b",
	faultClock:        "#8e44ad",
	faultTwin:         "#16a085",
}

// writeReport writes the self-contained HTML report of a run.
func writeReport(w io.Writer, h *history, r *Result) error {
	var b strings.Builder
	esc := html.EscapeString
	verdict, vclass := "PASS", "pass"
	if !r.OK() {
		verdict, vclass = "FAIL", "fail"
	}
	dur := time.Duration(h.End - h.Start)
	writeHead(&b)
	fmt.Fprintf(&b, "<h1><span class=\"badge %s\">%s</span>leasehold chaos report</h1>\n", vclass, verdict)
	fenced := "fenced register"
	if !h.Fenced {
		fenced = "<b>UNFENCED register (negative control: violations expected)</b>"
	}
	if h.BrokenStore != "" {
		fenced += " <b>BROKEN store " + html.EscapeString(h.BrokenStore) + " (negative control: violations expected)</b>"
	}
	t := h.Timings
	fmt.Fprintf(&b, "<p class=\"facts\">store <code>%s</code> · seed <code>%d</code> · %s · %s run · lease %v, renew deadline %v, renew interval %v, retry period %v, wind-down %v · failover bound %v</p>\n",
		esc(h.Store), h.Seed, fenced, round(dur), t.LeaseDuration, t.RenewDeadline, t.RenewInterval, t.RetryPeriod, t.WindDown, r.Stats.FailoverBound)
	fmt.Fprintf(&b, "<div class=\"summary\">%s</div>\n", esc(summaryLine(h, r)))
	writeGroupErrors(&b, r.GroupErrors)

	writeVolume(&b, h, r)

	b.WriteString("<h2>Timeline</h2>\n")
	writeTimeline(&b, h, r)

	b.WriteString("<h2>Checks</h2>\n<table><tr><th>check</th><th>property</th><th>examined</th><th class=\"num\">violations</th></tr>\n")
	for _, c := range r.Checks {
		cls, v := "ok", "0"
		switch {
		case c.Violations > 0:
			cls, v = "bad", fmt.Sprint(c.Violations)
		case c.Inconclusive != "":
			cls, v = "inc", "inconclusive: "+c.Inconclusive
		}
		fmt.Fprintf(&b, "<tr><td><code>%s</code></td><td>%s</td><td>%s</td><td class=\"num %s\">%s</td></tr>\n", esc(c.Name), esc(c.Title), esc(c.Checked), cls, esc(v))
	}
	b.WriteString("</table>\n")

	if len(r.Violations) > 0 {
		b.WriteString("<h2>Violations</h2>\n<table><tr><th>at</th><th>check</th><th>what</th></tr>\n")
		for _, v := range r.Violations {
			at := ""
			if v.Wall != 0 {
				at = fmt.Sprintf("%.3fs", float64(v.Wall-h.Start)/1e9)
			}
			fmt.Fprintf(&b, "<tr class=\"viol\"><td class=\"num\">%s</td><td><code>%s</code></td><td>%s</td></tr>\n", at, esc(v.Check), esc(v.Msg))
		}
		b.WriteString("</table>\n")
	}

	b.WriteString("<h2>Faults</h2>\n<table><tr><th class=\"num\">at</th><th>fault</th><th>target</th><th>detail</th><th class=\"num\">healed after</th><th class=\"num\">new term after</th><th class=\"num\">leader after heal</th></tr>\n")
	acq := acquiredTimes(h)
	for i, f := range h.Faults {
		who := f.Target
		if f.Leader {
			who += fmt.Sprintf(" (leader, token %d)", f.Token)
		}
		next := "–"
		limit := h.End
		if i+1 < len(h.Faults) {
			limit = h.Faults[i+1].Start
		}
		if f.Leader {
			for _, a := range acq {
				if a.Wall > f.Start && a.Wall <= limit && a.Token > f.Token {
					next = fmt.Sprintf("%s (token %d)", round(time.Duration(a.Wall-f.Start)), a.Token)
					break
				}
			}
		}
		detail := f.Detail
		if f.Err != "" {
			detail += " — error: " + f.Err
		}
		rec := "none recorded"
		if d, ok := recovery(h, f); ok {
			rec = round(d)
		}
		fmt.Fprintf(&b, "<tr><td class=\"num\">%.2fs</td><td><span style=\"color:%s\">■</span> %s</td><td>%s</td><td>%s</td><td class=\"num\">%s</td><td class=\"num\">%s</td><td class=\"num\">%s</td></tr>\n",
			float64(f.Start-h.Start)/1e9, faultColors[f.Kind], esc(f.Kind), esc(who), esc(detail), round(time.Duration(f.End-f.Start)), esc(next), rec)
	}
	b.WriteString("</table>\n")

	b.WriteString("<h2>Processes</h2>\n<table><tr><th>process</th><th>identity</th><th>holder</th><th>clock</th><th class=\"num\">terms</th><th class=\"num\">accepted</th><th class=\"num\">refused</th><th class=\"num\">unknown</th></tr>\n")
	for _, row := range buildRows(h) {
		fmt.Fprintf(&b, "<tr><td>%s</td><td>%s</td><td><code>%s</code></td><td>%s</td><td class=\"num\">%d</td><td class=\"num\">%d</td><td class=\"num\">%d</td><td class=\"num\">%d</td></tr>\n",
			esc(row.name), esc(row.identity), esc(row.holder), esc(row.clockDetail), len(row.terms), len(row.accepted), len(row.refused), len(row.unknown))
	}
	b.WriteString("</table>\n")
	b.WriteString(`<p class="note">How to read this: each row is one node process (slot.incarnation; a slot restarted after a kill gets a new row, a
"b" slot is a twin started with another node's identity). A coloured bar is a term the process held, labelled with its fencing token,
from its grant to the moment it stopped trusting it; the colour follows the token. A hatched end is time the holder spent past its own
safeUntil before it could notice: it was frozen (a pause), which is exactly when only the fence protects the resource. Shaded spans are the faults injected into that process;
a red band across every row is a store restart. Small ticks under a bar are writes the register accepted; red crosses are writes it refused
(a stale token: the fence at work); grey question marks are writes with no answer. A red vertical line marks a violation.
The histories (history-*.jsonl, history.json) and the checker's result (result.json) are next to this file.</p>
</body></html>
`)
	_, err := io.WriteString(w, b.String())
	return err
}

func acquiredTimes(h *history) []event {
	var out []event
	for _, e := range h.Events {
		if e.Kind == evAcquired {
			out = append(out, e)
		}
	}
	sortEvents(out)
	return out
}

func writeTimeline(b *strings.Builder, h *history, r *Result) {
	esc := html.EscapeString
	rows := buildRows(h)
	const (
		labelW = 96
		plotW  = 1080
		rowH   = 34
		barH   = 14
		top    = 26
	)
	storeRow := 0
	for _, f := range h.Faults {
		if f.Target == "store" {
			storeRow = 1
		}
	}
	height := top + (len(rows)+storeRow)*rowH + 34
	span := float64(h.End - h.Start)
	if span <= 0 {
		span = 1
	}
	x := func(wall int64) float64 {
		return labelW + plotW*float64(wall-h.Start)/span
	}
	fmt.Fprintf(b, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" role=\"img\" aria-label=\"timeline\">\n", labelW+plotW+20, height, labelW+plotW+20, height)
	b.WriteString(`<defs><pattern id="stale" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="6" height="6" fill="#fff"/><line x1="0" y1="0" x2="0" y2="6" stroke="#c8322b" stroke-width="2.2"/></pattern></defs>` + "\n")
	// Axis: a tick every 1, 2, 5, 10... seconds.
	secs := span / 1e9
	step := 1.0
	for _, s := range []float64{1, 2, 5, 10, 15, 30, 60, 120, 300, 600} {
		step = s
		if secs/s <= 14 {
			break
		}
	}
	axisY := top + (len(rows)+storeRow)*rowH + 6
	for s := 0.0; s <= secs; s += step {
		xx := labelW + plotW*s/secs
		fmt.Fprintf(b, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#eceff2\"/>\n", xx, top-6, xx, axisY)
		fmt.Fprintf(b, "<text x=\"%.1f\" y=\"%d\" font-size=\"11\" fill=\"#6b7680\" text-anchor=\"middle\">%gs</text>\n", xx, axisY+14, s)
	}
	fmt.Fprintf(b, "<text x=\"%d\" y=\"14\" font-size=\"11\" fill=\"#6b7680\">time since the run started →</text>\n", labelW)

	rowY := map[string]int{}
	y := top
	if storeRow == 1 {
		fmt.Fprintf(b, "<text x=\"4\" y=\"%d\" font-size=\"12\" fill=\"#3b444d\">store</text>\n", y+rowH/2+4)
		y += rowH
	}
	for _, row := range rows {
		rowY[row.name] = y
		label := row.name
		fmt.Fprintf(b, "<text x=\"4\" y=\"%d\" font-size=\"12\" fill=\"#3b444d\"><title>%s</title>%s</text>\n", y+rowH/2+4, esc(row.holder+" "+row.clockDetail), esc(label))
		mid := y + rowH/2
		fmt.Fprintf(b, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#c9d0d6\" stroke-width=\"1\"/>\n", x(row.start), mid, x(row.end), mid)
		if row.killed {
			fmt.Fprintf(b, "<text x=\"%.1f\" y=\"%d\" font-size=\"13\" fill=\"#c0392b\" text-anchor=\"middle\" font-weight=\"700\"><title>SIGKILL</title>✝</text>\n", x(row.end), mid+5)
		}
		y += rowH
	}
	// Fault spans, under the terms.
	for _, f := range h.Faults {
		col := faultColors[f.Kind]
		tip := esc(fmt.Sprintf("%s on %s at %.2fs: %s", f.Kind, f.Target, float64(f.Start-h.Start)/1e9, f.Detail))
		if f.Target == "store" {
			x0, x1 := x(f.Start), x(f.End)
			fmt.Fprintf(b, "<rect x=\"%.1f\" y=\"%d\" width=\"%.1f\" height=\"%d\" fill=\"%s\" opacity=\"0.12\"><title>%s</title></rect>\n", x0, top, math.Max(x1-x0, 2), (len(rows)+storeRow)*rowH, col, tip)
			fmt.Fprintf(b, "<rect x=\"%.1f\" y=\"%d\" width=\"%.1f\" height=\"%d\" fill=\"%s\" opacity=\"0.8\" rx=\"2\"><title>%s</title></rect>\n", x0, top+rowH/2-barH/2, math.Max(x1-x0, 2), barH, col, tip)
			fmt.Fprintf(b, "<text x=\"%.1f\" y=\"%d\" font-size=\"10.5\" fill=\"%s\">store restart</text>\n", math.Max(x1-x0, 2)+x0+4, top+rowH/2+4, col)
			continue
		}
		ry, ok := rowY[f.Target]
		if !ok {
			continue
		}
		x0, x1 := x(f.Start), x(f.End)
		switch f.Kind {
		case faultReset:
			fmt.Fprintf(b, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"%s\" stroke-width=\"3\"><title>%s</title></line>\n", x0, ry+2, x0, ry+rowH-2, col, tip)
		case faultKill:
			// The killed process's row ends with a cross; mark the downtime.
			fmt.Fprintf(b, "<rect x=\"%.1f\" y=\"%d\" width=\"%.1f\" height=\"%d\" fill=\"%s\" opacity=\"0.15\"><title>%s</title></rect>\n", x0, ry+2, math.Max(x1-x0, 2), rowH-4, col, tip)
		case faultTwin:
			fmt.Fprintf(b, "<rect x=\"%.1f\" y=\"%d\" width=\"%.1f\" height=\"%d\" fill=\"none\" stroke=\"%s\" stroke-dasharray=\"4 3\"><title>%s</title></rect>\n", x0, ry+2, math.Max(x1-x0, 2), rowH-4, col, tip)
			fmt.Fprintf(b, "<text x=\"%.1f\" y=\"%d\" font-size=\"9.5\" fill=\"%s\">twin</text>\n", x0+2, ry+10, col)
		default:
			fmt.Fprintf(b, "<rect x=\"%.1f\" y=\"%d\" width=\"%.1f\" height=\"%d\" fill=\"%s\" opacity=\"0.22\" rx=\"3\"><title>%s</title></rect>\n", x0, ry+2, math.Max(x1-x0, 2), rowH-4, col, tip)
			fmt.Fprintf(b, "<text x=\"%.1f\" y=\"%d\" font-size=\"9.5\" fill=\"%s\">%s</text>\n", x0+2, ry+10, col, esc(f.Kind))
		}
	}
	// Terms, writes.
	for _, row := range rows {
		ry := rowY[row.name]
		mid := ry + rowH/2
		for _, t := range row.terms {
			x0, x1 := x(t.start), x(t.end)
			tip := esc(fmt.Sprintf("%s token %d: %.2fs–%.2fs (%s)", row.name, t.token, float64(t.start-h.Start)/1e9, float64(t.end-h.Start)/1e9, orDefault(t.reason, "no loss recorded")))
			// Past its safeUntil a holder no longer trusts its term; if it
			// only noticed later, it was frozen: draw that part hatched.
			xs := x1
			if t.safe > t.start && t.safe+int64(50*time.Millisecond) < t.end {
				xs = x(t.safe)
				ftip := esc(fmt.Sprintf("%s token %d past its safeUntil (%.2fs) until it could notice (%.2fs)", row.name, t.token, float64(t.safe-h.Start)/1e9, float64(t.end-h.Start)/1e9))
				fmt.Fprintf(b, "<rect x=\"%.1f\" y=\"%d\" width=\"%.1f\" height=\"%d\" fill=\"url(#stale)\" stroke=\"%s\" stroke-width=\"1\" rx=\"3\"><title>%s</title></rect>\n", xs, mid-barH/2, math.Max(x1-xs, 1.5), barH, tokenColor(t.token), ftip)
			}
			wdt := math.Max(xs-x0, 1.5)
			fmt.Fprintf(b, "<rect x=\"%.1f\" y=\"%d\" width=\"%.1f\" height=\"%d\" fill=\"%s\" rx=\"3\"><title>%s</title></rect>\n", x0, mid-barH/2, wdt, barH, tokenColor(t.token), tip)
			if wdt > 22 {
				fmt.Fprintf(b, "<text x=\"%.1f\" y=\"%d\" font-size=\"10.5\" fill=\"#fff\" font-weight=\"600\" text-anchor=\"middle\">#%d</text>\n", x0+wdt/2, mid+4, t.token)
			}
		}
		// Accepted writes: one tick per pixel column that had any.
		seen := map[int]bool{}
		for _, w := range row.accepted {
			px := int(x(w))
			if seen[px] {
				continue
			}
			seen[px] = true
			fmt.Fprintf(b, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#1e9e5a\" stroke-width=\"1\"/>\n", px, mid+barH/2+1, px, mid+barH/2+4)
		}
		for _, e := range row.refused {
			xx := x(e.Wall)
			tip := esc(fmt.Sprintf("refused: %s wrote %s with token %d at %.3fs", row.name, e.Value, e.Token, float64(e.Wall-h.Start)/1e9))
			fmt.Fprintf(b, "<g stroke=\"#c8322b\" stroke-width=\"2\"><title>%s</title><line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\"/><line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\"/></g>\n",
				tip, xx-3.5, mid-barH/2-8, xx+3.5, mid-barH/2-1, xx-3.5, mid-barH/2-1, xx+3.5, mid-barH/2-8)
		}
		for _, e := range row.unknown {
			xx := x(e.Wall)
			tip := esc(fmt.Sprintf("no answer: %s wrote %s with token %d at %.3fs (%s)", row.name, e.Value, e.Token, float64(e.Wall-h.Start)/1e9, e.Err))
			fmt.Fprintf(b, "<text x=\"%.1f\" y=\"%d\" font-size=\"10\" fill=\"#7f8c8d\" text-anchor=\"middle\"><title>%s</title>?</text>\n", xx, mid-barH/2-1, tip)
		}
	}
	// Violations.
	for _, v := range r.Violations {
		if v.Wall == 0 {
			continue
		}
		xx := x(v.Wall)
		fmt.Fprintf(b, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#c8322b\" stroke-width=\"1.5\" stroke-dasharray=\"3 2\"><title>%s</title></line>\n",
			xx, top-8, xx, axisY, esc(v.Check+": "+v.Msg))
		if ry, ok := rowY[v.Proc]; ok {
			fmt.Fprintf(b, "<circle cx=\"%.1f\" cy=\"%d\" r=\"6\" fill=\"none\" stroke=\"#c8322b\" stroke-width=\"2.5\"><title>%s</title></circle>\n", xx, ry+rowH/2, esc(v.Check+": "+v.Msg))
		}
	}
	b.WriteString("</svg>\n")
	b.WriteString("<div class=\"legend\">")
	b.WriteString("<span><i style=\"background:" + tokenColor(3) + "\"></i>term (fencing token)</span>")
	b.WriteString("<span><i style=\"background:#1e9e5a;height:4px\"></i>accepted writes</span>")
	b.WriteString("<span><i style=\"background:repeating-linear-gradient(45deg,#c8322b 0 2px,#fff 2px 5px)\"></i>held past safeUntil (frozen)</span>")
	b.WriteString("<span style=\"color:#c8322b;font-weight:700\">✕</span><span>refused (stale token)</span>")
	b.WriteString("<span style=\"color:#7f8c8d\">?</span><span>no answer</span>")
	for _, k := range AllFaults {
		if r.Stats.FaultsByKind[k] > 0 {
			fmt.Fprintf(b, "<span><i style=\"background:%s;opacity:.5\"></i>%s</span>", faultColors[k], k)
		}
	}
	if len(r.Violations) > 0 {
		b.WriteString("<span style=\"color:#c8322b\">┊ violation</span>")
	}
	b.WriteString("</div>\n")
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// writeHead writes the report's HTML head and the opening of its body.
func writeHead(b *strings.Builder) {
	b.WriteString(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>leasehold chaos report</title>
<style>
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:24px 32px;color:#1d2329;background:#fff}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #e3e6ea;padding-bottom:4px}
.badge{display:inline-block;padding:2px 12px;border-radius:12px;font-weight:700;color:#fff;margin-right:8px;vertical-align:2px}
.pass{background:#1e9e5a}.fail{background:#c8322b}
.summary{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12.5px;background:#f5f7f9;border:1px solid #e3e6ea;border-radius:6px;padding:8px 10px;white-space:pre-wrap;word-break:break-word}
.facts{color:#55606b;margin:6px 0 0}
table{border-collapse:collapse;margin:4px 0}td,th{padding:4px 10px;border-bottom:1px solid #eceff2;text-align:left;vertical-align:top}
th{font-weight:600;color:#55606b;font-size:12.5px}
td.ok{color:#1e9e5a;font-weight:600}td.bad{color:#c8322b;font-weight:700}td.inc{color:#b07b00;font-weight:600}
.num{text-align:right;font-variant-numeric:tabular-nums}
.viol{color:#c8322b}
svg text{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif}
.legend span{display:inline-block;margin-right:16px;font-size:12.5px;color:#3b444d}
.legend i{display:inline-block;width:14px;height:10px;margin-right:5px;vertical-align:0;border-radius:2px}
.note{color:#55606b;font-size:12.5px;max-width:1100px}
</style></head><body>
`)
}

// writeGroupErrors lists the groups whose run ended in an error.
func writeGroupErrors(b *strings.Builder, es []GroupError) {
	if len(es) == 0 {
		return
	}
	b.WriteString("<h2>Groups that ended in an error</h2>\n<p class=\"note\">Each ran until its error; what it recorded until then is checked and counted above.</p>\n<table><tr><th>group</th><th>error</th></tr>\n")
	for _, e := range es {
		g := e.Group
		if g == "" {
			g = "the run"
		}
		fmt.Fprintf(b, "<tr class=\"viol\"><td>%s</td><td><pre>%s</pre></td></tr>\n", html.EscapeString(g), html.EscapeString(e.Error))
	}
	b.WriteString("</table>\n")
}
