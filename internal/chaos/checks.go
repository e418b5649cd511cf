package chaos

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"
)

func (c *checker) checkMonotonic() string {
	byRes := map[string][]registerEntry{}
	n := 0
	for _, r := range c.h.Register {
		if r.Result == writeAccepted {
			byRes[r.Resource] = append(byRes[r.Resource], r)
			n++
		}
	}
	for _, res := range sortedKeys(byRes) {
		log := byRes[res]
		sort.Slice(log, func(i, j int) bool { return log[i].Seq < log[j].Seq })
		var max registerEntry
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
		case evWorkStart:
			start = e.Wall
		case evWorkStop:
			stop = e.Wall
		}
	}
	return start >= 0 && wall >= start && wall <= stop
}

func (c *checker) checkWriteOwner() string {
	n := 0
	for _, r := range c.h.Register {
		if r.Result != writeAccepted {
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
		if w.result != writeAccepted {
			continue
		}
		acked++
		found := false
		for _, r := range c.logVal[w.call.Value] {
			if r.Result == writeAccepted && r.Token == w.call.Token && r.Resource == w.call.Resource {
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
		if f.Kind == faultPause && f.Target == proc && f.Start <= to && f.End >= from {
			return true
		}
	}
	return false
}

func (c *checker) checkSafeUntil() string {
	t := c.h.Timings
	const arithSlack = int64(2 * time.Millisecond)
	n, exempt, exemptStall := 0, 0, 0
	var longest int64
	for _, proc := range sortedKeys(c.byProc) {
		ev := c.byProc[proc]
		stalls := stallSpans(ev)
		for _, s := range stalls {
			// The longest the OS left a process unrun: a stall that a
			// pause (SIGSTOP) explains is not one.
			if !c.pausedOver(proc, s[0], s[1]) {
				longest = max(longest, s[1]-s[0])
			}
		}
		lastAcquire, lastRenew := map[int64]event{}, map[int64]event{}
		for k, e := range ev {
			switch e.Kind {
			case evAnswer:
				if e.Err != "" || e.Token == 0 {
					continue
				}
				if sc := c.callOf(proc, e.Req); sc != nil {
					switch e.Call {
					case callAcquire:
						lastAcquire[e.Token] = sc.req
					case callRenew:
						lastRenew[e.Token] = sc.req
					}
				}
			case evAcquired, evRenewed:
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
				if e.Kind == evRenewed {
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
			case evWriteCall, evWorkStop:
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
				// Not run by the OS: the process recorded stalls (spans in
				// which its stall recorder, due to run, did not) that add up,
				// within the window from when its clock read safeUntil -
				// windDown (the work is told to stop) to this event, to at
				// least the overrun in real time (from when its clock read
				// safeUntil to this event). Then, of the time since it was
				// told to stop, it ran no longer than the wind-down the
				// library asks for: it could not have stopped in time.
				// Anything short of that is a violation.
				deadline := wallAt(ev, k, e.SafeUntil)
				told := wallAt(ev, k, e.SafeUntil-int64(t.WindDown))
				realOver := e.Wall - deadline
				stalled := stalledWithin(stalls, told, e.Wall)
				if realOver > 0 && stalled >= realOver {
					exemptStall++
					continue
				}
				what := "sent write " + e.Value
				var lastW string
				if e.Kind == evWorkStop {
					what = "returned from its guarded work"
					// The work does not recall a write on its way: say
					// whether one was in flight at safeUntil (a late
					// answer delays the return).
					lastW = lastWriteTiming(ev, k, e.Token, e.SafeUntil, deadline)
				}
				c.violate(Violation{Wall: e.Wall, Proc: proc, Token: e.Token,
					Msg: fmt.Sprintf("%s %s with token %d %v after its safeUntil, on its own clock, and it was not frozen then (it recorded %v of stalls from when it was told to stop, less than the %v overrun in real time)%s",
						proc, what, e.Token, time.Duration(over), time.Duration(stalled), time.Duration(realOver), lastW)})
			}
		}
	}
	return fmt.Sprintf("%d deadlines (%d overruns by frozen processes exempt, %d by processes the OS did not run, longest stall %v)",
		n, exempt, exemptStall, time.Duration(longest).Round(time.Millisecond))
}

// lastWrite is the last write that the work of token sent before event k
// of one process's events, and its answer (nil if none came before k).
func lastWrite(ev []event, k int, token int64) (call, ret *event) {
	for j := k - 1; j >= 0; j-- {
		e := &ev[j]
		if e.Token != token {
			continue
		}
		switch e.Kind {
		case evWriteReturn:
			if ret == nil {
				ret = e
			}
		case evWriteCall:
			if ret != nil && e.Op == ret.Op {
				return e, ret
			}
			if ret == nil {
				return e, nil // unanswered
			}
		}
	}
	return nil, nil
}

// lastWriteTiming describes, for a late return of the work of token at
// event k, its last write relative to its safeUntil (safeUntil on the
// node's clock, deadline the wall time at which the clock read it); empty
// if the work sent none.
func lastWriteTiming(ev []event, k int, token, safeUntil, deadline int64) string {
	ms := func(d int64) time.Duration { return time.Duration(d).Round(time.Millisecond) }
	call, ret := lastWrite(ev, k, token)
	switch {
	case call == nil:
		return ""
	case ret == nil:
		return fmt.Sprintf("; its last write, %s, was sent %v before its safeUntil on its clock and was not answered before the return",
			call.Value, ms(safeUntil-call.Clock))
	}
	answered, side := ret.Wall-deadline, "after"
	if answered < 0 {
		answered, side = -answered, "before"
	}
	return fmt.Sprintf("; its last write, %s, was sent %v before its safeUntil on its clock and answered %v %s it in real time, %v before the return",
		call.Value, ms(safeUntil-call.Clock), ms(answered), side, ms(ev[k].Wall-ret.Wall))
}

// wallAt is the wall time at which the process's clock read s, where ev are
// the process's events and ev[k].Clock >= s: interpolated between the last
// event before with a reading below s and the one after it (see crossing).
// With no such event, the earliest the clock can have read s at a rate
// above 1/2: it only makes an overrun look longer.
func wallAt(ev []event, k int, s int64) int64 {
	j := k
	for j > 0 && ev[j-1].Clock >= s {
		j--
	}
	if j == 0 {
		return ev[k].Wall - 2*(ev[k].Clock-s)
	}
	return crossing(ev[j-1], ev[j], s)
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
		if sc.req.Call == callAcquire && sc.ans != nil && sc.ans.Err == "" && sc.ans.Token != 0 {
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
	_ [0]func() // not comparable: spares the binary an equality function

	proc     string
	token    int64
	from, to int64
	// why the belief ended at to (before frozen spans were cut out), and
	// the safeUntil (node clock) it had then: for the violation's story.
	ended string
	su    int64
}

// crossing is the wall time at which the node's clock reached s, between
// two consecutive events of its process with a.Clock < s <= b.Clock. The
// node's clock is a function of real time (it runs on while the process is
// frozen), piecewise linear with changes only where an evClockBefore/evClock
// pair brackets them, so interpolating between neighbours is exact to within
// that bracket.
func crossing(a, b event, s int64) int64 {
	if b.Clock <= a.Clock {
		return b.Wall
	}
	f := float64(s-a.Clock) / float64(b.Clock-a.Clock)
	return a.Wall + int64(f*float64(b.Wall-a.Wall))
}

// workIntervals are the live intervals of every term's guarded work.
//
// Recorded stalls (evStall) are not cut out of them as pauses are, and must
// not be: an interval ends when the node's clock passes safeUntil whether or
// not the process was run, so a stall never makes one longer, and a rival
// whose work overlaps a stalled holder's interval was granted the lease
// while the holder could still trust it (a store or library bug), which is
// what this check exists to report. Exempting stalls here would only hide
// such bugs on a loaded machine.
func (c *checker) workIntervals() []liveWork {
	var out []liveWork
	for _, proc := range sortedKeys(c.byProc) {
		ev := c.byProc[proc]
		var pauses [][2]int64
		for _, f := range c.h.Faults {
			// The harness records a pause's start before SIGSTOP and its end
			// after SIGCONT: the span covers the whole freeze.
			if f.Kind == faultPause && f.Target == proc {
				pauses = append(pauses, [2]int64{f.Start, f.End})
			}
		}
		for i, e := range ev {
			if e.Kind != evWorkStart {
				continue
			}
			tok, su := e.Token, e.SafeUntil
			from, to := e.Wall, int64(-1)
			if su != 0 && e.Clock >= su {
				continue // started past its deadline: it never believed
			}
			ended := ""
			for j := i + 1; j < len(ev) && to < 0; j++ {
				x := ev[j]
				if su != 0 && x.Clock >= su {
					to, ended = crossing(ev[j-1], x, su), "its clock passed safeUntil"
					break
				}
				if x.Token != tok {
					continue
				}
				switch x.Kind {
				case evWorkStop, evLost:
					to, ended = x.Wall, x.Kind
				case evAcquired, evRenewed, evWriteCall, evRenewFailed:
					if x.SafeUntil != 0 {
						su = x.SafeUntil
					}
				}
			}
			if to < 0 { // the history ends (killed): the last thing it recorded
				to, ended = ev[len(ev)-1].Wall, "its history ended"
			}
			for _, iv := range subtract(from, to, pauses) {
				out = append(out, liveWork{proc: proc, token: tok, from: iv[0], to: iv[1], ended: ended, su: su})
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
				Msg: fmt.Sprintf("%s (token %d) and %s (token %d) both ran guarded work believing they held the lease, neither frozen, for %v: %s started while %s still trusted its term. %s. %s",
					a.proc, a.token, b.proc, b.token, time.Duration(end-b.from), b.proc, a.proc, c.termStory(a, end), c.termStory(b, end))})
		}
	}
	return fmt.Sprintf("%d terms of guarded work, %d live intervals", len(terms), len(ivs))
}

// leaderTimes are the wall times of every grant and successful renewal:
// the moments a leader demonstrably existed.
func leaderTimes(h *history) []int64 {
	var lead []int64
	for _, e := range h.Events {
		if e.Kind == evAcquired || e.Kind == evRenewed {
			lead = append(lead, e.Wall)
		}
	}
	sort.Slice(lead, func(i, j int) bool { return lead[i] < lead[j] })
	return lead
}

// recovery is the time from a fault's healing to the first grant or renewal
// at or after it, and false if there was none before the history ends.
func recovery(h *history, f fault) (time.Duration, bool) {
	lead := leaderTimes(h)
	i := sort.Search(len(lead), func(i int) bool { return lead[i] >= f.End })
	if i == len(lead) {
		return 0, false
	}
	return time.Duration(lead[i] - f.End), true
}

func (c *checker) checkFailover() string {
	bound := int64(c.h.failoverBound())
	lead := leaderTimes(c.h)
	n, slow := 0, 0
	var longest int64
	eps := faultEpisodes(c.h.Faults, bound)
	for k, ep := range eps {
		heal := ep.end
		if heal+bound > c.h.End {
			continue // the run ended first; the harness leaves a quiet period to avoid this
		}
		n += ep.n
		i := sort.Search(len(lead), func(i int) bool { return lead[i] >= heal })
		if i < len(lead) && lead[i] <= heal+bound {
			continue
		}
		// The bound assumes the store answers at once. A store (or a
		// machine) that took d to answer a call sent after the heal, by a
		// process and to a store no fault was acting on, delays every
		// failover by up to d: such a leader is late by the store's
		// slowness, not by the library's. The summary counts them.
		d, due := c.storeAfterHeal(heal, bound)
		if d > 0 && i < len(lead) && lead[i] <= heal+bound+d {
			slow++
			longest = max(longest, d)
			continue
		}
		// A call that ran out of time says more: the store did not answer
		// it at all. The bound then runs from the end of the last such call,
		// and a fault that begins before that joins the episode, as one
		// that begins within the bound does (the next episode is judged).
		if due > heal+bound &&
			(i < len(lead) && lead[i] <= due || i == len(lead) && due > c.h.End || k+1 < len(eps) && eps[k+1].start < due) {
			slow++
			longest = max(longest, due-heal-bound)
			continue
		}
		f := ep.last
		what := fmt.Sprintf("the %s fault on %s healed", f.Kind, f.Target)
		if ep.n > 1 {
			what = fmt.Sprintf("the last of %d overlapping faults (%s on %s) healed", ep.n, f.Kind, f.Target)
		}
		// When the next leader came says how late it was: a few hundred
		// milliseconds is the machine, none at all the library.
		next := fmt.Sprintf("; none until the run ended, %v later", time.Duration(c.h.End-heal).Round(time.Millisecond))
		if i < len(lead) {
			next = fmt.Sprintf("; the next came %v after the heal", time.Duration(lead[i]-heal).Round(time.Millisecond))
		}
		c.violate(Violation{Wall: heal, Proc: f.Target,
			Msg: fmt.Sprintf("no leader within %v after %s%s%s", time.Duration(bound), what, next, c.slowNote(heal, heal+bound))})
	}
	out := fmt.Sprintf("%d healed faults, bound %v", n, time.Duration(bound))
	if slow > 0 {
		out += fmt.Sprintf(" (%d leaders later than the bound by no more than the store's slowest answer or stalls after the heal, longest %v)", slow, time.Duration(longest))
	}
	return out
}

// storeAfterHeal is what the store calls sent after the heal at heal say
// of the store, among the calls of a process no fault acted on while the
// call ran, to a store no fault acted on (a blackholed or paused process's
// calls are slow by design): slowest, the longest any of those sent within
// bound of the heal took to be answered (0 if none), and due, when a leader
// is due counting the store's stalls: heal + bound, or bound after the end
// of a call sent before then that ran out of time with no answer (the
// store did not answer at all), and so on from there.
func (c *checker) storeAfterHeal(heal, bound int64) (slowest, due int64) {
	due = heal + bound
	for _, sc := range c.calls { // in request order
		if sc.req.Wall > due {
			break
		}
		if sc.req.Wall < heal || sc.ans == nil || c.faulted(sc.req.Proc(), sc.req.Wall, sc.ans.Wall) {
			continue
		}
		if sc.req.Call == callEnqueue || sc.req.Call == callDequeue {
			continue // judged by the lease's own calls: a place grants nothing
		}
		if sc.req.Wall <= heal+bound {
			slowest = max(slowest, sc.ans.Wall-sc.req.Wall)
		}
		if strings.Contains(sc.ans.Err, "context deadline exceeded") {
			due = max(due, sc.ans.Wall+bound)
		}
	}
	return slowest, due
}

// faulted reports whether a fault acted on proc or on the store at some
// moment of [from, to].
func (c *checker) faulted(proc string, from, to int64) bool {
	for _, f := range c.h.Faults {
		if f.Err == "" && (f.Target == proc || f.Target == "store") && f.Start <= to && f.End >= from {
			return true
		}
	}
	return false
}

// slowNote is, for a failover violation's message, the slowest unfaulted
// store call in the window, if any.
func (c *checker) slowNote(from, to int64) string {
	if d, _ := c.storeAfterHeal(from, to-from); d > 0 {
		return fmt.Sprintf(" (the slowest store call sent in that time without a fault took %v)", time.Duration(d))
	}
	return ""
}

// episode is a run of faults that overlap, or follow one another within the
// failover bound: the failover check judges the heal of its last fault
// (while one fault of it is active, or a new one begins before the cluster
// had the bound to recover, nobody owes a leader).
type episode struct {
	start int64 // the first fault's start
	end   int64 // the last heal
	n     int   // faults in it
	last  fault // the fault that healed last
}

func faultEpisodes(faults []fault, bound int64) []episode {
	var fs []fault
	for _, f := range faults {
		if f.Err == "" { // a fault that failed was not injected
			fs = append(fs, f)
		}
	}
	sort.Slice(fs, func(i, j int) bool { return fs[i].Start < fs[j].Start })
	var out []episode
	for _, f := range fs {
		if k := len(out) - 1; k >= 0 && f.Start < out[k].end+bound {
			out[k].n++
			if f.End >= out[k].end {
				out[k].end, out[k].last = f.End, f
			}
			continue
		}
		out = append(out, episode{start: f.Start, end: f.End, n: 1, last: f})
	}
	return out
}

// rel is a wall time as seconds since the run began, for messages.
func (c *checker) rel(wall int64) string {
	return fmt.Sprintf("+%.3fs", float64(wall-c.h.Start)/1e9)
}

// termStory tells, for a violation's message, what the history says about
// the term of iv up to the wall time until: how it was granted and last
// renewed (the recorder's send and answer times), its safeUntil, how its
// belief ended, the faults on its process, and its last events. Enough to
// judge the violation without the history files.
func (c *checker) termStory(iv liveWork, until int64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s token %d: believed from %s to %s (%s; safeUntil %v on its clock)", iv.proc, iv.token, c.rel(iv.from), c.rel(iv.to), iv.ended, time.Duration(iv.su))
	var grant, renew *storeCall
	renewOK, renewBad := 0, 0
	var lastBad *event
	for _, sc := range c.calls {
		if sc.req.Proc() != iv.proc || sc.ans == nil {
			continue
		}
		switch {
		case sc.req.Call == callAcquire && sc.ans.Err == "" && sc.ans.Token == iv.token:
			grant = sc
		case sc.req.Call == callRenew && sc.req.Token == iv.token && sc.ans.Wall <= until:
			if sc.ans.Err == "" {
				renewOK++
				renew = sc
			} else {
				renewBad++
				lastBad = sc.ans
			}
		}
	}
	if grant != nil {
		fmt.Fprintf(&b, "; granted by acquire #%d sent %s (clock %v), answered %s", grant.req.Req, c.rel(grant.req.Wall), time.Duration(grant.req.Clock), c.rel(grant.ans.Wall))
	} else {
		b.WriteString("; no recorded acquire answered with this token")
	}
	if renew != nil {
		fmt.Fprintf(&b, "; %d renewals answered ok, the last #%d sent %s (clock %v), answered %s", renewOK, renew.req.Req, c.rel(renew.req.Wall), time.Duration(renew.req.Clock), c.rel(renew.ans.Wall))
	}
	if lastBad != nil {
		fmt.Fprintf(&b, "; %d renewals failed, the last answered %s: %s", renewBad, c.rel(lastBad.Wall), lastBad.Err)
	}
	var faults []string
	for _, f := range c.h.Faults {
		if (f.Target == iv.proc || f.Target == "store") && f.Start <= until && f.End >= iv.from-int64(10*time.Second) {
			faults = append(faults, fmt.Sprintf("%s %s..%s", f.Kind, c.rel(f.Start), c.rel(f.End)))
		}
	}
	if len(faults) > 0 {
		fmt.Fprintf(&b, "; faults on it or the store: %s", strings.Join(faults, ", "))
	}
	ev := c.byProc[iv.proc]
	k := sort.Search(len(ev), func(i int) bool { return ev[i].Wall > until })
	var last []string
	for _, e := range ev[max(0, k-8):k] {
		s := e.Kind + " " + c.rel(e.Wall)
		if e.Call != "" {
			s += fmt.Sprintf(" %s#%d", e.Call, e.Req)
		}
		if e.Token != 0 {
			s += fmt.Sprintf(" t%d", e.Token)
		}
		if e.SafeUntil != 0 {
			s += fmt.Sprintf(" su %v", time.Duration(e.SafeUntil))
		}
		if e.Err != "" {
			s += " err " + e.Err
		}
		last = append(last, s)
	}
	fmt.Fprintf(&b, "; its last events to then: %s", strings.Join(last, " | "))
	return b.String()
}
