package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store"
)

// renewBuckets are the upper bounds of the renew latency histogram, in seconds.
var renewBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// stepDownReasons are the values of leasehold.LossReason, so that every
// series exists from the start.
var stepDownReasons = []string{"expired", "lost", "released", "shutdown", "error"}

// metrics counts what `run`'s elector does, for /metrics. It is written by
// the elector's OnEvent and read by the HTTP handler.
type metrics struct {
	lease string

	mu            sync.Mutex
	transitions   int64
	stepDowns     map[string]int64
	attempts      map[string]int64 // granted, held, error
	renewFailures int64
	renewCounts   []int64 // per bucket, not cumulative; last is +Inf
	renewSum      float64
	renewN        int64
	childStarts   int64
}

func newMetrics(lease string) *metrics {
	m := &metrics{
		lease:       lease,
		stepDowns:   map[string]int64{},
		attempts:    map[string]int64{"granted": 0, "held": 0, "error": 0},
		renewCounts: make([]int64, len(renewBuckets)+1),
	}
	for _, r := range stepDownReasons {
		m.stepDowns[r] = 0
	}
	return m
}

func (m *metrics) observe(ev leasehold.Event) {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch ev.Kind {
	case leasehold.EventAcquireAttempt:
		switch {
		case ev.Err == nil:
			m.attempts["granted"]++
		case errors.Is(ev.Err, store.ErrHeld):
			m.attempts["held"]++
		default:
			m.attempts["error"]++
		}
	case leasehold.EventAcquired:
		m.transitions++
	case leasehold.EventRenewed:
		s := ev.Latency.Seconds()
		i := sort.SearchFloat64s(renewBuckets, s) // first bound >= s
		m.renewCounts[i]++
		m.renewSum += s
		m.renewN++
	case leasehold.EventRenewFailed:
		m.renewFailures++
	case leasehold.EventLost:
		m.stepDowns[leasehold.LossReason(ev.Err)]++
	}
}

func (m *metrics) childStarted() {
	m.mu.Lock()
	m.childStarts++
	m.mu.Unlock()
}

// write writes the Prometheus text exposition format (version 0.0.4).
func (m *metrics) write(w io.Writer, st leasehold.Status, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	lease := `lease="` + escapeLabel(m.lease) + `"`
	family := func(name, typ, help string) {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
	}
	leader, token, left, at := 0, int64(0), 0.0, 0.0
	if st.Leading {
		leader, token = 1, st.Term.Token
		left = seconds(st.SafeUntil.Sub(now))
		// The wall-clock time of safeUntil, for dashboards; the deadline
		// itself is on the monotonic clock (now carries both readings).
		at = seconds(time.Duration(now.Add(st.SafeUntil.Sub(now)).UnixNano()))
	}
	family("leasehold_is_leader", "gauge", "1 while this node holds the lease, else 0.")
	fmt.Fprintf(w, "leasehold_is_leader{%s} %d\n", lease, leader)
	family("leasehold_token", "gauge", "Fencing token of the term this node holds (0 when it does not lead).")
	fmt.Fprintf(w, "leasehold_token{%s} %d\n", lease, token)
	family("leasehold_safe_until_remaining_seconds", "gauge", "Seconds left until this node stops trusting its term (safeUntil), to the millisecond; 0 when it does not lead.")
	fmt.Fprintf(w, "leasehold_safe_until_remaining_seconds{%s} %s\n", lease, formatFloat(left))
	family("leasehold_safe_until_timestamp_seconds", "gauge", "Wall-clock time of safeUntil as Unix seconds, to the millisecond (advisory: the holder keeps the deadline on its monotonic clock); 0 when it does not lead.")
	fmt.Fprintf(w, "leasehold_safe_until_timestamp_seconds{%s} %s\n", lease, formatFloat(at))
	family("leasehold_leader_transitions_total", "counter", "Terms this node has won.")
	fmt.Fprintf(w, "leasehold_leader_transitions_total{%s} %d\n", lease, m.transitions)
	family("leasehold_step_downs_total", "counter", "Terms this node has ended, by reason (expired: no renewal before safeUntil; lost: the store said so; released; shutdown; error).")
	for _, r := range sortedKeys(m.stepDowns) {
		fmt.Fprintf(w, "leasehold_step_downs_total{%s,reason=%q} %d\n", lease, r, m.stepDowns[r])
	}
	family("leasehold_acquire_attempts_total", "counter", "Acquire requests, by result (granted, held by another, error with unknown outcome).")
	for _, r := range sortedKeys(m.attempts) {
		fmt.Fprintf(w, "leasehold_acquire_attempts_total{%s,result=%q} %d\n", lease, r, m.attempts[r])
	}
	family("leasehold_renew_failures_total", "counter", "Renewals that failed (retried until safeUntil).")
	fmt.Fprintf(w, "leasehold_renew_failures_total{%s} %d\n", lease, m.renewFailures)
	family("leasehold_renew_latency_seconds", "histogram", "Round trip of successful renewals, from when each was sent.")
	var cum int64
	for i, b := range renewBuckets {
		cum += m.renewCounts[i]
		fmt.Fprintf(w, "leasehold_renew_latency_seconds_bucket{%s,le=%q} %d\n", lease, formatFloat(b), cum)
	}
	cum += m.renewCounts[len(renewBuckets)]
	fmt.Fprintf(w, "leasehold_renew_latency_seconds_bucket{%s,le=\"+Inf\"} %d\n", lease, cum)
	fmt.Fprintf(w, "leasehold_renew_latency_seconds_sum{%s} %s\n", lease, formatFloat(m.renewSum))
	fmt.Fprintf(w, "leasehold_renew_latency_seconds_count{%s} %d\n", lease, m.renewN)
	family("leasehold_command_starts_total", "counter", "Times the supervised command was started.")
	fmt.Fprintf(w, "leasehold_command_starts_total{%s} %d\n", lease, m.childStarts)
}

