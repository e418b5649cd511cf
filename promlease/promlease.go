// Package promlease turns the events of leasehold's Elector, Lock and Keeper
// into Prometheus metrics, registered in the caller's own registry.
//
// A service that embeds leasehold feeds a Metrics from Config.OnEvent and
// registers it where its other metrics live:
//
//	m := promlease.New(promlease.Options{})
//	reg.MustRegister(m)
//	e, err := leasehold.NewElector(st, "nightly-report", leasehold.Config{OnEvent: m.Observe})
//
// The `leasehold run --http` command serves the same metrics from this same
// package, so a dashboard built for one works for the other (the Grafana
// dashboard in deploy/grafana uses these names).
//
// # Metrics
//
// Every series has a lease label (the lease name). One Metrics may observe
// many electors, locks and keepers; a lease several of them hold in one
// process at once counts as led while any of them holds a term.
//
//	leasehold_is_leader                      gauge      1 while this process holds a term of the lease
//	leasehold_token                          gauge      the fencing token of that term (0 when not leading)
//	leasehold_safe_until_remaining_seconds   gauge      seconds until this process stops trusting the term (0 when not leading; negative if overdue)
//	leasehold_safe_until_timestamp_seconds   gauge      that deadline as Unix wall-clock seconds (advisory)
//	leasehold_terms_started_total            counter    terms this process was granted
//	leasehold_terms_ended_total              counter    terms this process ended, by reason (leasehold.LossReason)
//	leasehold_acquire_attempts_total         counter    acquire requests, by result (granted, held, queued, error)
//	leasehold_renew_latency_seconds          histogram  round trip of successful renewals, from when each was sent
//	leasehold_renew_failures_total           counter    renewals that failed (retried until safeUntil)
//	leasehold_store_errors_total             counter    store requests whose outcome is unknown, by op (acquire, renew, release)
//
// The safe-until gauges are computed when Prometheus scrapes, from the
// deadline of the last event and Options.Clock; the deadline itself is kept
// on the holder's monotonic clock, and the timestamp is for dashboards only.
//
// A term's events come in order (leasehold.Event), so the gauges never show
// a term after its EventLost.
package promlease

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store"
)

// Reasons are the values of the reason label of
// leasehold_terms_ended_total: those of leasehold.LossReason. Every series
// exists (at 0) from a lease's first event, so that rate() sees the first end.
var Reasons = []string{"expired", "lost", "released", "max-hold", "shutdown", "error"}

// Results are the values of the result label of
// leasehold_acquire_attempts_total.
var Results = []string{"granted", "held", "queued", "error"}

// Ops are the values of the op label of leasehold_store_errors_total.
var Ops = []string{"acquire", "renew", "release"}

// DefaultBuckets are the upper bounds of leasehold_renew_latency_seconds.
var DefaultBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// Options configure a Metrics. The zero value is ready to use.
type Options struct {
	// Clock reads the holder's clock for the safe-until gauges. Give it the
	// Clock of the leasehold.Config whose events this Metrics observes; nil
	// means leasehold.SystemClock(), the Config's default.
	Clock leasehold.Clock
	// Buckets of the renewal latency histogram, in seconds; nil means
	// DefaultBuckets.
	Buckets []float64
	// ConstLabels are added to every series (such as the service's name).
	ConstLabels prometheus.Labels
}

// Metrics is a prometheus.Collector fed with leasehold events by Observe.
// It is safe for concurrent use.
type Metrics struct {
	clock leasehold.Clock

	isLeader  *prometheus.Desc
	token     *prometheus.Desc
	remaining *prometheus.Desc
	at        *prometheus.Desc

	started   *prometheus.CounterVec
	ended     *prometheus.CounterVec
	attempts  *prometheus.CounterVec
	latency   *prometheus.HistogramVec
	failures  *prometheus.CounterVec
	storeErrs *prometheus.CounterVec

	mu     sync.Mutex
	leases map[string]map[store.Term]time.Time // lease -> held terms -> safeUntil
}

// New returns a Metrics. Register it in a registry (reg.MustRegister(m)) and
// give m.Observe to Config.OnEvent (or call it from your own OnEvent).
func New(opts Options) *Metrics {
	clock := opts.Clock
	if clock == nil {
		clock = leasehold.SystemClock()
	}
	buckets := opts.Buckets
	if buckets == nil {
		buckets = DefaultBuckets
	}
	cl := opts.ConstLabels
	lease := []string{"lease"}
	desc := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, lease, cl)
	}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: cl}, append([]string{"lease"}, labels...))
	}
	return &Metrics{
		clock:     clock,
		isLeader:  desc("leasehold_is_leader", "1 while this process holds a term of the lease, else 0."),
		token:     desc("leasehold_token", "Fencing token of the term this process holds (0 when it does not lead)."),
		remaining: desc("leasehold_safe_until_remaining_seconds", "Seconds until this process stops trusting its term (safeUntil), to the millisecond; 0 when it does not lead, negative when overdue."),
		at:        desc("leasehold_safe_until_timestamp_seconds", "Wall-clock time of safeUntil as Unix seconds, to the millisecond (advisory: the holder keeps the deadline on its monotonic clock); 0 when it does not lead."),
		started:   counter("leasehold_terms_started_total", "Terms this process was granted."),
		ended:     counter("leasehold_terms_ended_total", "Terms this process ended, by reason (expired: no renewal before safeUntil; lost: the store said so; released; max-hold: Config.MaxHold reached; shutdown: the caller's context ended; error).", "reason"),
		attempts:  counter("leasehold_acquire_attempts_total", "Acquire requests, by result (granted; held by another; queued: others wait ahead of a fair acquire; error, outcome unknown).", "result"),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "leasehold_renew_latency_seconds", Help: "Round trip of successful renewals, from when each was sent.",
			Buckets: buckets, ConstLabels: cl,
		}, lease),
		failures:  counter("leasehold_renew_failures_total", "Renewals that failed (retried until safeUntil)."),
		storeErrs: counter("leasehold_store_errors_total", "Store requests that returned an error other than a definite answer (ErrHeld, ErrNotHeld): the outcome is unknown. By op: acquire, renew, release.", "op"),
		leases:    map[string]map[store.Term]time.Time{},
	}
}

