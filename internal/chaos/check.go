package chaos

import (
	"fmt"
	"sort"
	"time"
)

// The checks checkHistory runs, by name.
const (
	// chkMonotonic: the resource never accepts a token lower than one it
	// accepted, nor the token it last accepted from another writer (another
	// term with that token); per resource, in the register's own order of
	// writes.
	chkMonotonic = "register-monotonic"
	// chkUniqueToken: no token is ever granted to two holders (or twice).
	chkUniqueToken = "token-unique"
	// chkTokenOrder: grants have strictly rising tokens in the order the
	// store made them, as observed: a grant whose answer the node recorded
	// before another grant's request was sent came first, so its token must
	// be lower. token-unique catches a token granted twice; this catches a
	// later grant with a lower token.
	chkTokenOrder = "token-order"
	// chkWriteOwner: every write the register accepted came from the term
	// that owned its token (the process that was granted the token, inside
	// that term's guarded work), and every write a node saw accepted is in the
	// register's log with that token.
	chkWriteOwner = "write-owner"
	// chkExclusive: no two live processes run guarded work at once. A
	// process runs a term's work believing it holds the lease from the
	// work's start until the work returns, the term is lost, or the node's
	// own clock passes the term's safeUntil, whichever comes first; time in
	// which the process was frozen (a pause fault) is not live. These
	// intervals, on the host's wall clock, must not overlap for two
	// different terms.
	chkExclusive = "exclusive-work"
	// chkSafeUntil: no guarded work sends a write or returns after its
	// safeUntil, measured on the node's own clock (unless the process was
	// frozen by a pause over that moment, or the OS did not run it: its own
	// recorded stalls from safeUntil - windDown to the late event add up to
	// at least the overrun; a process that is not run cannot stop itself,
	// which is what the fence is for); and each safeUntil is at most
	// the send time of its acquire or renew request plus the renew deadline.
	// The send time is the one the node's recorder wrote just before the
	// request reached the store, not the latency the library reports.
	chkSafeUntil = "safe-until"
	// chkFailover: after each fault heals, a leader exists (a grant or a
	// renewal succeeds) within leaseDuration + retryPeriod×(1+jitter) + slack.
	chkFailover = "failover"
	// chkLinearizable: the register's history (the nodes' writes with the
	// answers they got, the harness's reads) is linearizable against the
	// model of a fenced register, per resource (porcupine).
	chkLinearizable = "linearizable"
	// chkAtMostN (a semaphore): at no moment do more than Slots live
	// processes run guarded work under the semaphore's slots (the live
	// intervals of exclusive-work, over every slot).
	chkAtMostN = "at-most-n"
	// chkOncePerPeriod (a schedule): no period is run twice, across every
	// node and incarnation.
	chkOncePerPeriod = "once-per-period"
)

// checkNames lists the checks of an elector's run in the order
// checkHistory runs them. A semaphore's and a schedule's run the same
// checks per lease, failover last, then at-most-n or once-per-period.
var checkNames = []string{chkMonotonic, chkUniqueToken, chkTokenOrder, chkWriteOwner, chkExclusive, chkSafeUntil, chkFailover, chkLinearizable}

var checkTitles = map[string]string{
	chkMonotonic:     "the resource never accepts an older term (a lower token, or the same token from another writer)",
	chkUniqueToken:   "no token is ever granted to two holders",
	chkTokenOrder:    "a grant observed after another has a higher token",
	chkWriteOwner:    "every accepted write came from the term that owned its token",
	chkExclusive:     "no two live processes run guarded work at once",
	chkSafeUntil:     "no guarded work runs past its safeUntil (on its own clock), counted from the recorded send",
	chkFailover:      "after each fault heals, a leader exists within leaseDuration + retryPeriod + slack",
	chkLinearizable:  "the fenced register is linearizable (porcupine, per resource)",
	chkAtMostN:       "at most N live processes run guarded work under a semaphore's N slots at once",
	chkOncePerPeriod: "no period of a scheduled job runs twice",
}

// checkTitle is the one-line statement of a check.
func checkTitle(name string) string { return checkTitles[name] }

// Violation is one breach of a check.
type Violation struct {
	_ [0]func() // not comparable: spares the binary an equality function

	Check    string `json:"check"`
	Wall     int64  `json:"wall,omitempty"` // when, if known (Unix ns)
	Proc     string `json:"proc,omitempty"`
	Token    int64  `json:"token,omitempty"`
	Resource string `json:"res,omitempty"`
	Msg      string `json:"msg"`
}

func (v Violation) String() string { return v.Check + ": " + v.Msg }

// checkOutcome is the verdict of one check.
type checkOutcome struct {
	_ [0]func() // not comparable: spares the binary an equality function

	Name       string `json:"name"`
	Title      string `json:"title"`
	Violations int    `json:"violations"`
	// Checked says what was examined (e.g. "812 accepted writes").
	Checked string `json:"checked"`
	// Inconclusive is set when the check could not decide (porcupine timed out).
	Inconclusive string `json:"inconclusive,omitempty"`
}

