// Package leasestats keeps the lease metrics of a process from leasehold's
// events: the bookkeeping behind package promlease (which hands it to a
// Prometheus registry) and behind `leasehold run --http`'s /metrics (which
// writes it in Prometheus' text format itself, so that the command does not
// link the Prometheus client: about 3 MB of a binary whose size issue 21
// bounds). The families, their help and their labels live here once, so
// both show the same series.
package leasestats

import (
	"sort"
	"strings"
	"sync"
	"time"

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

// Kind is a family's metric type.
type Kind int

const (
	Gauge Kind = iota
	Counter
	Histogram
)

// String is the kind as Prometheus' text format names it.
func (k Kind) String() string {
	return [...]string{"gauge", "counter", "histogram"}[k]
}

// Family describes one metric family. Labels are its variable labels, in
// the order of a Sample's label values; sorted by name, as Prometheus
// writes them.
type Family struct {
	Name, Help string
	Kind       Kind
	Labels     []string
}

// The families, in the order of Families.
const (
	IsLeader = iota
	Token
	SafeUntilRemaining
	SafeUntilTimestamp
	TermsStarted
	TermsEnded
	AcquireAttempts
	RenewLatency
	RenewFailures
	StoreErrors
)

// Families are the lease metric families, indexed by the constants above.
var Families = []Family{
	IsLeader:           {"leasehold_is_leader", "1 while this process holds a term of the lease, else 0.", Gauge, []string{"lease"}},
	Token:              {"leasehold_token", "Fencing token of the term this process holds (0 when it does not lead).", Gauge, []string{"lease"}},
	SafeUntilRemaining: {"leasehold_safe_until_remaining_seconds", "Seconds until this process stops trusting its term (safeUntil), to the millisecond; 0 when it does not lead, negative when overdue.", Gauge, []string{"lease"}},
	SafeUntilTimestamp: {"leasehold_safe_until_timestamp_seconds", "Wall-clock time of safeUntil as Unix seconds, to the millisecond (advisory: the holder keeps the deadline on its monotonic clock); 0 when it does not lead.", Gauge, []string{"lease"}},
	TermsStarted:       {"leasehold_terms_started_total", "Terms this process was granted.", Counter, []string{"lease"}},
	TermsEnded:         {"leasehold_terms_ended_total", "Terms this process ended, by reason (expired: no renewal before safeUntil; lost: the store said so; released; max-hold: Config.MaxHold reached; shutdown: the caller's context ended; error).", Counter, []string{"lease", "reason"}},
	AcquireAttempts:    {"leasehold_acquire_attempts_total", "Acquire requests, by result (granted; held by another; queued: others wait ahead of a fair acquire; error, outcome unknown).", Counter, []string{"lease", "result"}},
	RenewLatency:       {"leasehold_renew_latency_seconds", "Round trip of successful renewals, from when each was sent.", Histogram, []string{"lease"}},
	RenewFailures:      {"leasehold_renew_failures_total", "Renewals that failed (retried until safeUntil).", Counter, []string{"lease"}},
	StoreErrors:        {"leasehold_store_errors_total", "Store requests that returned an error other than a definite answer (ErrHeld, ErrNotHeld): the outcome is unknown. By op: acquire, renew, release.", Counter, []string{"lease", "op"}},
}

// Sample is one series of a family: its label values (in the family's
// Labels order) and its value; for a histogram, Count, Sum and the
// cumulative count of observations at or below each bound of Bounds.
// Created is when a counter or histogram began counting (the lease's first
// event or Track), for the formats that show it.
type Sample struct {
	Labels  []string
	Value   float64
	Created time.Time
	Count   uint64
	Sum     float64
	Bounds  []float64
	Counts  []uint64
}

// Stats keeps the metrics of the leases whose events it observes. It is
// safe for concurrent use.
type Stats struct {
	_ [0]func() // not comparable: spares the binary an equality function

	clock   leasehold.Clock
	buckets []float64

	mu     sync.Mutex
	leases map[string]*lease
}

// lease is what Stats keeps of one lease name.
type lease struct {
	created   time.Time                // wall clock, when first tracked
	terms     map[store.Term]time.Time // held terms -> safeUntil
	started   uint64
	ended     []uint64 // by Reasons
	attempts  []uint64 // by Results
	failures  uint64
	storeErrs []uint64 // by Ops
	latency   histogram
}

type histogram struct {
	count  uint64
	sum    float64
	counts []uint64 // per bucket, not cumulative
}

// New returns a Stats that reads the holder's clock from clock (nil:
// leasehold.SystemClock(), the Config's default) for the safe-until gauges
// and sorts renewal latencies into buckets (nil: DefaultBuckets).
func New(clock leasehold.Clock, buckets []float64) *Stats {
	if clock == nil {
		clock = leasehold.SystemClock()
	}
	if buckets == nil {
		buckets = DefaultBuckets
	}
	return &Stats{clock: clock, buckets: append([]float64(nil), buckets...), leases: map[string]*lease{}}
}

// Buckets are the upper bounds of the renewal latency histogram.
func (s *Stats) Buckets() []float64 { return s.buckets }

// Track makes every series of the lease name exist (at 0, not leading)
// before its first event, so that a dashboard shows a standby that has not
// yet tried to acquire.
func (s *Stats) Track(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.track(name)
}

func (s *Stats) track(name string) *lease {
	l := s.leases[name]
	if l == nil {
		l = &lease{
			created:   time.Now(),
			terms:     map[store.Term]time.Time{},
			ended:     make([]uint64, len(Reasons)),
			attempts:  make([]uint64, len(Results)),
			storeErrs: make([]uint64, len(Ops)),
			latency:   histogram{counts: make([]uint64, len(s.buckets))},
		}
		s.leases[name] = l
	}
	return l
}

// Observe records one event. It has the signature of Config.OnEvent.
func (s *Stats) Observe(ev leasehold.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.track(ev.Name)
	switch ev.Kind {
	case leasehold.EventAcquireAttempt:
		result := attemptResult(leasehold.OutcomeOf(ev.Err))
		if result == resError {
			l.storeErrs[opAcquire]++
		}
		l.attempts[result]++
	case leasehold.EventAcquired:
		l.terms[ev.Term] = ev.SafeUntil
		l.started++
	case leasehold.EventRenewed:
		if _, ok := l.terms[ev.Term]; ok {
			l.terms[ev.Term] = ev.SafeUntil
		}
		l.latency.observe(s.buckets, ev.Latency.Seconds())
	case leasehold.EventRenewFailed:
		l.failures++
		if !leasehold.OutcomeOf(ev.Err).Definite() {
			l.storeErrs[opRenew]++
		}
	case leasehold.EventLost:
		delete(l.terms, ev.Term)
		l.ended[indexOf(Reasons, leasehold.LossReason(ev.Err))]++
	case leasehold.EventReleased:
		if !leasehold.OutcomeOf(ev.Err).Definite() {
			l.storeErrs[opRelease]++
		}
	}
}

// Indexes of Ops and of Results.
const (
	opAcquire = iota
	opRenew
	opRelease
)

const (
	resGranted = iota
	resHeld
	resQueued
	resError
)

// attemptResult is the index in Results of an acquire's result label. An
// acquire is not answered ErrNotHeld; if a store did, it is counted an error.
func attemptResult(o leasehold.Outcome) int {
	switch o {
	case leasehold.OutcomeApplied:
		return resGranted
	case leasehold.OutcomeHeld:
		return resHeld
	case leasehold.OutcomeQueued:
		return resQueued // a fair acquire with others ahead: no store error
	default:
		return resError
	}
}

// indexOf is the index of v in values; the last one ("error") if absent.
func indexOf(values []string, v string) int {
	for i, x := range values {
		if x == v {
			return i
		}
	}
	return len(values) - 1
}

func (h *histogram) observe(bounds []float64, v float64) {
	h.count++
	h.sum += v
	if i := sort.SearchFloat64s(bounds, v); i < len(bounds) {
		h.counts[i]++ // the first bound >= v
	}
}

// Samples are every series of every family, indexed as Families, each
// family's sorted by label values. The safe-until gauges are computed now,
// from the deadline of each lease's last event: on the holder's clock for
// the remaining seconds, and as wall-clock time for the timestamp. A lease
// several holders of this process hold at once shows its highest token.
func (s *Stats) Samples() [][]Sample {
	now := s.clock.Now()
	wall := time.Now()
	out := make([][]Sample, len(Families))
	s.mu.Lock()
	for name, l := range s.leases {
		leader, token, left, at := 0.0, int64(0), 0.0, 0.0
		var safeUntil time.Time
		for t, su := range l.terms {
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
		one := func(f int, v float64, labels ...string) {
			s := Sample{Labels: append([]string{name}, labels...), Value: v}
			if Families[f].Kind == Counter {
				s.Created = l.created
			}
			out[f] = append(out[f], s)
		}
		one(IsLeader, leader)
		one(Token, float64(token))
		one(SafeUntilRemaining, left)
		one(SafeUntilTimestamp, at)
		one(TermsStarted, float64(l.started))
		for i, r := range Reasons {
			one(TermsEnded, float64(l.ended[i]), r)
		}
		for i, r := range Results {
			one(AcquireAttempts, float64(l.attempts[i]), r)
		}
		one(RenewFailures, float64(l.failures))
		for i, op := range Ops {
			one(StoreErrors, float64(l.storeErrs[i]), op)
		}
		cum := make([]uint64, len(s.buckets))
		var c uint64
		for i, n := range l.latency.counts {
			c += n
			cum[i] = c
		}
		out[RenewLatency] = append(out[RenewLatency], Sample{Labels: []string{name}, Created: l.created, Count: l.latency.count, Sum: l.latency.sum, Bounds: s.buckets, Counts: cum})
	}
	s.mu.Unlock()
	for _, ss := range out {
		SortSamples(ss)
	}
	return out
}

// SortSamples sorts a family's samples by their label values, in label
// order, as Prometheus' registry does.
func SortSamples(ss []Sample) {
	sort.Slice(ss, func(i, j int) bool {
		a, b := ss[i].Labels, ss[j].Labels
		for k := range min(len(a), len(b)) {
			if c := strings.Compare(a[k], b[k]); c != 0 {
				return c < 0
			}
		}
		return len(a) < len(b)
	})
}

// Seconds is d in seconds, rounded to the millisecond, so that a gauge reads
// 13.321 and not 13.321307000000001.
func Seconds(d time.Duration) float64 {
	return float64(d.Round(time.Millisecond)/time.Millisecond) / 1000
}
