package cli

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store"
)

// What `run --slots` and `run --every` serve with --http besides the status
// page and /metrics: they hold no elector, so /healthz and the page's mark
// of this process come from a termTracker fed by the terms' events, and
// /leader gives way to /slots and /schedule.

// termTracker is what run knows of the terms it holds, from their events:
// a term is held from EventAcquired to EventLost, as promlease counts it.
type termTracker struct {
	mu          sync.Mutex
	held        map[string]heldTerm // by lease name
	lastErr     error
	lastContact time.Time
	lastRun     *lastRunView // run --every: this process's last run
}

type heldTerm struct {
	_ [0]func() // not comparable: spares the binary an equality function

	term      store.Term
	safeUntil time.Time
}

func newTermTracker() *termTracker { return &termTracker{held: map[string]heldTerm{}} }

// observe records one event; it is called from Config.OnEvent.
func (t *termTracker) observe(ev leasehold.Event) {
	t.mu.Lock()
	defer t.mu.Unlock()
	contact := func(err error) {
		switch o := leasehold.OutcomeOf(err); {
		case o.Answered():
			t.lastContact, t.lastErr = time.Now(), nil
		case o.Definite(): // queued: waiting, not failing; perhaps unsent, so no contact
			t.lastErr = nil
		default:
			t.lastErr = err
		}
	}
	switch ev.Kind {
	case leasehold.EventAcquireAttempt, leasehold.EventRenewFailed, leasehold.EventReleased:
		contact(ev.Err)
	case leasehold.EventRenewed, leasehold.EventHolderObserved:
		contact(nil)
	}
	switch ev.Kind {
	case leasehold.EventAcquired:
		t.held[ev.Name] = heldTerm{term: ev.Term, safeUntil: ev.SafeUntil}
	case leasehold.EventRenewed:
		if h, ok := t.held[ev.Name]; ok && h.term == ev.Term {
			t.held[ev.Name] = heldTerm{term: ev.Term, safeUntil: ev.SafeUntil}
		}
	case leasehold.EventLost:
		if h, ok := t.held[ev.Name]; ok && h.term == ev.Term {
			delete(t.held, ev.Name)
		}
	}
}

// holds reports whether rec is a term this process holds.
func (t *termTracker) holds(rec store.Record) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	h, ok := t.held[rec.Name]
	return ok && h.term == rec.Term
}