// Track makes every series of the lease name exist (at 0, not leading)
// before its first event, so that a dashboard shows a standby that has not
// yet tried to acquire.
func (m *Metrics) Track(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.track(name)
}

func (m *Metrics) track(name string) map[store.Term]time.Time {
	terms, seen := m.leases[name]
	if !seen {
		terms = map[store.Term]time.Time{}
		m.leases[name] = terms
		m.initSeries(name)
	}
	return terms
}

// Observe records one event. It has the signature of Config.OnEvent.
func (m *Metrics) Observe(ev leasehold.Event) {
	m.mu.Lock()
	defer m.mu.Unlock()
	name := ev.Name
	terms := m.track(name)
	switch ev.Kind {
	case leasehold.EventAcquireAttempt:
		result := attemptResult(leasehold.OutcomeOf(ev.Err))
		if result == "error" {
			m.storeErrs.WithLabelValues(name, "acquire").Inc()
		}
		m.attempts.WithLabelValues(name, result).Inc()
	case leasehold.EventAcquired:
		terms[ev.Term] = ev.SafeUntil
		m.started.WithLabelValues(name).Inc()
	case leasehold.EventRenewed:
		if _, ok := terms[ev.Term]; ok {
			terms[ev.Term] = ev.SafeUntil
		}
		m.latency.WithLabelValues(name).Observe(ev.Latency.Seconds())
	case leasehold.EventRenewFailed:
		m.failures.WithLabelValues(name).Inc()
		if !leasehold.OutcomeOf(ev.Err).Definite() {
			m.storeErrs.WithLabelValues(name, "renew").Inc()
		}
	case leasehold.EventLost:
		delete(terms, ev.Term)
		m.ended.WithLabelValues(name, leasehold.LossReason(ev.Err)).Inc()
	case leasehold.EventReleased:
		if !leasehold.OutcomeOf(ev.Err).Definite() {
			m.storeErrs.WithLabelValues(name, "release").Inc()
		}
	}
}

// attemptResult is an acquire's result label. An acquire is not answered
// ErrNotHeld; if a store did, it is counted an error.
func attemptResult(o leasehold.Outcome) string {
	switch o {
	case leasehold.OutcomeApplied:
		return "granted"
	case leasehold.OutcomeHeld:
		return "held"
	case leasehold.OutcomeQueued:
		return "queued" // a fair acquire with others ahead: no store error
	default:
		return "error"
	}
}

// initSeries makes every labelled series of a lease exist at 0.
func (m *Metrics) initSeries(name string) {
	m.started.WithLabelValues(name)
	m.failures.WithLabelValues(name)
	m.latency.WithLabelValues(name)
	for _, r := range Reasons {
		m.ended.WithLabelValues(name, r)
	}
	for _, r := range Results {
		m.attempts.WithLabelValues(name, r)
	}
	for _, op := range Ops {
		m.storeErrs.WithLabelValues(name, op)
	}
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- m.isLeader
	ch <- m.token
	ch <- m.remaining
	ch <- m.at
	m.started.Describe(ch)
	m.ended.Describe(ch)
	m.attempts.Describe(ch)
	m.latency.Describe(ch)
	m.failures.Describe(ch)
	m.storeErrs.Describe(ch)
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	now := m.clock.Now()
	wall := time.Now()
	m.mu.Lock()
	for name, terms := range m.leases {
		leader, token, left, at := 0.0, int64(0), 0.0, 0.0
		var safeUntil time.Time
		for t, su := range terms {
			if t.Token > token {
				token, safeUntil = t.Token, su
			}
		}
		if token > 0 {
			leader = 1
			d := safeUntil.Sub(now)
			left = Seconds(d)
			at = Seconds(time.Duration(wall.Add(d).UnixNano()))
		}
		ch <- prometheus.MustNewConstMetric(m.isLeader, prometheus.GaugeValue, leader, name)
		ch <- prometheus.MustNewConstMetric(m.token, prometheus.GaugeValue, float64(token), name)
		ch <- prometheus.MustNewConstMetric(m.remaining, prometheus.GaugeValue, left, name)
		ch <- prometheus.MustNewConstMetric(m.at, prometheus.GaugeValue, at, name)
	}
	m.mu.Unlock()
	m.started.Collect(ch)
	m.ended.Collect(ch)
	m.attempts.Collect(ch)
	m.latency.Collect(ch)
	m.failures.Collect(ch)
	m.storeErrs.Collect(ch)
}

// Seconds is d in seconds, rounded to the millisecond, so that a gauge reads
// 13.321 and not 13.321307000000001.
func Seconds(d time.Duration) float64 {
	return float64(d.Round(time.Millisecond)/time.Millisecond) / 1000
}

// Names are the names of every metric family a Metrics exports (histogram
// families without their _bucket, _sum and _count suffixes).
var Names = []string{
	"leasehold_is_leader",
	"leasehold_token",
	"leasehold_safe_until_remaining_seconds",
	"leasehold_safe_until_timestamp_seconds",
	"leasehold_terms_started_total",
	"leasehold_terms_ended_total",
	"leasehold_acquire_attempts_total",
	"leasehold_renew_latency_seconds",
	"leasehold_renew_failures_total",
	"leasehold_store_errors_total",
}
