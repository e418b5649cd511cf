package chaos

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// The checks Check runs, by name.
const (
	// CheckMonotonic: the resource never accepts a token lower than one it
	// accepted, nor the token it last accepted from another writer (another
	// term with that token); per resource, in the register's own order of
	// writes.
	CheckMonotonic = "register-monotonic"
	// CheckUniqueToken: no token is ever granted to two holders (or twice).
	CheckUniqueToken = "token-unique"
	// CheckTokenOrder: grants have strictly rising tokens in the order the
	// store made them, as observed: a grant whose answer the node recorded
	// before another grant's request was sent came first, so its token must
	// be lower. token-unique catches a token granted twice; this catches a
	// later grant with a lower token.
	CheckTokenOrder = "token-order"
	// CheckWriteOwner: every write the register accepted came from the term
	// that owned its token (the process that was granted the token, inside
	// that term's guarded work), and every write a node saw accepted is in the
	// register's log with that token.
	CheckWriteOwner = "write-owner"
	// CheckExclusive: no two live processes run guarded work at once. A
	// process runs a term's work believing it holds the lease from the
	// work's start until the work returns, the term is lost, or the node's
	// own clock passes the term's safeUntil, whichever comes first; time in
	// which the process was frozen (a pause fault) is not live. These
	// intervals, on the host's wall clock, must not overlap for two
	// different terms.
	CheckExclusive = "exclusive-work"
	// CheckSafeUntil: no guarded work sends a write or returns after its
	// safeUntil, measured on the node's own clock (unless the process was
	// frozen by a pause over that moment: a frozen process cannot stop
	// itself, which is what the fence is for); and each safeUntil is at most
	// the send time of its acquire or renew request plus the renew deadline.
	// The send time is the one the node's recorder wrote just before the
	// request reached the store, not the latency the library reports.
	CheckSafeUntil = "safe-until"
	// CheckFailover: after each fault heals, a leader exists (a grant or a
	// renewal succeeds) within leaseDuration + retryPeriod×(1+jitter) + slack.
	CheckFailover = "failover"
	// CheckLinearizable: the register's history (the nodes' writes with the
	// answers they got, the harness's reads) is linearizable against the
	// model of a fenced register, per resource (porcupine).
	CheckLinearizable = "linearizable"
)

// CheckNames lists the checks in the order Check runs them.
var CheckNames = []string{CheckMonotonic, CheckUniqueToken, CheckTokenOrder, CheckWriteOwner, CheckExclusive, CheckSafeUntil, CheckFailover, CheckLinearizable}

var checkTitles = map[string]string{
	CheckMonotonic:    "the resource never accepts an older term (a lower token, or the same token from another writer)",
	CheckUniqueToken:  "no token is ever granted to two holders",
	CheckTokenOrder:   "a grant observed after another has a higher token",
	CheckWriteOwner:   "every accepted write came from the term that owned its token",
	CheckExclusive:    "no two live processes run guarded work at once",
	CheckSafeUntil:    "no guarded work runs past its safeUntil (on its own clock), counted from the recorded send",
	CheckFailover:     "after each fault heals, a leader exists within leaseDuration + retryPeriod + slack",
	CheckLinearizable: "the fenced register is linearizable (porcupine, per resource)",
}

// CheckTitle is the one-line statement of a check.
func CheckTitle(name string) string { return checkTitles[name] }

// Violation is one breach of a check.
type Violation struct {
	Check    string `json:"check"`
	Wall     int64  `json:"wall,omitempty"` // when, if known (Unix ns)
	Proc     string `json:"proc,omitempty"`
	Token    int64  `json:"token,omitempty"`
	Resource string `json:"res,omitempty"`
	Msg      string `json:"msg"`
}

func (v Violation) String() string { return v.Check + ": " + v.Msg }

// CheckOutcome is the verdict of one check.
type CheckOutcome struct {
	Name       string `json:"name"`
	Title      string `json:"title"`
	Violations int    `json:"violations"`
	// Checked says what was examined (e.g. "812 accepted writes").
	Checked string `json:"checked"`
	// Inconclusive is set when the check could not decide (porcupine timed out).
	Inconclusive string `json:"inconclusive,omitempty"`
}