// heldNames are the leases this process holds a term of, sorted.
func (t *termTracker) heldNames() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	names := make([]string, 0, len(t.held))
	for n := range t.held {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// status is the tracker's view in the elector's terms, for health: leading
// while a term is held (the one with the highest token), contending when
// waitsWhenFree (run --slots waits for a slot; run --every waits for a
// period and stands by).
func (t *termTracker) status(waitsWhenFree bool) leasehold.Status {
	t.mu.Lock()
	defer t.mu.Unlock()
	st := leasehold.Status{LastError: t.lastErr, LastContact: t.lastContact}
	for _, h := range t.held {
		if h.term.Token > st.Term.Token {
			st.Term, st.SafeUntil = h.term, h.safeUntil
		}
	}
	st.Leading = st.Term.Token > 0
	st.Contending = !st.Leading && waitsWhenFree
	return st
}

// lastRunView is one run of a scheduled command by this process.
type lastRunView struct {
	Period   time.Time  `json:"period"`
	Token    int64      `json:"token"`
	Started  time.Time  `json:"started"`
	Ended    *time.Time `json:"ended,omitempty"`     // nil while it runs
	ExitCode *int       `json:"exit_code,omitempty"` // nil while it runs
}

func (t *termTracker) runStarted(period time.Time, token int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lastRun = &lastRunView{Period: period, Token: token, Started: time.Now()}
}

func (t *termTracker) runEnded(code int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.lastRun != nil {
		now := time.Now()
		t.lastRun.Ended, t.lastRun.ExitCode = &now, &code
	}
}

func (t *termTracker) lastRunCopy() *lastRunView {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.lastRun == nil {
		return nil
	}
	c := *t.lastRun
	return &c
}

// getLease reads one lease for an endpoint: a never-granted name is free.
func getLease(ctx context.Context, st store.Store, name string) (store.Record, error) {
	rec, err := st.Get(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return store.Record{Term: store.Term{Name: name}}, nil
	}
	return rec, err
}

// slotsView is what /slots serves with run --slots.
type slotsView struct {
	Name  string `json:"name"`
	Slots int    `json:"slots"`
	// Holding names the slots this process holds a term of (run holds at
	// most one).
	Holding []string `json:"holding"`
	// Leases are the slots as the store has them, self marking this
	// process's.
	Leases []leaseView `json:"leases"`
	Error  string      `json:"error,omitempty"`
}

// scheduleView is what /schedule serves with run --every.
type scheduleView struct {
	_ [0]func() // not comparable: spares the binary an equality function

	Name         string `json:"name"`
	EverySeconds int64  `json:"every_seconds"`
	Missed       string `json:"missed"`
	// Period is the start of the current period by this node's clock,
	// NextPeriod the start of the next.
	Period     time.Time `json:"period"`
	NextPeriod time.Time `json:"next_period"`
	// Claimed: some node claimed the current period (its claim lease,
	// Claim, was ever granted); it runs at most once.
	Claimed bool      `json:"claimed"`
	Claim   leaseView `json:"claim"`
	// Run is the lease NAME that a period's run holds; self while this
	// process runs the command.
	Run leaseView `json:"run"`
	// LastRun is this process's last run of the command (nil: none yet).
	LastRun *lastRunView `json:"last_run,omitempty"`
	Error   string       `json:"error,omitempty"`
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

// slotsHandler serves /slots.
func (r *runCmd) slotsHandler(st store.Store) http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		ctx, cancel := context.WithTimeout(req.Context(), r.store.timeout)
		defer cancel()
		out := slotsView{Name: r.lease, Slots: r.slots, Holding: r.terms.heldNames(), Leases: []leaseView{}}
		for i := range r.slots {
			rec, err := getLease(ctx, st, leasehold.SlotName(r.lease, i))
			if err != nil {
				out.Error = "reading " + leasehold.SlotName(r.lease, i) + ": " + err.Error()
				writeJSON(w, http.StatusServiceUnavailable, out)
				return
			}
			v := leaseJSON(rec, rec.Name)
			v.Self = rec.Live() && r.terms.holds(rec)
			out.Leases = append(out.Leases, v)
		}
		writeJSON(w, http.StatusOK, out)
	}
}

// scheduleHandler serves /schedule.
func (r *runCmd) scheduleHandler(st store.Store) http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		ctx, cancel := context.WithTimeout(req.Context(), r.store.timeout)
		defer cancel()
		every := r.sched.every
		p := leasehold.PeriodStart(time.Now(), every)
		out := scheduleView{
			Name: r.lease, EverySeconds: int64(every / time.Second), Missed: r.sched.missed,
			Period: p, NextPeriod: p.Add(every), LastRun: r.terms.lastRunCopy(),
		}
		claim, err := getLease(ctx, st, leasehold.PeriodName(r.lease, p))
		var run store.Record
		if err == nil {
			run, err = getLease(ctx, st, r.lease)
		}
		if err != nil {
			out.Error = err.Error()
			writeJSON(w, http.StatusServiceUnavailable, out)
			return
		}
		out.Claimed = claim.Token > 0
		out.Claim = leaseJSON(claim, claim.Name)
		out.Run = leaseJSON(run, r.lease)
		out.Run.Self = run.Live() && r.terms.holds(run)
		writeJSON(w, http.StatusOK, out)
	}
}

// noLeader answers /leader in the modes that have no single leader.
func noLeader(why string) http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": why})
	}
}