func sortedKeys(m map[string]int64) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// seconds is d in seconds, rounded to the millisecond, so that it prints
// as 13.321 and not 13.321307000000001: the integer count of milliseconds
// divided by 1000 is the double nearest that decimal, which Go prints in
// its shortest form.
func seconds(d time.Duration) float64 {
	return float64(d.Round(time.Millisecond)/time.Millisecond) / 1000
}

func formatFloat(f float64) string {
	if math.IsInf(f, 1) {
		return "+Inf"
	}
	return strconv.FormatFloat(f, 'f', -1, 64) // never an exponent: 1796234938.123, not 1.796234938123e+09
}

func escapeLabel(s string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s)
}

// healthView is what /healthz judges.
type healthView struct {
	status   leasehold.Status
	running  bool // the elector's Run has not returned
	started  time.Time
	timings  leasehold.Timings
	now      time.Time
	storeURL string
}

// health reports whether this node is healthy, and why not. A leader is
// unhealthy once past safeUntil (it should have stepped down); a standby
// once it has stopped contending, or when the store has not answered it for
// a whole lease duration.
func health(v healthView) (bool, string) {
	st := v.status
	switch {
	case !v.running:
		return false, "the elector has stopped"
	case st.Leading && !st.SafeUntil.IsZero() && v.now.After(st.SafeUntil):
		return false, fmt.Sprintf("leading token %d but past safeUntil by %v", st.Term.Token, v.now.Sub(st.SafeUntil).Round(time.Millisecond))
	case st.Leading:
		return true, fmt.Sprintf("leading with token %d, %v until safeUntil", st.Term.Token, st.SafeUntil.Sub(v.now).Round(time.Millisecond))
	}
	last := st.LastContact
	if last.IsZero() {
		last = v.started
	}
	if st.LastError != nil && v.now.Sub(last) > v.timings.LeaseDuration {
		return false, fmt.Sprintf("cannot reach the store %s for %v: %v", v.storeURL, v.now.Sub(last).Round(time.Millisecond), st.LastError)
	}
	if !st.Contending {
		// Between a term and the next attempt the elector is briefly neither
		// leading nor contending; only a long gap is a stopped standby.
		return true, "standing by"
	}
	return true, "standing by (contending)"
}

// httpHandler serves /healthz, /leader and /metrics for `run`.
func (r *runCmd) httpHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, req *http.Request) {
		ok, why := health(r.healthView())
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, "unhealthy:", why)
			return
		}
		fmt.Fprintln(w, "ok:", why)
	})
	mux.HandleFunc("GET /leader", func(w http.ResponseWriter, req *http.Request) {
		ctx, cancel := context.WithTimeout(req.Context(), 5*time.Second)
		defer cancel()
		rec, err := r.elector.Holder(ctx)
		w.Header().Set("Content-Type", "application/json")
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			w.WriteHeader(http.StatusServiceUnavailable)
			json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
			return
		}
		out := leaseJSON(rec, r.lease)
		me := r.elector.Identity()
		out.Self = rec.Live() && rec.Holder == me
		json.NewEncoder(w).Encode(out)
	})
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, req *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		r.metrics.write(w, r.elector.Status(), time.Now())
	})
	return mux
}

// leaseView is the JSON form of a lease record, shared by /leader and
// `status --json`.
type leaseView struct {
	Name             string  `json:"name"`
	State            string  `json:"state"` // held, expired, free
	Holder           string  `json:"holder,omitempty"`
	Token            int64   `json:"token"`
	RemainingSeconds float64 `json:"remaining_seconds"`
	TTLSeconds       float64 `json:"ttl_seconds,omitempty"`
	Metadata         string  `json:"metadata,omitempty"`
	Self             bool    `json:"self,omitempty"`
}

func leaseState(rec store.Record) string {
	switch {
	case rec.Live():
		return "held"
	case rec.Holder != "":
		return "expired"
	default:
		return "free"
	}
}

func leaseJSON(rec store.Record, name string) leaseView {
	v := leaseView{Name: name, State: "free"}
	if rec.Token == 0 {
		return v
	}
	v.State = leaseState(rec)
	v.Holder = rec.Holder
	v.Token = rec.Token
	v.TTLSeconds = seconds(rec.TTL)
	v.Metadata = rec.Metadata
	if rec.Live() {
		v.RemainingSeconds = seconds(rec.Remaining)
	}
	return v
}