// Stats are the figures of a run.
type Stats struct {
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
}

// Result is what Check found.
type Result struct {
	Checks     []CheckOutcome `json:"checks"`
	Violations []Violation    `json:"violations"`
	Stats      Stats          `json:"stats"`
}

// OK reports whether no check found a violation.
func (r *Result) OK() bool { return len(r.Violations) == 0 }

// CheckOptions tune Check.
type CheckOptions struct {
	// LinearizeTimeout bounds the porcupine search; zero means 30 s. A search
	// that times out makes the check inconclusive, not failed.
	LinearizeTimeout time.Duration
	// MaxViolations caps how many violations of each check are listed (they
	// are all counted); zero means 50.
	MaxViolations int
}

// FailoverBound is leaseDuration + retryPeriod×(1+jitter) + slack: the
// longest a healthy cluster may go without a leader after a fault heals. The
// retry period counts its jitter: a candidate may wait that long between tries.
func FailoverBound(t TimingsJSON, slack time.Duration) time.Duration {
	jitter := max(t.Jitter, 0) // leasehold.NoJitter is negative: no jitter
	return t.LeaseDuration + time.Duration(float64(t.RetryPeriod)*(1+jitter)) + slack
}

// Check runs every check over h. It is a pure function of the history.
func Check(h *History, opts CheckOptions) *Result {
	if opts.LinearizeTimeout <= 0 {
		opts.LinearizeTimeout = 30 * time.Second
	}
	if opts.MaxViolations <= 0 {
		opts.MaxViolations = 50
	}
	c := &checker{h: h, opts: opts, res: &Result{}}
	c.index()
	c.stats()
	c.run(CheckMonotonic, c.checkMonotonic)
	c.run(CheckUniqueToken, c.checkUniqueToken)
	c.run(CheckTokenOrder, c.checkTokenOrder)
	c.run(CheckWriteOwner, c.checkWriteOwner)
	c.run(CheckExclusive, c.checkExclusive)
	c.run(CheckSafeUntil, c.checkSafeUntil)
	c.run(CheckFailover, c.checkFailover)
	c.run(CheckLinearizable, c.checkLinearizable)
	return c.res
}

type grant struct {
	proc   string
	holder string
	wall   int64
}

// storeCall is one store call a node's recorder saw: its request line and,
// if the process lived to see it, its answer line.
type storeCall struct {
	req Event
	ans *Event
}

type writeOp struct {
	call   Event
	ret    *Event // nil: no answer recorded (the process died or froze)
	result string
}

type checker struct {
	h    *History
	opts CheckOptions
	res  *Result

	byProc map[string][]Event
	grants map[int64][]grant
	writes []*writeOp          // in call order (wall)
	byVal  map[string]*writeOp // by value (unique per write)
	logVal map[string][]RegisterEntry
	calls  []*storeCall          // in request order (wall)
	callBy map[string]*storeCall // by proc#req

	cur        *CheckOutcome
	curListed  int
	inconclude string
}

