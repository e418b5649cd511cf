package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/leasestats"
	"github.com/leasehold/leasehold/store"
)

// metrics is what `run` serves on /metrics: the lease metrics of package
// promlease (the same names a service embedding leasehold exports, kept by
// the same bookkeeping, internal/leasestats), and the command's own starts.
// The command writes them in Prometheus' text format itself: the Prometheus
// client would add about 3 MB to a binary whose size issue 21 bounds.
type metrics struct {
	_ [0]func() // not comparable: spares the binary an equality function

	lease       *leasestats.Stats
	leaseName   string
	childStarts atomic.Uint64
}

// childStartsFamily counts the supervised command's starts.
var childStartsFamily = leasestats.Family{
	Name: "leasehold_command_starts_total", Help: "Times the supervised command was started.",
	Kind: leasestats.Counter, Labels: []string{"lease"},
}

// newMetrics counts the command's starts under the label lease, and makes
// the series of each tracked lease exist before its first event: the lease
// itself, or with run --slots each slot's lease.
func newMetrics(lease string, tracked ...string) *metrics {
	m := &metrics{lease: leasestats.New(nil, nil), leaseName: lease}
	if len(tracked) == 0 {
		tracked = []string{lease}
	}
	for _, n := range tracked {
		m.lease.Track(n)
	}
	return m
}

func (m *metrics) observe(ev leasehold.Event) { m.lease.Observe(ev) }

func (m *metrics) childStarted() { m.childStarts.Add(1) }

// families are the metric families /metrics shows, sorted by name as a
// Prometheus registry gathers them.
func (m *metrics) families() []leasestats.FamilySamples {
	var fams []leasestats.FamilySamples
	for i, ss := range m.lease.Samples() {
		fams = append(fams, leasestats.FamilySamples{Family: leasestats.Families[i], Samples: ss})
	}
	fams = append(fams, leasestats.FamilySamples{Family: childStartsFamily, Samples: []leasestats.Sample{
		{Labels: []string{m.leaseName}, Value: float64(m.childStarts.Load())},
	}})
	sort.Slice(fams, func(i, j int) bool { return fams[i].Name < fams[j].Name })
	return fams
}

// handler serves the metrics in Prometheus' text format (0.0.4, which every
// scraper reads), uncompressed so that the secret scrubber in front of it
// (scrubHandler) reads the text.
func (m *metrics) handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", leasestats.TextContentType)
		leasestats.WriteText(w, m.families()) // an error: the scraper went away
	})
}

// seconds is d in seconds, rounded to the millisecond, so that it prints
// as 13.321 and not 13.321307000000001.
func seconds(d time.Duration) float64 { return leasestats.Seconds(d) }

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

// httpHandler serves /healthz, /leader (with --slots /slots, with --every
// /schedule) and /metrics for `run`.
func (r *runCmd) httpHandler(st store.Store) *http.ServeMux {
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
	mux.Handle("GET /metrics", r.metrics.handler())
	switch {
	case r.sem != nil:
		mux.HandleFunc("GET /slots", r.slotsHandler(st))
		mux.HandleFunc("GET /leader", noLeader("run --slots has no single leader: GET /slots says which slots this process holds"))
		return mux
	case r.sched.every > 0:
		mux.HandleFunc("GET /schedule", r.scheduleHandler(st))
		mux.HandleFunc("GET /leader", noLeader("run --every has no standing leader: GET /schedule shows the current period and the last run"))
		return mux
	}
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
	return mux
}

// leaseView is the JSON form of a lease record, shared by /leader and
// `status --json`.
type leaseView struct {
	_ [0]func() // not comparable: spares the binary an equality function

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
