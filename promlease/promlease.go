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
// The `leasehold run --http` command serves the same metrics from the same
// bookkeeping (internal/leasestats, which this package hands to a registry),
// written in the text format without the Prometheus client, so a dashboard
// built for one works for the other (the Grafana dashboard in deploy/grafana
// uses these names).
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
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/leasestats"
)

// Reasons are the values of the reason label of
// leasehold_terms_ended_total: those of leasehold.LossReason. Every series
// exists (at 0) from a lease's first event, so that rate() sees the first end.
var Reasons = leasestats.Reasons

// Results are the values of the result label of
// leasehold_acquire_attempts_total.
var Results = leasestats.Results

// Ops are the values of the op label of leasehold_store_errors_total.
var Ops = leasestats.Ops

// DefaultBuckets are the upper bounds of leasehold_renew_latency_seconds.
var DefaultBuckets = leasestats.DefaultBuckets

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
	stats *leasestats.Stats
	descs []*prometheus.Desc // by leasestats.Families
}

// New returns a Metrics. Register it in a registry (reg.MustRegister(m)) and
// give m.Observe to Config.OnEvent (or call it from your own OnEvent).
func New(opts Options) *Metrics {
	m := &Metrics{stats: leasestats.New(opts.Clock, opts.Buckets)}
	for _, f := range leasestats.Families {
		m.descs = append(m.descs, prometheus.NewDesc(f.Name, f.Help, f.Labels, opts.ConstLabels))
	}
	return m
}

// Track makes every series of the lease name exist (at 0, not leading)
// before its first event, so that a dashboard shows a standby that has not
// yet tried to acquire.
func (m *Metrics) Track(name string) { m.stats.Track(name) }

// Observe records one event. It has the signature of Config.OnEvent.
func (m *Metrics) Observe(ev leasehold.Event) { m.stats.Observe(ev) }

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range m.descs {
		ch <- d
	}
}

// Collect implements prometheus.Collector. The safe-until gauges are
// computed now, from the deadline of each lease's last event.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	for i, samples := range m.stats.Samples() {
		f, d := leasestats.Families[i], m.descs[i]
		for _, s := range samples {
			switch f.Kind {
			case leasestats.Histogram:
				buckets := make(map[float64]uint64, len(s.Bounds))
				for j, le := range s.Bounds {
					buckets[le] = s.Counts[j]
				}
				ch <- prometheus.MustNewConstHistogramWithCreatedTimestamp(d, s.Count, s.Sum, buckets, s.Created, s.Labels...)
			case leasestats.Counter:
				ch <- prometheus.MustNewConstMetricWithCreatedTimestamp(d, prometheus.CounterValue, s.Value, s.Created, s.Labels...)
			default:
				ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, s.Value, s.Labels...)
			}
		}
	}
}

// Seconds is d in seconds, rounded to the millisecond, so that a gauge reads
// 13.321 and not 13.321307000000001.
func Seconds(d time.Duration) float64 { return leasestats.Seconds(d) }

// Names are the names of every metric family a Metrics exports (histogram
// families without their _bucket, _sum and _count suffixes).
var Names = func() []string {
	var ns []string
	for _, f := range leasestats.Families {
		ns = append(ns, f.Name)
	}
	return ns
}()
