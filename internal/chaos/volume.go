package chaos

import (
	"fmt"
	"html"
	"io"
	"strings"
	"time"
)

// volumeColors tell the fault kinds apart in the volume chart.
var volumeColors = map[string]string{
	faultPause:        "#3b6fd8",
	faultKill:         "#c0392b",
	faultBlackhole:    "#222222",
	faultReset:        "#e67e22",
	faultLatency:      "#e0b400",
	faultStoreRestart: "#7f8c8d",
	faultClock:        "#8e44ad",
	faultTwin:         "#16a085",
}

// writeVolume draws two charts: the faults injected per kind over time
// (stacked bars, one per time bucket), and the failover distribution (a
// histogram of the time from a fault that hit the leader to the grant of a
// newer term, with the failover bound marked).
func writeVolume(b *strings.Builder, h *history, r *Result) {
	var faults []fault
	for _, f := range h.Faults {
		if !f.Echo {
			faults = append(faults, f)
		}
	}
	if len(faults) == 0 {
		return
	}
	b.WriteString("<h2>Faults over time</h2>\n")
	span := max(h.End-h.Start, 1)
	const W, H, left, bottom = 1000, 170, 44, 26
	buckets := min(60, max(10, len(faults)/4))
	width := float64(span) / float64(buckets)
	counts := make([]map[string]int, buckets)
	top := 1
	for i := range counts {
		counts[i] = map[string]int{}
	}
	kinds := map[string]bool{}
	for _, f := range faults {
		i := min(buckets-1, max(0, int(float64(f.Start-h.Start)/width)))
		counts[i][f.Kind]++
		kinds[f.Kind] = true
		n := 0
		for _, v := range counts[i] {
			n += v
		}
		top = max(top, n)
	}
	bw := float64(W-left-10) / float64(buckets)
	fmt.Fprintf(b, `<svg width="%d" height="%d" viewBox="0 0 %d %d" role="img" aria-label="faults per kind over time">`+"\n", W, H+bottom, W, H+bottom)
	for _, frac := range []float64{0, 0.5, 1} {
		y := float64(H) - frac*float64(H-10)
		fmt.Fprintf(b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#e3e6ea"/><text x="%d" y="%.1f" font-size="11" text-anchor="end" fill="#55606b">%.0f</text>`+"\n",
			left, W-10, y, y, left-6, y+4, frac*float64(top))
	}
	for i, c := range counts {
		y := float64(H)
		for _, k := range AllFaults {
			n := c[k]
			if n == 0 {
				continue
			}
			hgt := float64(n) / float64(top) * float64(H-10)
			y -= hgt
			fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s: %d in %.1fs–%.1fs</title></rect>`+"\n",
				float64(left)+float64(i)*bw+1, y, max(bw-2, 1), hgt, volumeColors[k], k, n, float64(i)*width/1e9, float64(i+1)*width/1e9)
		}
	}
	for _, frac := range []float64{0, 0.25, 0.5, 0.75, 1} {
		x := float64(left) + frac*float64(W-left-10)
		fmt.Fprintf(b, `<text x="%.1f" y="%d" font-size="11" text-anchor="%s" fill="#55606b">%s</text>`+"\n", x, H+16, anchor(frac), round(time.Duration(frac*float64(span))))
	}
	b.WriteString("</svg>\n<p class=\"legend\">")
	for _, k := range AllFaults {
		if kinds[k] {
			fmt.Fprintf(b, `<span><i style="background:%s"></i>%s %d</span>`, volumeColors[k], k, r.Stats.FaultsByKind[k])
		}
	}
	fmt.Fprintf(b, "</p>\n<p class=\"note\">%d faults injected in %s, stacked by kind per %s bucket of the run.</p>\n", len(faults), round(time.Duration(span)), round(time.Duration(width)))

	fo := r.Stats.Failovers
	b.WriteString("<h2>Failover distribution</h2>\n")
	if len(fo) == 0 {
		b.WriteString("<p class=\"note\">No fault hit a leader and was followed by a newer term: no failover measured.</p>\n")
		return
	}
	bound := r.Stats.FailoverBound
	hi := max(fo[len(fo)-1], bound)
	const bins = 40
	bin := float64(hi) / bins * 1.02
	hist := make([]int, bins)
	most := 1
	for _, d := range fo {
		i := min(bins-1, int(float64(d)/bin))
		hist[i]++
		most = max(most, hist[i])
	}
	fbw := float64(W-left-10) / bins
	fmt.Fprintf(b, `<svg width="%d" height="%d" viewBox="0 0 %d %d" role="img" aria-label="failover distribution">`+"\n", W, H+bottom, W, H+bottom)
	for _, frac := range []float64{0, 0.5, 1} {
		y := float64(H) - frac*float64(H-10)
		fmt.Fprintf(b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#e3e6ea"/><text x="%d" y="%.1f" font-size="11" text-anchor="end" fill="#55606b">%.0f</text>`+"\n",
			left, W-10, y, y, left-6, y+4, frac*float64(most))
	}
	for i, n := range hist {
		if n == 0 {
			continue
		}
		hgt := float64(n) / float64(most) * float64(H-10)
		fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#1e9e5a"><title>%d failovers in %s–%s</title></rect>`+"\n",
			float64(left)+float64(i)*fbw+1, float64(H)-hgt, max(fbw-2, 1), hgt, n, round(time.Duration(float64(i)*bin)), round(time.Duration(float64(i+1)*bin)))
	}
	bx := float64(left) + float64(bound)/bin*fbw
	fmt.Fprintf(b, `<line x1="%.1f" x2="%.1f" y1="6" y2="%d" stroke="#c8322b" stroke-dasharray="4 3"/><text x="%.1f" y="14" font-size="11" fill="#c8322b" text-anchor="end">failover bound %s </text>`+"\n", bx, bx, H, bx-3, round(bound))
	for _, frac := range []float64{0, 0.25, 0.5, 0.75, 1} {
		x := float64(left) + frac*float64(W-left-10)
		fmt.Fprintf(b, `<text x="%.1f" y="%d" font-size="11" text-anchor="%s" fill="#55606b">%s</text>`+"\n", x, H+16, anchor(frac), round(time.Duration(frac*bins*bin)))
	}
	n := len(fo)
	fmt.Fprintf(b, "</svg>\n<p class=\"note\">%d faults that hit the leader, from the fault's start to the grant of a newer term: p50 %s, p90 %s, p99 %s, max %s. The dashed line is the failover bound the <code>failover</code> check holds each heal to (it is measured from the heal, not the start).</p>\n",
		n, round(percentile(fo, 0.5)), round(percentile(fo, 0.9)), round(percentile(fo, 0.99)), round(fo[n-1]))
}

