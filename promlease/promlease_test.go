package promlease_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/promlease"
	"github.com/leasehold/leasehold/store"
)

// fixedClock is a holder clock that reads a set time.
type fixedClock struct{ now time.Time }

func (c *fixedClock) Now() time.Time                         { return c.now }
func (c *fixedClock) NewTimer(time.Duration) leasehold.Timer { panic("not used") }

// gather returns the value of every series, keyed name{labels} with labels
// sorted and lease left out when it is "web".
func gather(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range fams {
		for _, m := range f.Metric {
			var ls []string
			for _, l := range m.Label {
				if l.GetName() == "lease" && l.GetValue() == "web" {
					continue
				}
				ls = append(ls, l.GetName()+"="+l.GetValue())
			}
			key := f.GetName() + "{" + strings.Join(ls, ",") + "}"
			switch f.GetType() {
			case dto.MetricType_GAUGE:
				out[key] = m.Gauge.GetValue()
			case dto.MetricType_COUNTER:
				out[key] = m.Counter.GetValue()
			case dto.MetricType_HISTOGRAM:
				out[f.GetName()+"_count{"+strings.Join(ls, ",")+"}"] = float64(m.Histogram.GetSampleCount())
				out[f.GetName()+"_sum{"+strings.Join(ls, ",")+"}"] = m.Histogram.GetSampleSum()
			}
		}
	}
	return out
}

func TestObserve(t *testing.T) {
	clock := &fixedClock{now: time.Now()}
	m := promlease.New(promlease.Options{Clock: clock})
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)

	term := store.Term{Name: "web", Holder: "a", Token: 7}
	timeout := errors.New("i/o timeout")
	for _, ev := range []leasehold.Event{
		{Kind: leasehold.EventAcquireAttempt, Name: "web", Err: errors.Join(store.ErrHeld)},
		{Kind: leasehold.EventAcquireAttempt, Name: "web", Err: timeout},
		// A fair acquire with others ahead: counted as queued, no store error.
		{Kind: leasehold.EventAcquireAttempt, Name: "web", Err: fmt.Errorf("places ahead: %w", store.ErrQueued)},
		{Kind: leasehold.EventAcquireAttempt, Name: "web", Term: term},
		{Kind: leasehold.EventAcquired, Name: "web", Term: term, SafeUntil: clock.now.Add(2 * time.Second)},
		{Kind: leasehold.EventRenewed, Name: "web", Term: term, SafeUntil: clock.now.Add(9500 * time.Millisecond), Latency: 3 * time.Millisecond},
		{Kind: leasehold.EventRenewFailed, Name: "web", Term: term, Err: timeout},
	} {
		m.Observe(ev)
	}
	got := gather(t, reg)
	want := map[string]float64{
		"leasehold_is_leader{}":                            1,
		"leasehold_token{}":                                7,
		"leasehold_safe_until_remaining_seconds{}":         9.5,
		"leasehold_terms_started_total{}":                  1,
		"leasehold_terms_ended_total{reason=expired}":      0,
		"leasehold_acquire_attempts_total{result=granted}": 1,
		"leasehold_acquire_attempts_total{result=held}":    1,
		"leasehold_acquire_attempts_total{result=queued}":  1,
		"leasehold_acquire_attempts_total{result=error}":   1,
		"leasehold_renew_failures_total{}":                 1,
		"leasehold_renew_latency_seconds_count{}":          1,
		"leasehold_renew_latency_seconds_sum{}":            0.003,
		"leasehold_store_errors_total{op=acquire}":         1,
		"leasehold_store_errors_total{op=renew}":           1,
		"leasehold_store_errors_total{op=release}":         0,
	}
	check(t, got, want)
	at := got["leasehold_safe_until_timestamp_seconds{}"]
	if wantAt := float64(time.Now().Add(9500*time.Millisecond).UnixNano()) / 1e9; math.Abs(at-wantAt) > 1 {
		t.Errorf("leasehold_safe_until_timestamp_seconds = %v, want about %v", at, wantAt)
	}

	// The term ends: the gauges drop to 0 and the end is counted by reason.
	m.Observe(leasehold.Event{Kind: leasehold.EventLost, Name: "web", Term: term, Err: leasehold.ErrSafeUntilPassed})
	m.Observe(leasehold.Event{Kind: leasehold.EventReleased, Name: "web", Term: term, Err: timeout})
	check(t, gather(t, reg), map[string]float64{
		"leasehold_is_leader{}":                       0,
		"leasehold_token{}":                           0,
		"leasehold_safe_until_remaining_seconds{}":    0,
		"leasehold_safe_until_timestamp_seconds{}":    0,
		"leasehold_terms_ended_total{reason=expired}": 1,
		"leasehold_terms_ended_total{reason=lost}":    0,
		"leasehold_store_errors_total{op=release}":    1,
	})
}