// runStats are the figures of a run.
type runStats struct {
	WritesAccepted int            `json:"writes_accepted"`
	WritesRefused  int            `json:"writes_refused"`
	WritesUnknown  int            `json:"writes_unknown"`
	Reads          int            `json:"reads"`
	Terms          int            `json:"terms"`
	Processes      int            `json:"processes"`
	FaultsByKind   map[string]int `json:"faults_by_kind"`
	// Failovers are the takeover times of faults that hit the leader: from
	// the fault's start to the first grant of a newer term (before the next
	// fault). Sorted. Store-wide faults are judged by the failover check
	// (from their heal), not counted here: their downtime is not a takeover.
	Failovers     []time.Duration `json:"failovers"`
	FailoverBound time.Duration   `json:"failover_bound"`
	Linearizable  string          `json:"linearizable"` // Ok, Illegal or Unknown (timed out)
	// MaxLive is the most guarded works seen live at once under a
	// semaphore's slots; Runs and Periods count a schedule's runs and the
	// distinct periods they ran, Skips the periods nodes tried and did not run.
	MaxLive int `json:"max_live,omitempty"`
	Runs    int `json:"runs,omitempty"`
	Periods int `json:"periods,omitempty"`
	Skips   int `json:"skips,omitempty"`
}

// Result is what the checker found.
type Result struct {
	Checks     []checkOutcome `json:"checks"`
	Violations []Violation    `json:"violations"`
	Stats      runStats       `json:"stats"`
	// GroupErrors are the lease groups whose run ended in an error (no
	// leader at the start, the store not opened, a node that would not
	// start), each with its error. What such a group recorded until then
	// was checked and counted with the rest; a group that recorded
	// nothing adds only its error. Either way the run failed.
	GroupErrors []GroupError `json:"group_errors,omitempty"`
}

// GroupError is a lease group whose run ended in an error.
type GroupError struct {
	Group string `json:"group"` // g01, g02, ...; empty in a run of one group
	Error string `json:"error"`
}

// OK reports whether every group ran to its end and no check found a
// violation.
func (r *Result) OK() bool { return len(r.Violations) == 0 && len(r.GroupErrors) == 0 }

// checkOptions tune checkHistory.
type checkOptions struct {
	// LinearizeTimeout bounds the porcupine search; zero means 30 s. A search
	// that times out makes the check inconclusive, not failed.
	LinearizeTimeout time.Duration
	// MaxViolations caps how many violations of each check are listed (they
	// are all counted); zero means 50.
	MaxViolations int
}

// failoverBound is leaseDuration + retryPeriod×(1+jitter) + slack: the
// longest a healthy cluster may go without a leader after a fault heals. The
// retry period counts its jitter: a candidate may wait that long between tries.
func failoverBound(t timingsRecord, slack time.Duration) time.Duration {
	jitter := max(t.Jitter, 0) // leasehold.NoJitter is negative: no jitter
	return t.LeaseDuration + time.Duration(float64(t.RetryPeriod)*(1+jitter)) + slack
}

// checkHistory runs every check over h. It is a pure function of the history.
func checkHistory(h *history, opts checkOptions) *Result {
	if opts.LinearizeTimeout <= 0 {
		opts.LinearizeTimeout = 30 * time.Second
	}
	if opts.MaxViolations <= 0 {
		opts.MaxViolations = 50
	}
	if h.Mode == ModeSemaphore || h.Mode == ModeSchedule {
		return checkLeases(h, opts)
	}
	return checkLease(h, opts, nil).res
}

// checkLease runs the checks of one lease over h, but those in skip.
func checkLease(h *history, opts checkOptions, skip map[string]bool) *checker {
	c := &checker{h: h, opts: opts, res: &Result{}}
	c.index()
	c.stats()
	for _, ck := range []struct {
		name string
		f    func() string
	}{
		{chkMonotonic, c.checkMonotonic},
		{chkUniqueToken, c.checkUniqueToken},
		{chkTokenOrder, c.checkTokenOrder},
		{chkWriteOwner, c.checkWriteOwner},
		{chkExclusive, c.checkExclusive},
		{chkSafeUntil, c.checkSafeUntil},
		{chkFailover, c.checkFailover},
		{chkLinearizable, c.checkLinearizable},
	} {
		if !skip[ck.name] {
			c.run(ck.name, ck.f)
		}
	}
	return c
}

// failoverBound is the history's failover bound: a schedule's runs come
// once a period, so it waits a period more.
func (h *history) failoverBound() time.Duration {
	return failoverBound(h.Timings, h.Slack+h.Every)
}