// writeFleetOutputs writes the merged history (the faults of every group),
// the merged result and the fleet's report, which links each group's own.
func writeFleetOutputs(out *Outcome) error {
	return writeOutputs(out.Dir, out, func(w io.Writer) error { return writeFleetReport(w, out) })
}

func writeFleetReport(w io.Writer, out *Outcome) error {
	var b strings.Builder
	esc := html.EscapeString
	h, r := out.History, out.Result
	writeHead(&b)
	verdict, vclass := "PASS", "pass"
	if !r.OK() {
		verdict, vclass = "FAIL", "fail"
	}
	fmt.Fprintf(&b, "<h1><span class=\"badge %s\">%s</span>leasehold chaos report: %d lease groups</h1>\n", vclass, verdict, h.Groups)
	t := h.Timings
	fmt.Fprintf(&b, "<p class=\"facts\">store <code>%s</code> · seed <code>%d</code> · %d groups, each its own nodes, lease, register and fault schedule · %s run · lease %v · failover bound %v</p>\n",
		esc(h.Store), h.Seed, h.Groups, round(time.Duration(h.End-h.Start)), t.LeaseDuration, r.Stats.FailoverBound)
	fmt.Fprintf(&b, "<div class=\"summary\">%s</div>\n", esc(out.Summary))
	writeGroupErrors(&b, r.GroupErrors)
	writeVolume(&b, h, r)
	b.WriteString("<h2>Checks (every group)</h2>\n<table><tr><th>check</th><th>property</th><th class=\"num\">violations</th></tr>\n")
	for _, c := range r.Checks {
		cls, v := "ok", "0"
		switch {
		case c.Violations > 0:
			cls, v = "bad", fmt.Sprint(c.Violations)
		case c.Inconclusive != "":
			cls, v = "inc", "inconclusive: "+c.Inconclusive
		}
		fmt.Fprintf(&b, "<tr><td><code>%s</code></td><td>%s</td><td class=\"num %s\">%s</td></tr>\n", esc(c.Name), esc(c.Title), cls, esc(v))
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
	b.WriteString("<h2>Groups</h2>\n<table><tr><th>group</th><th class=\"num\">seed</th><th>faults</th><th class=\"num\">accepted</th><th class=\"num\">refused</th><th class=\"num\">violations</th><th>report</th></tr>\n")
	for i, g := range out.Groups {
		s := g.Result.Stats
		name := g.Group
		if name == "" {
			name = groupName(i)
		}
		fmt.Fprintf(&b, "<tr><td>%s</td><td class=\"num\">%d</td><td>%s</td><td class=\"num\">%d</td><td class=\"num\">%d</td><td class=\"num\">%d</td><td><a href=\"%s/report.html\">%s/report.html</a></td></tr>\n",
			name, g.Seed, esc(faultCounts(s.FaultsByKind)), s.WritesAccepted, s.WritesRefused, len(g.Result.Violations), name, name)
	}
	b.WriteString("</table>\n<p class=\"note\">Each group's report has its timeline, faults and processes. A real store restart, made by the first group's schedule, hits every group and is counted once.</p>\n</body></html>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// anchor keeps an axis label inside the chart: the last one ends at its tick.
func anchor(frac float64) string {
	if frac >= 1 {
		return "end"
	}
	return "middle"
}
