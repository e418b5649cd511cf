package main

import (
	"fmt"
	"html"
	"math"
	"strings"
)

// chart draws the hand-off ("long after" and "right after") and failover
// distributions per library as strip plots on a log scale: one dot per
// sample, a bar at the median. It is plain SVG written here, from the
// run's samples.
func chart(r *Results) string {
	type panel struct {
		title string
		sc    string
		sub   func(store string) float64 // subtracted from each sample of a store (failover: its lease)
	}
	noSub := func(string) float64 { return 0 }
	panels := []panel{
		{"Hand-off, release long after the waiter started (ms, log scale)", scHandoff, noSub},
		{"Hand-off, release right after the waiter started (ms, log scale)", scEarly, noSub},
		{fmt.Sprintf("Crash failover: ms after the %v lease ran out (Kubernetes: its own lease), counted from the holder's last renewal (log scale)", fmtTick(r.FailoverLeaseMs)), scFailover, r.failoverLeaseMs},
	}
	const (
		width    = 980
		left     = 300
		right    = 30
		rowH     = 18
		panelGap = 56
	)
	var b strings.Builder
	y := 20
	type row struct {
		key string
		xs  []float64
	}
	var body strings.Builder
	for _, p := range panels {
		keys := r.keys(p.sc)
		if len(keys) == 0 {
			continue
		}
		sortKeys(keys)
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, k := range keys {
			st, _ := splitKey(k)
			for _, x := range r.get(p.sc, k) {
				if x -= p.sub(st); x > 0 {
					lo = math.Min(lo, x)
					hi = math.Max(hi, x)
				}
			}
		}
		if math.IsInf(lo, 0) {
			continue
		}
		lo = math.Pow(10, math.Floor(math.Log10(lo)))
		hi = math.Pow(10, math.Ceil(math.Log10(hi)))
		xpos := func(v float64) float64 {
			if v <= lo {
				v = lo
			}
			return left + (math.Log10(v)-math.Log10(lo))/(math.Log10(hi)-math.Log10(lo))*(width-left-right)
		}
		fmt.Fprintf(&body, `<text x="10" y="%d" font-size="14" font-weight="bold">%s</text>`+"\n", y+4, html.EscapeString(p.title))
		y += 14
		top := y
		bottom := y + rowH*len(keys)
		// Grid: decades.
		for d := lo; d <= hi*1.0001; d *= 10 {
			x := xpos(d)
			fmt.Fprintf(&body, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/>`+"\n", x, top, x, bottom)
			fmt.Fprintf(&body, `<text x="%.1f" y="%d" font-size="10" text-anchor="middle" fill="#555">%s</text>`+"\n", x, bottom+12, fmtTick(d))
			for m := 2; m < 10 && d*float64(m) < hi; m++ {
				xm := xpos(d * float64(m))
				fmt.Fprintf(&body, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#f2f2f2"/>`+"\n", xm, top, xm, bottom)
			}
		}
		for i, k := range keys {
			s, n := splitKey(k)
			cy := top + i*rowH + rowH/2
			if i%2 == 0 {
				fmt.Fprintf(&body, `<rect x="%d" y="%d" width="%d" height="%d" fill="#000" fill-opacity="0.03"/>`+"\n", 10, top+i*rowH, width-20, rowH)
			}
			color := "#888"
			weight := "normal"
			switch {
			case isLeasehold(n):
				color, weight = "#1a7f37", "bold"
			case n == floorName:
				color = "#555"
			default:
				color = "#c2410c"
			}
			fmt.Fprintf(&body, `<text x="%d" y="%d" font-size="12" text-anchor="end" font-weight="%s" fill="%s">%s</text>`+"\n", left-10, cy+4, weight, color, html.EscapeString(s+" / "+n))
			var xs []float64
			for _, x := range r.get(p.sc, k) {
				xs = append(xs, x-p.sub(s))
			}
			for j, x := range xs {
				jit := float64((j*7)%9-4) * 1.2
				fmt.Fprintf(&body, `<circle cx="%.1f" cy="%.1f" r="2.6" fill="%s" fill-opacity="0.55"/>`+"\n", xpos(x), float64(cy)+jit, color)
			}
			m := median(xs)
			fmt.Fprintf(&body, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#000" stroke-width="2"/>`+"\n", xpos(m), cy-7, xpos(m), cy+7)
			fmt.Fprintf(&body, `<text x="%.1f" y="%d" font-size="9" fill="#000">%s</text>`+"\n", xpos(m)+4, cy-3, fmtMs(m))
		}
		y = bottom + panelGap
	}
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="DejaVu Sans, Helvetica, Arial, sans-serif">`+"\n", width, y, width, y)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="#fff"/>`+"\n")
	b.WriteString(body.String())
	fmt.Fprintf(&b, `<text x="10" y="%d" font-size="10" fill="#555">One dot per sample, bar at the median (values below the axis are drawn at its left end). Green: leasehold; orange: peer libraries; grey: the store's floor (bare primitives). Run started %s.</text>`+"\n", y-20, html.EscapeString(r.Started))
	b.WriteString("</svg>\n")
	return b.String()
}

func fmtTick(v float64) string {
	switch {
	case v >= 1000:
		return fmt.Sprintf("%gs", v/1000)
	case v >= 1:
		return fmt.Sprintf("%gms", v)
	default:
		return fmt.Sprintf("%gµs", v*1000)
	}
}
