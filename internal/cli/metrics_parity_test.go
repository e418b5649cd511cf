package cli

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/leasestats"
	"github.com/leasehold/leasehold/promlease"
	"github.com/leasehold/leasehold/store"
)

// The command writes /metrics itself (leasestats.WriteText), without the
// Prometheus client. These tests hold it to the client: the same families
// give the same bytes as expfmt, and the command shows the series a service
// with promlease and a command-starts counter in a registry shows.

// parityEvents are events of two leases, one of them with a name that needs
// escaping, covering every family.
func parityEvents(now time.Time) []leasehold.Event {
	var evs []leasehold.Event
	for _, name := range []string{"web", "odd\"na\\me\nx"} {
		term := store.Term{Name: name, Holder: "h", Token: 1733480000123456}
		evs = append(evs,
			leasehold.Event{Kind: leasehold.EventAcquireAttempt, Name: name, Err: fmt.Errorf("x: %w", store.ErrHeld)},
			leasehold.Event{Kind: leasehold.EventAcquireAttempt, Name: name, Err: errors.New("timeout")},
			leasehold.Event{Kind: leasehold.EventAcquireAttempt, Name: name, Err: fmt.Errorf("x: %w", store.ErrQueued)},
			leasehold.Event{Kind: leasehold.EventAcquireAttempt, Name: name, Term: term},
			leasehold.Event{Kind: leasehold.EventAcquired, Name: name, Term: term, SafeUntil: now.Add(time.Hour)},
			leasehold.Event{Kind: leasehold.EventRenewed, Name: name, Term: term, SafeUntil: now.Add(time.Hour), Latency: 3 * time.Millisecond},
			leasehold.Event{Kind: leasehold.EventRenewed, Name: name, Term: term, SafeUntil: now.Add(time.Hour), Latency: 2500 * time.Microsecond},
			leasehold.Event{Kind: leasehold.EventRenewed, Name: name, Term: term, SafeUntil: now.Add(time.Hour), Latency: 30 * time.Second},
			leasehold.Event{Kind: leasehold.EventRenewFailed, Name: name, Term: term, Err: errors.New("timeout")},
		)
		if name == "web" {
			evs = append(evs,
				leasehold.Event{Kind: leasehold.EventLost, Name: name, Term: term, Err: leasehold.ErrSafeUntilPassed},
				leasehold.Event{Kind: leasehold.EventReleased, Name: name, Term: term, Err: errors.New("timeout")},
			)
		}
	}
	return evs
}

// expfmtText is what the Prometheus client writes for families.
func expfmtText(t *testing.T, fams []*dto.MetricFamily) string {
	t.Helper()
	var b bytes.Buffer
	for _, f := range fams {
		if _, err := expfmt.MetricFamilyToText(&b, f); err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}

// fromDTO turns gathered families into WriteText's input, label names and
// all, so that the writer alone is compared.
func fromDTO(fams []*dto.MetricFamily) []leasestats.FamilySamples {
	var out []leasestats.FamilySamples
	for _, f := range fams {
		fs := leasestats.FamilySamples{Family: leasestats.Family{Name: f.GetName(), Help: f.GetHelp()}}
		switch f.GetType() {
		case dto.MetricType_COUNTER:
			fs.Kind = leasestats.Counter
		case dto.MetricType_HISTOGRAM:
			fs.Kind = leasestats.Histogram
		}
		for i, m := range f.Metric {
			var s leasestats.Sample
			for _, l := range m.Label {
				if i == 0 {
					fs.Labels = append(fs.Labels, l.GetName())
				}
				s.Labels = append(s.Labels, l.GetValue())
			}
			switch {
			case m.Counter != nil:
				s.Value = m.Counter.GetValue()
			case m.Gauge != nil:
				s.Value = m.Gauge.GetValue()
			case m.Histogram != nil:
				s.Count, s.Sum = m.Histogram.GetSampleCount(), m.Histogram.GetSampleSum()
				for _, b := range m.Histogram.Bucket {
					s.Bounds = append(s.Bounds, b.GetUpperBound())
					s.Counts = append(s.Counts, b.GetCumulativeCount())
				}
			}
			fs.Samples = append(fs.Samples, s)
		}
		out = append(out, fs)
	}
	return out
}

// TestWriteTextIsExpfmt: for the same families, the command's writer gives
// expfmt's bytes: a registry with promlease and every kind of family, with
// label values and help that need escaping, a const label, a family without
// labels, and a histogram whose last bound is +Inf (which must not be
// written twice).
func TestWriteTextIsExpfmt(t *testing.T) {
	m := promlease.New(promlease.Options{ConstLabels: prometheus.Labels{"zone": "a\\b"}})
	for _, ev := range parityEvents(leasehold.SystemClock().Now()) {
		m.Observe(ev)
	}
	odd := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "odd_seconds", Help: "Help with a \\ and a\nnewline.", Buckets: []float64{0.5, math.Inf(+1)},
	}, []string{"k"})
	odd.WithLabelValues(`q"uo\te`).Observe(0.25)
	odd.WithLabelValues(`q"uo\te`).Observe(7)
	plain := prometheus.NewGauge(prometheus.GaugeOpts{Name: "unlabelled", Help: "No labels."})
	plain.Set(-1)
	reg := prometheus.NewRegistry()
	reg.MustRegister(m, odd, plain)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	// The client drops a histogram's +Inf bound, which is implicit; a
	// family gathered from elsewhere may carry it, and it is not written
	// twice.
	inf, half, two, one, sum := math.Inf(+1), 0.5, uint64(2), uint64(1), 7.25
	histogram := dto.MetricType_HISTOGRAM
	explicitInf, help := "explicit_inf_seconds", "A histogram whose last bound is +Inf."
	fams = append(fams, &dto.MetricFamily{Name: &explicitInf, Help: &help, Type: &histogram, Metric: []*dto.Metric{{
		Histogram: &dto.Histogram{SampleCount: &two, SampleSum: &sum, Bucket: []*dto.Bucket{
			{UpperBound: &half, CumulativeCount: &one}, {UpperBound: &inf, CumulativeCount: &two},
		}},
	}}})
	want := expfmtText(t, fams)
	var got bytes.Buffer
	if err := leasestats.WriteText(&got, fromDTO(fams)); err != nil {
		t.Fatal(err)
	}
	if got.String() != want {
		t.Errorf("WriteText differs from expfmt:\n%s", lineDiff(got.String(), want))
	}
	if strings.Count(want, `odd_seconds_bucket{k="q\"uo\\te",le="+Inf"}`) != 1 || strings.Count(want, `explicit_inf_seconds_bucket{le="+Inf"} 2`) != 1 {
		t.Errorf("the test's families lack what they are meant to cover:\n%s", want)
	}
}