type grant struct {
	_ [0]func() // not comparable: spares the binary an equality function

	proc   string
	holder string
	wall   int64
}

// storeCall is one store call a node's recorder saw: its request line and,
// if the process lived to see it, its answer line.
type storeCall struct {
	req event
	ans *event
}

type writeOp struct {
	call   event
	ret    *event // nil: no answer recorded (the process died or froze)
	result string
}

type checker struct {
	h    *history
	opts checkOptions
	res  *Result

	byProc map[string][]event
	grants map[int64][]grant
	writes []*writeOp          // in call order (wall)
	byVal  map[string]*writeOp // by value (unique per write)
	logVal map[string][]registerEntry
	calls  []*storeCall          // in request order (wall)
	callBy map[string]*storeCall // by proc#req

	cur        *checkOutcome
	curListed  int
	inconclude string
}

func (c *checker) run(name string, f func() string) {
	c.cur = &checkOutcome{Name: name, Title: checkTitles[name]}
	c.curListed = 0
	c.inconclude = ""
	c.cur.Checked = f()
	c.cur.Inconclusive = c.inconclude
	c.res.Checks = append(c.res.Checks, *c.cur)
}

func (c *checker) violate(v Violation) {
	v.Check = c.cur.Name
	c.cur.Violations++
	if c.curListed < c.opts.MaxViolations {
		c.curListed++
		c.res.Violations = append(c.res.Violations, v)
	}
}

func (c *checker) index() {
	c.byProc = map[string][]event{}
	c.grants = map[int64][]grant{}
	c.byVal = map[string]*writeOp{}
	c.logVal = map[string][]registerEntry{}
	ev := append([]event(nil), c.h.Events...)
	sortEvents(ev)
	calls := map[string]*writeOp{}  // proc#op
	reqs := map[string]*storeCall{} // proc#req
	c.callBy = reqs
	for _, e := range ev {
		p := e.Proc()
		c.byProc[p] = append(c.byProc[p], e)
		switch e.Kind {
		case evRequest:
			sc := &storeCall{req: e}
			reqs[fmt.Sprintf("%s#%d", p, e.Req)] = sc
			c.calls = append(c.calls, sc)
		case evAnswer:
			if sc, ok := reqs[fmt.Sprintf("%s#%d", p, e.Req)]; ok {
				a := e
				sc.ans = &a
			}
		case evAcquired:
			c.grants[e.Token] = append(c.grants[e.Token], grant{proc: p, holder: e.Holder, wall: e.Wall})
		case evWriteCall:
			w := &writeOp{call: e}
			calls[fmt.Sprintf("%s#%d", p, e.Op)] = w
			c.writes = append(c.writes, w)
			if e.Value != "" {
				c.byVal[e.Value] = w
			}
		case evWriteReturn:
			if w, ok := calls[fmt.Sprintf("%s#%d", p, e.Op)]; ok {
				r := e
				w.ret = &r
				w.result = e.Result
			}
		}
	}
	for _, r := range c.h.Register {
		c.logVal[r.Value] = append(c.logVal[r.Value], r)
	}
}

func (c *checker) stats() {
	s := &c.res.Stats
	s.FaultsByKind = map[string]int{}
	for _, f := range c.h.Faults {
		if !f.Echo {
			s.FaultsByKind[f.Kind]++
		}
	}
	for _, w := range c.writes {
		switch w.result {
		case writeAccepted:
			s.WritesAccepted++
		case writeRefused:
			s.WritesRefused++
		default:
			s.WritesUnknown++
		}
	}
	for _, r := range c.h.Reads {
		if r.Err == "" {
			s.Reads++
		}
	}
	s.Terms = len(c.grants)
	s.Processes = len(c.byProc)
	s.FailoverBound = c.h.failoverBound()
	s.Failovers = c.failovers()
}

// failovers measures, for each fault that hit the leader, the time from its
// start to the first grant of a newer term, if that came before the next
// fault began.
func (c *checker) failovers() []time.Duration {
	faults := append([]fault(nil), c.h.Faults...)
	sort.Slice(faults, func(i, j int) bool { return faults[i].Start < faults[j].Start })
	var acquired []event
	for _, e := range c.h.Events {
		if e.Kind == evAcquired {
			acquired = append(acquired, e)
		}
	}
	sortEvents(acquired)
	var out []time.Duration
	for i, f := range faults {
		if !f.Leader || f.Echo {
			continue
		}
		// Until the next fault that hits a leader (faults of one burst
		// overlap: one on a standby does not end the measurement).
		limit := c.h.End
		for _, g := range faults[i+1:] {
			if g.Leader || g.Kind == faultStoreRestart {
				limit = g.Start
				break
			}
		}
		for _, a := range acquired {
			if a.Wall > f.Start && a.Wall <= limit && a.Token > f.Token {
				out = append(out, time.Duration(a.Wall-f.Start))
				break
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