func (c *checker) run(name string, f func() string) {
	c.cur = &CheckOutcome{Name: name, Title: checkTitles[name]}
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
	c.byProc = map[string][]Event{}
	c.grants = map[int64][]grant{}
	c.byVal = map[string]*writeOp{}
	c.logVal = map[string][]RegisterEntry{}
	ev := append([]Event(nil), c.h.Events...)
	SortEvents(ev)
	calls := map[string]*writeOp{}  // proc#op
	reqs := map[string]*storeCall{} // proc#req
	c.callBy = reqs
	for _, e := range ev {
		p := e.Proc()
		c.byProc[p] = append(c.byProc[p], e)
		switch e.Kind {
		case EvRequest:
			sc := &storeCall{req: e}
			reqs[fmt.Sprintf("%s#%d", p, e.Req)] = sc
			c.calls = append(c.calls, sc)
		case EvAnswer:
			if sc, ok := reqs[fmt.Sprintf("%s#%d", p, e.Req)]; ok {
				a := e
				sc.ans = &a
			}
		case EvAcquired:
			c.grants[e.Token] = append(c.grants[e.Token], grant{proc: p, holder: e.Holder, wall: e.Wall})
		case EvWriteCall:
			w := &writeOp{call: e}
			calls[fmt.Sprintf("%s#%d", p, e.Op)] = w
			c.writes = append(c.writes, w)
			if e.Value != "" {
				c.byVal[e.Value] = w
			}
		case EvWriteReturn:
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
		s.FaultsByKind[f.Kind]++
	}
	for _, w := range c.writes {
		switch w.result {
		case Accepted:
			s.WritesAccepted++
		case Refused:
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
	s.FailoverBound = FailoverBound(c.h.Timings, c.h.Slack)
	s.Failovers = c.failovers()
}

// failovers measures, for each fault that hit the leader, the time from its
// start to the first grant of a newer term, if that came before the next
// fault began.
func (c *checker) failovers() []time.Duration {
	faults := append([]Fault(nil), c.h.Faults...)
	sort.Slice(faults, func(i, j int) bool { return faults[i].Start < faults[j].Start })
	var acquired []Event
	for _, e := range c.h.Events {
		if e.Kind == EvAcquired {
			acquired = append(acquired, e)
		}
	}
	SortEvents(acquired)
	var out []time.Duration
	for i, f := range faults {
		if !f.Leader {
			continue
		}
		limit := c.h.End
		if i+1 < len(faults) {
			limit = faults[i+1].Start
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

func (c *checker) checkMonotonic() string {
	byRes := map[string][]RegisterEntry{}
	n := 0
	for _, r := range c.h.Register {
		if r.Result == Accepted {
			byRes[r.Resource] = append(byRes[r.Resource], r)
			n++
		}
	}
	for _, res := range sortedKeys(byRes) {
		log := byRes[res]
		sort.Slice(log, func(i, j int) bool { return log[i].Seq < log[j].Seq })
		var max RegisterEntry
		for _, r := range log {
			if r.Token < max.Token {
				c.violate(Violation{Wall: r.Wall, Proc: r.Writer, Token: r.Token, Resource: res,
					Msg: fmt.Sprintf("resource %s accepted token %d from %s (write %s, seq %d) after it had accepted token %d from %s (seq %d): a stale write landed",
						res, r.Token, r.Writer, r.Value, r.Seq, max.Token, max.Writer, max.Seq)})
				continue
			}
			// One token from two writers is two terms (a store granted the
			// token twice): the register must admit only the first.
			if r.Token == max.Token && r.Writer != max.Writer {
				c.violate(Violation{Wall: r.Wall, Proc: r.Writer, Token: r.Token, Resource: res,
					Msg: fmt.Sprintf("resource %s accepted token %d from %s (write %s, seq %d) after it had accepted the same token from %s (seq %d): one token written by two terms",
						res, r.Token, r.Writer, r.Value, r.Seq, max.Writer, max.Seq)})
				continue
			}
			max = r
		}
	}
	return fmt.Sprintf("%d accepted writes on %d resources", n, len(byRes))
}

func (c *checker) checkUniqueToken() string {
	tokens := make([]int64, 0, len(c.grants))
	for t := range c.grants {
		tokens = append(tokens, t)
	}
	sort.Slice(tokens, func(i, j int) bool { return tokens[i] < tokens[j] })
	for _, t := range tokens {
		g := c.grants[t]
		if t < 1 {
			c.violate(Violation{Wall: g[0].wall, Proc: g[0].proc, Token: t, Msg: fmt.Sprintf("token %d granted to %s is below 1", t, g[0].proc)})
		}
		if len(g) > 1 {
			var who []string
			for _, x := range g {
				who = append(who, fmt.Sprintf("%s (%s)", x.proc, x.holder))
			}
			c.violate(Violation{Wall: g[1].wall, Proc: g[1].proc, Token: t,
				Msg: fmt.Sprintf("token %d was granted %d times: to %s", t, len(g), strings.Join(who, ", "))})
		}
	}
	return fmt.Sprintf("%d grants", len(tokens))
}

// termWindow is when process proc ran the guarded work of token: from its
// work-start to its work-stop (or the end of its history).
func (c *checker) inTerm(proc string, token int64, wall int64) bool {
	var start, stop int64 = -1, math.MaxInt64
	for _, e := range c.byProc[proc] {
		if e.Token != token {
			continue
		}
		switch e.Kind {
		case EvWorkStart:
			start = e.Wall
		case EvWorkStop:
			stop = e.Wall
		}
	}
	return start >= 0 && wall >= start && wall <= stop
}

func (c *checker) checkWriteOwner() string {
	n := 0
	for _, r := range c.h.Register {
		if r.Result != Accepted {
			continue
		}
		n++
		g := c.grants[r.Token]
		switch {
		case len(g) == 0:
			c.violate(Violation{Wall: r.Wall, Proc: r.Writer, Token: r.Token, Resource: r.Resource,
				Msg: fmt.Sprintf("resource %s accepted write %s with token %d from %s, but no node was ever granted token %d", r.Resource, r.Value, r.Token, r.Writer, r.Token)})
			continue
		case g[0].proc != r.Writer:
			c.violate(Violation{Wall: r.Wall, Proc: r.Writer, Token: r.Token, Resource: r.Resource,
				Msg: fmt.Sprintf("resource %s accepted write %s with token %d from %s, but token %d was granted to %s", r.Resource, r.Value, r.Token, r.Writer, r.Token, g[0].proc)})
			continue
		}
		w := c.byVal[r.Value]
		switch {
		case w == nil:
			c.violate(Violation{Wall: r.Wall, Proc: r.Writer, Token: r.Token, Resource: r.Resource,
				Msg: fmt.Sprintf("resource %s accepted write %s (token %d, from %s) that no node recorded sending", r.Resource, r.Value, r.Token, r.Writer)})
		case w.call.Token != r.Token || w.call.Proc() != r.Writer || w.call.Resource != r.Resource:
			c.violate(Violation{Wall: r.Wall, Proc: r.Writer, Token: r.Token, Resource: r.Resource,
				Msg: fmt.Sprintf("resource %s logged write %s as token %d from %s, but %s sent it to %s with token %d", r.Resource, r.Value, r.Token, r.Writer, w.call.Proc(), w.call.Resource, w.call.Token)})
		case !c.inTerm(r.Writer, r.Token, w.call.Wall):
			c.violate(Violation{Wall: w.call.Wall, Proc: r.Writer, Token: r.Token, Resource: r.Resource,
				Msg: fmt.Sprintf("write %s with token %d was sent by %s outside the guarded work of its term %d", r.Value, r.Token, r.Writer, r.Token)})
		}
	}
	acked := 0
	for _, w := range c.writes {
		if w.result != Accepted {
			continue
		}
		acked++
		found := false
		for _, r := range c.logVal[w.call.Value] {
			if r.Result == Accepted && r.Token == w.call.Token && r.Resource == w.call.Resource {
				found = true
			}
		}
		if !found {
			c.violate(Violation{Wall: w.ret.Wall, Proc: w.call.Proc(), Token: w.call.Token, Resource: w.call.Resource,
				Msg: fmt.Sprintf("%s was told its write %s (token %d) to %s was accepted, but the register has no such write", w.call.Proc(), w.call.Value, w.call.Token, w.call.Resource)})
		}
	}
	return fmt.Sprintf("%d writes accepted by the register, %d acknowledged to nodes", n, acked)
}

// pausedOver reports whether proc was frozen (a pause fault) at some moment
// of [from, to] (wall ns).
func (c *checker) pausedOver(proc string, from, to int64) bool {
	for _, f := range c.h.Faults {
		if f.Kind == FaultPause && f.Target == proc && f.Start <= to && f.End >= from {
			return true
		}
	}
	return false
}

func (c *checker) checkSafeUntil() string {
	t := c.h.Timings
	const arithSlack = int64(2 * time.Millisecond)
	n, exempt := 0, 0
	for _, proc := range sortedKeys(c.byProc) {
		lastAcquire, lastRenew := map[int64]Event{}, map[int64]Event{}
		for _, e := range c.byProc[proc] {
			switch e.Kind {
			case EvAnswer:
				if e.Err != "" || e.Token == 0 {
					continue
				}
				if sc := c.callOf(proc, e.Req); sc != nil {
					switch e.Call {
					case CallAcquire:
						lastAcquire[e.Token] = sc.req
					case CallRenew:
						lastRenew[e.Token] = sc.req
					}
				}
			case EvAcquired, EvRenewed:
				if e.SafeUntil == 0 {
					continue
				}
				n++
				// The request that granted or renewed the term is the last
				// one the recorder saw answered with success for this token.
				// It reached the store after the elector took its send time,
				// so safeUntil may be no later than the recorded request's
				// reading of the node's clock plus the renew deadline,
				// whatever latency the library reports.
				req, ok := lastAcquire[e.Token]
				what := "an acquire"
				if e.Kind == EvRenewed {
					req, ok = lastRenew[e.Token]
					what = "a renewal"
				}
				if !ok {
					c.violate(Violation{Wall: e.Wall, Proc: proc, Token: e.Token,
						Msg: fmt.Sprintf("%s reported %s of token %d (safeUntil %v on its clock), but its recorder saw no such request answered with success: the library reports a term the store did not give it",
							proc, what, e.Token, time.Duration(e.SafeUntil))})
					continue
				}
				limit := req.Clock + int64(t.RenewDeadline) + arithSlack
				if e.SafeUntil > limit {
					c.violate(Violation{Wall: e.Wall, Proc: proc, Token: e.Token,
						Msg: fmt.Sprintf("%s %s token %d with safeUntil %v on its clock, later than the recorded send of the request (%v) + renewDeadline = %v (the library reported a latency of %v): safeUntil must count from when the request was sent",
							proc, e.Kind, e.Token, time.Duration(e.SafeUntil), time.Duration(req.Clock), time.Duration(limit-arithSlack), time.Duration(e.Latency))})
				}
			case EvWriteCall, EvWorkStop:
				if e.SafeUntil == 0 {
					continue
				}
				n++
				over := e.Clock - e.SafeUntil
				if over <= 0 {
					continue
				}
				// Clock rates stay above 1/2 (validated), so the deadline
				// passed at most 2×over ago in real time.
				if c.pausedOver(proc, e.Wall-2*over-int64(t.WindDown), e.Wall) {
					exempt++
					continue
				}
				what := "sent write " + e.Value
				if e.Kind == EvWorkStop {
					what = "returned from its guarded work"
				}
				c.violate(Violation{Wall: e.Wall, Proc: proc, Token: e.Token,
					Msg: fmt.Sprintf("%s %s with token %d %v after its safeUntil, on its own clock, and it was not frozen then", proc, what, e.Token, time.Duration(over))})
			}
		}
	}
	return fmt.Sprintf("%d deadlines (%d overruns by frozen processes exempt)", n, exempt)
}

// callOf is the store call req of proc.
func (c *checker) callOf(proc string, req int64) *storeCall {
	return c.callBy[fmt.Sprintf("%s#%d", proc, req)]
}

// checkTokenOrder: if the answer of grant A was recorded before the request
// of grant B was sent, the store made A before B, so B's token must be higher.
// The request line is written before the call reaches the store and the
// answer line after it returns, so this order is never inferred wrongly from
// the order in which the lines were written. Grants whose answers overlap in
// time are not ordered: the store may have made them either way.
func (c *checker) checkTokenOrder() string {
	var grants []*storeCall
	for _, sc := range c.calls {
		if sc.req.Call == CallAcquire && sc.ans != nil && sc.ans.Err == "" && sc.ans.Token != 0 {
			grants = append(grants, sc)
		}
	}
	byAns := append([]*storeCall(nil), grants...)
	sort.SliceStable(byAns, func(i, j int) bool { return byAns[i].ans.Wall < byAns[j].ans.Wall })
	byReq := append([]*storeCall(nil), grants...)
	sort.SliceStable(byReq, func(i, j int) bool { return byReq[i].req.Wall < byReq[j].req.Wall })
	var best *storeCall // the highest token among the grants answered so far
	i := 0
	for _, g := range byReq {
		for i < len(byAns) && byAns[i].ans.Wall < g.req.Wall {
			if best == nil || byAns[i].ans.Token > best.ans.Token {
				best = byAns[i]
			}
			i++
		}
		if best != nil && g.ans.Token <= best.ans.Token {
			c.violate(Violation{Wall: g.ans.Wall, Proc: g.req.Proc(), Token: g.ans.Token,
				Msg: fmt.Sprintf("%s was granted token %d by an acquire sent %v after %s had been granted token %d (answer received first): tokens must rise in the order of grants",
					g.req.Proc(), g.ans.Token, time.Duration(g.req.Wall-best.ans.Wall), best.req.Proc(), best.ans.Token)})
		}
	}
	return fmt.Sprintf("%d grants recorded at the store's door", len(grants))
}

// liveWork is an interval (wall ns) in which a process ran a term's guarded
// work believing it held the lease, and was not frozen.
type liveWork struct {
	proc     string
	token    int64
	from, to int64
}

// crossing is the wall time at which the node's clock reached s, between
// two consecutive events of its process with a.Clock < s <= b.Clock. The
// node's clock is a function of real time (it runs on while the process is
// frozen), piecewise linear with changes only where an EvClockBefore/EvClock
// pair brackets them, so interpolating between neighbours is exact to within
// that bracket.
func crossing(a, b Event, s int64) int64 {
	if b.Clock <= a.Clock {
		return b.Wall
	}
	f := float64(s-a.Clock) / float64(b.Clock-a.Clock)
	return a.Wall + int64(f*float64(b.Wall-a.Wall))
}

// workIntervals are the live intervals of every term's guarded work.
func (c *checker) workIntervals() []liveWork {
	var out []liveWork
	for _, proc := range sortedKeys(c.byProc) {
		ev := c.byProc[proc]
		var pauses [][2]int64
		for _, f := range c.h.Faults {
			// The harness records a pause's start before SIGSTOP and its end
			// after SIGCONT: the span covers the whole freeze.
			if f.Kind == FaultPause && f.Target == proc {
				pauses = append(pauses, [2]int64{f.Start, f.End})
			}
		}
		for i, e := range ev {
			if e.Kind != EvWorkStart {
				continue
			}
			tok, su := e.Token, e.SafeUntil
			from, to := e.Wall, int64(-1)
			if su != 0 && e.Clock >= su {
				continue // started past its deadline: it never believed
			}
			for j := i + 1; j < len(ev) && to < 0; j++ {
				x := ev[j]
				if su != 0 && x.Clock >= su {
					to = crossing(ev[j-1], x, su)
					break
				}
				if x.Token != tok {
					continue
				}
				switch x.Kind {
				case EvWorkStop, EvLost:
					to = x.Wall
				case EvAcquired, EvRenewed, EvWriteCall, EvRenewFailed:
					if x.SafeUntil != 0 {
						su = x.SafeUntil
					}
				}
			}
			if to < 0 { // the history ends (killed): the last thing it recorded
				to = ev[len(ev)-1].Wall
			}
			for _, iv := range subtract(from, to, pauses) {
				out = append(out, liveWork{proc: proc, token: tok, from: iv[0], to: iv[1]})
			}
		}
	}
	return out
}

// subtract returns [from, to] without the spans in cut.
func subtract(from, to int64, cut [][2]int64) [][2]int64 {
	ivs := [][2]int64{{from, to}}
	for _, p := range cut {
		var next [][2]int64
		for _, iv := range ivs {
			if p[1] <= iv[0] || p[0] >= iv[1] {
				next = append(next, iv)
				continue
			}
			if iv[0] < p[0] {
				next = append(next, [2]int64{iv[0], p[0]})
			}
			if p[1] < iv[1] {
				next = append(next, [2]int64{p[1], iv[1]})
			}
		}
		ivs = next
	}
	return ivs
}

func (c *checker) checkExclusive() string {
	ivs := c.workIntervals()
	sort.SliceStable(ivs, func(i, j int) bool { return ivs[i].from < ivs[j].from })
	terms := map[string]bool{}
	for i, a := range ivs {
		terms[fmt.Sprintf("%s#%d", a.proc, a.token)] = true
		for _, b := range ivs[i+1:] {
			if b.from >= a.to {
				break
			}
			if a.proc == b.proc && a.token == b.token {
				continue
			}
			end := min(a.to, b.to)
			c.violate(Violation{Wall: b.from, Proc: b.proc, Token: b.token,
				Msg: fmt.Sprintf("%s (token %d) and %s (token %d) both ran guarded work believing they held the lease, neither frozen, for %v: %s started while %s still trusted its term",
					a.proc, a.token, b.proc, b.token, time.Duration(end-b.from), b.proc, a.proc)})
		}
	}
	return fmt.Sprintf("%d terms of guarded work, %d live intervals", len(terms), len(ivs))
}

// leaderTimes are the wall times of every grant and successful renewal:
// the moments a leader demonstrably existed.
func leaderTimes(h *History) []int64 {
	var lead []int64
	for _, e := range h.Events {
		if e.Kind == EvAcquired || e.Kind == EvRenewed {
			lead = append(lead, e.Wall)
		}
	}
	sort.Slice(lead, func(i, j int) bool { return lead[i] < lead[j] })
	return lead
}

// Recovery is the time from a fault's healing to the first grant or renewal
// at or after it, and false if there was none before the history ends.
func Recovery(h *History, f Fault) (time.Duration, bool) {
	lead := leaderTimes(h)
	i := sort.Search(len(lead), func(i int) bool { return lead[i] >= f.End })
	if i == len(lead) {
		return 0, false
	}
	return time.Duration(lead[i] - f.End), true
}

func (c *checker) checkFailover() string {
	bound := int64(FailoverBound(c.h.Timings, c.h.Slack))
	lead := leaderTimes(c.h)
	n := 0
	for _, f := range c.h.Faults {
		if f.Err != "" {
			continue // not injected
		}
		heal := f.End
		if heal+bound > c.h.End {
			continue // the run ended first; the harness leaves a quiet period to avoid this
		}
		n++
		i := sort.Search(len(lead), func(i int) bool { return lead[i] >= heal })
		if i < len(lead) && lead[i] <= heal+bound {
			continue
		}
		c.violate(Violation{Wall: heal, Proc: f.Target,
			Msg: fmt.Sprintf("no leader within %v after the %s fault on %s healed", time.Duration(bound), f.Kind, f.Target)})
	}
	return fmt.Sprintf("%d healed faults, bound %v", n, time.Duration(bound))
}

// Porcupine model of a fenced register: a write is accepted if and only if its
// term is the last accepted one or newer: its token is higher than the last
// accepted token, or equal to it and from the same writer (the holder of that
// term writing again). An equal token from another writer is another term
// that was granted the same token, and is refused. A read returns the last
// accepted write.

type regInput struct {
	Resource string
	Read     bool
	Token    int64
	Writer   string // the writing process: the holder of the term
	Value    string
}

type regOutput struct {
	Accepted bool
	Value    string
	Token    int64
}

type regState struct {
	Value  string
	Token  int64
	Writer string `json:",omitempty"` // the holder of the last accepted term
}

// RegisterModel is the porcupine model of one fenced register, partitioned
// by resource.
func RegisterModel() porcupine.Model {
	return porcupine.Model{
		Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
			byRes := map[string][]porcupine.Operation{}
			var order []string
			for _, op := range history {
				r := op.Input.(regInput).Resource
				if _, ok := byRes[r]; !ok {
					order = append(order, r)
				}
				byRes[r] = append(byRes[r], op)
			}
			out := make([][]porcupine.Operation, 0, len(order))
			for _, r := range order {
				out = append(out, byRes[r])
			}
			return out
		},
		Init: func() any { return regState{} },
		Step: func(state, input, output any) (bool, any) {
			s, in, out := state.(regState), input.(regInput), output.(regOutput)
			if in.Read {
				return out.Value == s.Value && out.Token == s.Token, s
			}
			accept := in.Token > s.Token || (in.Token == s.Token && in.Writer == s.Writer)
			if out.Accepted != accept {
				return false, s
			}
			if accept {
				return true, regState{Value: in.Value, Token: in.Token, Writer: in.Writer}
			}
			return true, s
		},
		DescribeOperation: func(input, output any) string {
			in, out := input.(regInput), output.(regOutput)
			if in.Read {
				return fmt.Sprintf("read(%s) -> %q #%d", in.Resource, out.Value, out.Token)
			}
			return fmt.Sprintf("write(%s, %q, #%d) -> accepted=%v", in.Resource, in.Value, in.Token, out.Accepted)
		},
		DescribeState: func(state any) string {
			s := state.(regState)
			return fmt.Sprintf("%q #%d", s.Value, s.Token)
		},
	}
}

// Operations turns a history into porcupine operations: each write with the
// answer its node got and each successful read. A write without a definite
// answer is resolved from the register's log: if the register accepted it, it
// is an accepted write whose return is unknown (concurrent with everything
// after its call); otherwise it had no effect and is left out.
func Operations(h *History) []porcupine.Operation {
	c := &checker{h: h, opts: CheckOptions{}, res: &Result{}}
	c.index()
	return c.operations()
}

func (c *checker) operations() []porcupine.Operation {
	var ops []porcupine.Operation
	const never = math.MaxInt64 / 2
	for _, w := range c.writes {
		in := regInput{Resource: w.call.Resource, Token: w.call.Token, Writer: w.call.Proc(), Value: w.call.Value}
		switch w.result {
		case Accepted, Refused:
			ops = append(ops, porcupine.Operation{Input: in, Call: w.call.Wall, Output: regOutput{Accepted: w.result == Accepted}, Return: w.ret.Wall})
		default:
			for _, r := range c.logVal[w.call.Value] {
				if r.Result == Accepted {
					ops = append(ops, porcupine.Operation{Input: in, Call: w.call.Wall, Output: regOutput{Accepted: true}, Return: never})
					break
				}
			}
		}
	}
	for _, r := range c.h.Reads {
		if r.Err != "" {
			continue
		}
		ops = append(ops, porcupine.Operation{Input: regInput{Resource: r.Resource, Read: true}, Call: r.Call,
			Output: regOutput{Value: r.Value, Token: r.Token}, Return: r.Return})
	}
	return ops
}

func (c *checker) checkLinearizable() string {
	ops := c.operations()
	model := RegisterModel()
	res := porcupine.CheckOperationsTimeout(model, ops, c.opts.LinearizeTimeout)
	c.res.Stats.Linearizable = string(res)
	switch res {
	case porcupine.Illegal:
		// Name the resources whose histories cannot be linearized.
		for _, part := range model.Partition(ops) {
			if porcupine.CheckOperationsTimeout(model, part, c.opts.LinearizeTimeout) != porcupine.Illegal {
				continue
			}
			r := part[0].Input.(regInput).Resource
			c.violate(Violation{Resource: r, Msg: fmt.Sprintf("the history of resource %s (%d operations) is not linearizable as a fenced register: some write was accepted or refused, or some read returned a value, that no order of the operations explains", r, len(part))})
		}
		if c.cur.Violations == 0 { // only the whole history is illegal (cannot happen with a sound partition)
			c.violate(Violation{Msg: fmt.Sprintf("the register's history of %d operations is not linearizable as a fenced register", len(ops))})
		}
	case porcupine.Unknown:
		c.inconclude = fmt.Sprintf("porcupine did not finish within %v", c.opts.LinearizeTimeout)
	}
	return fmt.Sprintf("%d operations", len(ops))
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