// Two terms of one lease in one process (a hand-over between two electors):
// the lease is led while either holds a term, with the newer token.
func TestTwoHoldersInOneProcess(t *testing.T) {
	clock := &fixedClock{now: time.Now()}
	m := promlease.New(promlease.Options{Clock: clock})
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	old := store.Term{Name: "web", Holder: "a", Token: 1}
	nu := store.Term{Name: "web", Holder: "b", Token: 2}
	m.Observe(leasehold.Event{Kind: leasehold.EventAcquired, Name: "web", Term: old, SafeUntil: clock.now.Add(time.Second)})
	m.Observe(leasehold.Event{Kind: leasehold.EventAcquired, Name: "web", Term: nu, SafeUntil: clock.now.Add(3 * time.Second)})
	m.Observe(leasehold.Event{Kind: leasehold.EventLost, Name: "web", Term: old, Err: leasehold.ErrLeaseLost})
	check(t, gather(t, reg), map[string]float64{
		"leasehold_is_leader{}":                    1,
		"leasehold_token{}":                        2,
		"leasehold_safe_until_remaining_seconds{}": 3,
		"leasehold_terms_ended_total{reason=lost}": 1,
	})
}

func check(t *testing.T, got, want map[string]float64) {
	t.Helper()
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, v)
		}
	}
}

// TestLint runs client_golang's promlint (the naming rules: units, _total,
// _seconds, help text) over every family.
func TestLint(t *testing.T) {
	m := promlease.New(promlease.Options{})
	m.Observe(leasehold.Event{Kind: leasehold.EventAcquired, Name: "web", Term: store.Term{Name: "web", Holder: "a", Token: 1}, SafeUntil: time.Now().Add(time.Second)})
	problems, err := testutil.CollectAndLint(m)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
	// Negative control: the linter does catch a badly named counter.
	bad := prometheus.NewCounter(prometheus.CounterOpts{Name: "leasehold_renewals", Help: "x"})
	if problems, _ := testutil.CollectAndLint(bad); len(problems) == 0 {
		t.Error("promlint found nothing wrong with a counter without _total")
	}
}

// TestNames: Names lists exactly the families a Metrics exports.
func TestNames(t *testing.T) {
	fams := families(t)
	var got []string
	for name := range fams {
		got = append(got, name)
	}
	sort.Strings(got)
	want := slices.Clone(promlease.Names)
	sort.Strings(want)
	if !slices.Equal(got, want) {
		t.Errorf("exported families %v, Names %v", got, want)
	}
}

// families gathers the families of a Metrics that has seen one lease.
func families(t *testing.T) map[string]dto.MetricType {
	t.Helper()
	reg := prometheus.NewRegistry()
	m := promlease.New(promlease.Options{})
	reg.MustRegister(m)
	m.Observe(leasehold.Event{Kind: leasehold.EventAcquireAttempt, Name: "web"})
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]dto.MetricType{}
	for _, f := range fams {
		out[f.GetName()] = f.GetType()
	}
	return out
}

var metricName = regexp.MustCompile(`\bleasehold_[a-z_]+`)

// missing returns the metric names queried in exprs that fams does not
// export (a histogram's _bucket, _sum and _count series count as its own).
func missing(exprs []string, fams map[string]dto.MetricType) []string {
	var out []string
	for _, e := range exprs {
		for _, name := range metricName.FindAllString(e, -1) {
			if _, ok := fams[name]; ok {
				continue
			}
			found := false
			for _, suf := range []string{"_bucket", "_sum", "_count"} {
				if base, ok := strings.CutSuffix(name, suf); ok && fams[base] == dto.MetricType_HISTOGRAM {
					found = true
				}
			}
			if !found {
				out = append(out, name)
			}
		}
	}
	return out
}

// exprs returns every string value under a key named expr, query or
// definition in the dashboard JSON.
func exprs(v any) []string {
	var out []string
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if s, ok := x.(string); ok && (k == "expr" || k == "query" || k == "definition") {
				out = append(out, s)
				continue
			}
			out = append(out, exprs(x)...)
		}
	case []any:
		for _, x := range v {
			out = append(out, exprs(x)...)
		}
	}
	return out
}

// TestDashboardQueriesExist: every metric the shipped Grafana dashboard
// queries is one this package exports.
func TestDashboardQueriesExist(t *testing.T) {
	b, err := os.ReadFile("../deploy/grafana/leasehold-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash any
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("dashboard is not JSON: %v", err)
	}
	qs := exprs(dash)
	fams := families(t)
	n := 0
	for _, q := range qs {
		n += len(metricName.FindAllString(q, -1))
	}
	if n < len(promlease.Names)-2 {
		t.Fatalf("the dashboard queries only %d leasehold metrics in %d queries", n, len(qs))
	}
	if miss := missing(qs, fams); len(miss) > 0 {
		t.Errorf("the dashboard queries metrics no Metrics exports: %v", miss)
	}
	// Negative control: a renamed metric is caught.
	if miss := missing([]string{`rate(leasehold_step_downs_total[5m])`, `leasehold_is_leader_bucket`}, fams); len(miss) != 2 {
		t.Errorf("missing() caught %v, want both names", miss)
	}
}

// TestReasonsCoverLossReason: every reason leasehold.LossReason gives has
// its series from the start.
func TestReasonsCoverLossReason(t *testing.T) {
	for _, err := range []error{leasehold.ErrSafeUntilPassed, leasehold.ErrLeaseLost, leasehold.ErrReleased, leasehold.ErrMaxHold, context.Canceled, errors.New("other")} {
		if r := leasehold.LossReason(err); !slices.Contains(promlease.Reasons, r) {
			t.Errorf("LossReason(%v) = %q, not in Reasons %v", err, r, promlease.Reasons)
		}
	}
}