// TestMetricsMatchPromlease: fed the same events, the command's /metrics
// shows what a registry holding promlease and the command-starts counter
// shows, line for line. The safe-until gauges are read at two instants and
// may differ by the time between the reads; every other line is equal.
func TestMetricsMatchPromlease(t *testing.T) {
	evs := parityEvents(leasehold.SystemClock().Now())
	cmd := newMetrics("web", "web", "odd\"na\\me\nx")
	lib := promlease.New(promlease.Options{})
	lib.Track("web")
	lib.Track("odd\"na\\me\nx")
	starts := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "leasehold_command_starts_total", Help: "Times the supervised command was started.",
		ConstLabels: prometheus.Labels{"lease": "web"},
	})
	for _, ev := range evs {
		cmd.observe(ev)
		lib.Observe(ev)
	}
	cmd.childStarted()
	starts.Inc()
	reg := prometheus.NewRegistry()
	reg.MustRegister(lib, starts)
	start := time.Now()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := expfmtText(t, fams)
	var got bytes.Buffer
	if err := leasestats.WriteText(&got, cmd.families()); err != nil {
		t.Fatal(err)
	}
	// The two reads of the safe-until gauges came at most this far apart
	// (CI once saw 2 ms under load), plus the text's rounding.
	apart := time.Since(start).Seconds() + 0.0015
	gl, wl := strings.Split(got.String(), "\n"), strings.Split(want, "\n")
	if len(gl) != len(wl) {
		t.Fatalf("the command shows %d lines, the client %d:\n%s", len(gl), len(wl), lineDiff(got.String(), want))
	}
	for i := range gl {
		if gl[i] == wl[i] {
			continue
		}
		g, w := strings.LastIndexByte(gl[i], ' '), strings.LastIndexByte(wl[i], ' ')
		gv, gerr := strconv.ParseFloat(gl[i][g+1:], 64)
		wv, werr := strconv.ParseFloat(wl[i][w+1:], 64)
		if !strings.HasPrefix(gl[i], "leasehold_safe_until_") || gl[i][:g] != wl[i][:w] || gerr != nil || werr != nil || math.Abs(gv-wv) > apart {
			t.Errorf("line %d: the command shows\n\t%s\nthe client\n\t%s", i+1, gl[i], wl[i])
		}
	}
	if !strings.Contains(want, `leasehold_acquire_attempts_total{lease="odd\"na\\me\nx",result="queued"} 1`) {
		t.Errorf("the client's text lacks a series the events make:\n%s", want)
	}
}

// lineDiff shows the lines of got and want that differ.
func lineDiff(got, want string) string {
	gl, wl := strings.Split(got, "\n"), strings.Split(want, "\n")
	var b strings.Builder
	for i := range max(len(gl), len(wl)) {
		var g, w string
		if i < len(gl) {
			g = gl[i]
		}
		if i < len(wl) {
			w = wl[i]
		}
		if g != w {
			fmt.Fprintf(&b, "line %d:\n\tgot  %q\n\twant %q\n", i+1, g, w)
		}
	}
	return b.String()
}
