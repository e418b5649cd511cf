package chaos

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// Hand-made histories: a clean one that passes every check, and variants
// that each break one property, to prove that each check can fail.

const base = int64(1_700_000_000) * int64(time.Second)

func at(s float64) int64 { return base + int64(s*1e9) }

func sec(s float64) int64 { return int64(s * 1e9) }

type histBuilder struct {
	h    *history
	reqN int64
}

// granted records a successful acquire (evAcquired) or renewal (evRenewed)
// of token by proc, answered at s for a request the recorder saw lat
// seconds earlier, with safeUntil counted from that request.
func (b *histBuilder) granted(proc string, s float64, kind, holder string, token int64, lat float64) {
	b.reqN++
	call, reqTok := callAcquire, int64(0)
	if kind == evRenewed {
		call, reqTok = callRenew, token
	}
	b.ev(proc, s-lat, event{Kind: evRequest, Req: b.reqN, Call: call, Token: reqTok})
	b.ev(proc, s, event{Kind: evAnswer, Req: b.reqN, Call: call, Token: token})
	b.ev(proc, s, event{Kind: kind, Holder: holder, Token: token, SafeUntil: sec(s - lat + 1.4), Latency: sec(lat)})
}

func (b *histBuilder) ev(proc string, s float64, e event) {
	slot, inc, _ := strings.Cut(proc, ".")
	e.Node = slot
	fmt.Sscanf(inc, "%d", &e.Inc)
	e.Wall = at(s)
	e.Mono = sec(s)
	e.Clock = sec(s) // rate 1, no offset: the node's clock reads seconds since start
	b.h.Events = append(b.h.Events, e)
}

func (b *histBuilder) write(proc string, s float64, op int64, res string, token int64, safeUntil float64, result string) string {
	v := fmt.Sprintf("%s#%d", proc, op)
	b.ev(proc, s, event{Kind: evWriteCall, Op: op, Token: token, Resource: res, Value: v, SafeUntil: sec(safeUntil)})
	b.ev(proc, s+0.002, event{Kind: evWriteReturn, Op: op, Token: token, Resource: res, Value: v, Result: result})
	return v
}

func (b *histBuilder) logged(res string, token int64, value, writer string, s float64) {
	b.h.Register = append(b.h.Register, registerEntry{Seq: int64(len(b.h.Register) + 1), Wall: at(s), Resource: res, Token: token, Value: value, Writer: writer, Result: writeAccepted})
}

func testTimings() timingsRecord {
	return timingsRecord{LeaseDuration: 2 * time.Second, RenewDeadline: 1400 * time.Millisecond, RenewInterval: 400 * time.Millisecond,
		RetryPeriod: 300 * time.Millisecond, Jitter: 0.2, WindDown: 400 * time.Millisecond}
}

// cleanHistory: n1 leads with token 1, is paused past its lease, n2 takes
// over with token 2, n1 wakes up and its late write is refused.
func cleanHistory() *history {
	b := &histBuilder{h: &history{Store: "test://", Seed: 1, Fenced: true, Timings: testTimings(), Slack: time.Second,
		Start: at(0), End: at(9), Resources: []string{"r0", "r1"}}}
	const lat = 0.005
	b.ev("n1.1", 0, event{Kind: evStart, Identity: "n1", Holder: "n1-aaaa"})
	b.ev("n2.1", 0, event{Kind: evStart, Identity: "n2", Holder: "n2-bbbb"})
	b.granted("n1.1", 1.0, evAcquired, "n1-aaaa", 1, lat)
	b.ev("n1.1", 1.0, event{Kind: evWorkStart, Token: 1, SafeUntil: sec(0.995 + 1.4)})
	v1 := b.write("n1.1", 1.1, 1, "r0", 1, 2.395, writeAccepted)
	b.logged("r0", 1, v1, "n1.1", 1.101)
	b.granted("n1.1", 1.4, evRenewed, "", 1, lat)
	v2 := b.write("n1.1", 1.5, 2, "r1", 1, 2.795, writeAccepted)
	b.logged("r1", 1, v2, "n1.1", 1.501)
	b.granted("n1.1", 1.8, evRenewed, "", 1, lat)
	b.granted("n1.1", 2.2, evRenewed, "", 1, lat)
	v3 := b.write("n1.1", 2.4, 3, "r0", 1, 3.595, writeAccepted)
	b.logged("r0", 1, v3, "n1.1", 2.401)
	// Paused from 2.5 s to 5.5 s: n2 takes over at 4.8 s.
	b.h.Faults = append(b.h.Faults, fault{Kind: faultPause, Target: "n1.1", Leader: true, Token: 1, Start: at(2.5), End: at(5.5), Detail: "SIGSTOP"})
	b.granted("n2.1", 4.8, evAcquired, "n2-bbbb", 2, lat)
	b.ev("n2.1", 4.8, event{Kind: evWorkStart, Token: 2, SafeUntil: sec(4.795 + 1.4)})
	v4 := b.write("n2.1", 4.9, 1, "r0", 2, 6.195, writeAccepted)
	b.logged("r0", 2, v4, "n2.1", 4.901)
	v5 := b.write("n2.1", 5.0, 2, "r1", 2, 6.195, writeAccepted)
	b.logged("r1", 2, v5, "n2.1", 5.001)
	for s := 5.2; s < 8.9; s += 0.4 {
		b.granted("n2.1", s, evRenewed, "", 2, lat)
	}
	// n1 wakes: its write, prepared before the pause, goes out late and is refused.
	b.write("n1.1", 5.5, 4, "r1", 1, 3.595, writeRefused)
	b.ev("n1.1", 5.503, event{Kind: evLost, Token: 1, SafeUntil: sec(3.595), Reason: "expired"})
	b.ev("n1.1", 5.504, event{Kind: evWorkStop, Token: 1, SafeUntil: sec(3.595)})
	v6 := b.write("n2.1", 6.0, 3, "r0", 2, 7.395, writeAccepted)
	b.logged("r0", 2, v6, "n2.1", 6.001)
	b.h.Reads = []readOp{
		{Call: at(3.0), Return: at(3.001), Resource: "r0", Value: v3, Token: 1},
		{Call: at(7.0), Return: at(7.001), Resource: "r0", Value: v6, Token: 2},
		{Call: at(7.0), Return: at(7.001), Resource: "r1", Value: v5, Token: 2},
	}
	sortEvents(b.h.Events)
	return b.h
}

func violationsOf(r *Result) map[string]int {
	m := map[string]int{}
	for _, c := range r.Checks {
		if c.Violations > 0 {
			m[c.Name] = c.Violations
		}
	}
	return m
}

func TestCheckCleanHistoryPasses(t *testing.T) {
	h := cleanHistory()
	r := checkHistory(h, checkOptions{})
	if !r.OK() {
		t.Fatalf("clean history has violations: %v", r.Violations)
	}
	if len(r.Checks) != len(checkNames) {
		t.Fatalf("ran %d checks, want %d", len(r.Checks), len(checkNames))
	}
	for i, c := range r.Checks {
		if c.Name != checkNames[i] || c.Checked == "" || c.Title == "" {
			t.Errorf("check %d = %+v", i, c)
		}
	}
	s := r.Stats
	if s.WritesAccepted != 6 || s.WritesRefused != 1 || s.WritesUnknown != 0 || s.Terms != 2 || s.Processes != 2 || s.Reads != 3 {
		t.Errorf("stats = %+v", s)
	}
	if s.Linearizable != string(porcupine.Ok) {
		t.Errorf("linearizable = %q", s.Linearizable)
	}
	if len(s.Failovers) != 1 || s.Failovers[0] != 2300*time.Millisecond {
		t.Errorf("failovers = %v, want [2.3s]", s.Failovers)
	}
	// The late write after the pause was exempt, and said so.
	for _, c := range r.Checks {
		if c.Name == chkSafeUntil && !strings.Contains(c.Checked, "2 overruns by frozen processes exempt") {
			t.Errorf("safe-until examined %q", c.Checked)
		}
	}
	sum := summaryLine(h, r)
	for _, want := range []string{"PASS", "faults 1 (pause 1)", "writes 6 accepted, 1 refused, 0 unknown", "violations 0", "failover p50 2.3s p99 2.3s max 2.3s (n=1)", "linearizable Ok"} {
		if !strings.Contains(sum, want) {
			t.Errorf("summary %q lacks %q", sum, want)
		}
	}
}

// Each variant breaks one property; the named check must catch it.
func TestCheckCatchesEachViolation(t *testing.T) {
	cases := []struct {
		name   string
		break_ func(h *history)
		want   []string // checks that must fail
		other  bool     // other checks may fail too
	}{
		{
			name: "stale write accepted (fencing off)",
			break_: func(h *history) {
				for i := range h.Events {
					if h.Events[i].Value == "n1.1#4" && h.Events[i].Kind == evWriteReturn {
						h.Events[i].Result = writeAccepted
					}
				}
				h.Register = append(h.Register, registerEntry{Seq: 99, Wall: at(5.501), Resource: "r1", Token: 1, Value: "n1.1#4", Writer: "n1.1", Result: writeAccepted})
				h.Reads[2].Value, h.Reads[2].Token = "n1.1#4", 1 // what an unfenced register holds
			},
			want: []string{chkMonotonic, chkLinearizable},
		},
		{
			name: "token granted twice",
			break_: func(h *history) {
				b := &histBuilder{h: h, reqN: 100}
				b.granted("n3.1", 6, evAcquired, "n3-cccc", 2, 0.005)
				sortEvents(h.Events)
			},
			// Granted after token 2's answer came back: not rising either.
			want: []string{chkUniqueToken, chkTokenOrder},
		},
		{
			name: "one token written by two terms (register admits token == highest from another writer)",
			break_: func(h *history) {
				// The store grants token 2 again, to n3 (a store that lost
				// data), and the register admits n3's write with it after
				// n2's: two terms wrote with one token.
				b := &histBuilder{h: h, reqN: 100}
				b.granted("n3.1", 6.2, evAcquired, "n3-cccc", 2, 0.005)
				v := b.write("n3.1", 6.3, 1, "r0", 2, 7.595, writeAccepted)
				b.logged("r0", 2, v, "n3.1", 6.301)
				h.Reads[1].Value = v // what such a register holds at 7 s
				sortEvents(h.Events)
			},
			want:  []string{chkUniqueToken, chkMonotonic, chkLinearizable},
			other: true, // write-owner: token 2 was granted to n2 first
		},
		{
			name: "a later grant with a lower token",
			break_: func(h *history) {
				b := &histBuilder{h: h, reqN: 100}
				b.granted("n3.1", 6, evAcquired, "n3-cccc", 4, 0.005)
				b.granted("n3.1", 7, evAcquired, "n3-cccc", 3, 0.005) // sent after token 4 was granted
				sortEvents(h.Events)
			},
			want: []string{chkTokenOrder},
		},
		{
			name: "a grant no store call gave",
			break_: func(h *history) {
				// The library reports a term its recorder never saw granted.
				h.Events = append(h.Events, event{Wall: at(6), Node: "n3", Inc: 1, Kind: evAcquired, Holder: "n3-cccc", Token: 3, SafeUntil: sec(7.395), Latency: sec(0.005), Clock: sec(6)})
				sortEvents(h.Events)
			},
			want: []string{chkSafeUntil},
		},
		{
			name: "two live leaders at once (a store that granted before expiry)",
			break_: func(h *history) {
				// n1 is never paused: it keeps renewing, and the store grants
				// token 2 to n2 at 4.8 s anyway. n1 learns at 5.3 s.
				h.Faults = nil
				var keep []event
				for _, e := range h.Events {
					if e.Node == "n1" && e.Wall > at(2.45) {
						continue
					}
					keep = append(keep, e)
				}
				h.Events = keep
				b := &histBuilder{h: h, reqN: 100}
				for s := 2.6; s < 5.25; s += 0.4 {
					b.granted("n1.1", s, evRenewed, "", 1, 0.005)
				}
				b.ev("n1.1", 5.3, event{Kind: evRenewFailed, Token: 1, SafeUntil: sec(5.395 - 0.4 + 1.4), Err: "not held"})
				b.ev("n1.1", 5.3, event{Kind: evLost, Token: 1, SafeUntil: sec(5.395 - 0.4 + 1.4), Reason: "lost"})
				b.ev("n1.1", 5.31, event{Kind: evWorkStop, Token: 1, SafeUntil: sec(5.395 - 0.4 + 1.4)})
				sortEvents(h.Events)
			},
			want: []string{chkExclusive},
		},
		{
			name: "safeUntil from the answer, hidden behind a false latency",
			break_: func(h *history) {
				// The recorder saw n2's renewal sent at 5.0 s; the library
				// claims no latency and counts from the answer at 5.2 s. The
				// library's own numbers are consistent: only the recorder
				// shows the lie.
				var req int64
				for i := range h.Events {
					e := &h.Events[i]
					if e.Kind == evRenewed && e.Node == "n2" && e.Wall == at(5.2) {
						e.Latency = 0
						e.SafeUntil = e.Clock + sec(1.4)
					}
					if e.Kind == evAnswer && e.Node == "n2" && e.Wall == at(5.2) {
						req = e.Req
					}
				}
				for i := range h.Events {
					e := &h.Events[i]
					if e.Kind == evRequest && e.Node == "n2" && e.Req == req {
						e.Wall, e.Mono, e.Clock = at(5.0), sec(5.0), sec(5.0)
					}
				}
				sortEvents(h.Events)
			},
			want: []string{chkSafeUntil},
		},
		{
			name: "write with another term's token",
			break_: func(h *history) {
				// n1 sends a write with token 2, which was granted to n2.
				for i := range h.Events {
					if h.Events[i].Value == "n1.1#3" {
						h.Events[i].Token = 2
					}
				}
				for i := range h.Register {
					if h.Register[i].Value == "n1.1#3" {
						h.Register[i].Token = 2
					}
				}
			},
			want:  []string{chkWriteOwner},
			other: true, // token 2 before token 1's writes also breaks the register's order
		},
		{
			name: "write after safeUntil without a pause",
			break_: func(h *history) {
				for i := range h.Events {
					if h.Events[i].Value == "n2.1#3" && h.Events[i].Kind == evWriteCall {
						h.Events[i].SafeUntil = h.Events[i].Clock - sec(0.1)
					}
				}
			},
			want: []string{chkSafeUntil},
		},
		{
			name: "safeUntil counted from the answer, not the send",
			break_: func(h *history) {
				for i := range h.Events {
					e := &h.Events[i]
					if e.Kind == evRenewed && e.Node == "n2" && e.Wall == at(5.2) {
						e.Latency = sec(0.2)
						e.SafeUntil = e.Clock + sec(1.4) // receipt + renewDeadline: 0.2 s too late
					}
				}
			},
			want: []string{chkSafeUntil},
		},
		{
			name: "no leader after a fault heals",
			break_: func(h *history) {
				leaderlessAfterBlackhole(h, 12)
			},
			want: []string{chkFailover},
		},
		{
			name: "read of an overwritten value",
			break_: func(h *history) {
				h.Reads = append(h.Reads, readOp{Call: at(8), Return: at(8.001), Resource: "r0", Value: "n1.1#3", Token: 1})
			},
			want: []string{chkLinearizable},
		},
		{
			name: "acknowledged write missing from the register",
			break_: func(h *history) {
				var keep []registerEntry
				for _, r := range h.Register {
					if r.Value != "n2.1#3" {
						keep = append(keep, r)
					}
				}
				h.Register = keep
			},
			want:  []string{chkWriteOwner},
			other: true, // the read at 7 s then sees a value nobody wrote
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := cleanHistory()
			tc.break_(h)
			r := checkHistory(h, checkOptions{})
			got := violationsOf(r)
			for _, w := range tc.want {
				if got[w] == 0 {
					t.Errorf("check %s found nothing; violations: %v", w, r.Violations)
				}
			}
			if !tc.other {
				for name := range got {
					found := false
					for _, w := range tc.want {
						found = found || w == name
					}
					if !found {
						t.Errorf("unexpected violation of %s: %v", name, r.Violations)
					}
				}
			}
			if r.OK() || !strings.Contains(summaryLine(h, r), "FAIL") {
				t.Errorf("summary does not fail: %s", summaryLine(h, r))
			}
		})
	}
}

// A store that grants one token twice, with a register that tells the terms
// apart: the second term's write with that token is refused, and the
// register's checks (its order, linearizability against the fenced-register
// model) find a correct register. Only the store is blamed. On the old,
// number-only model (accept token >= highest) the refusal itself was
// "illegal" and blamed the register.
func TestCheckEqualTokenFromAnotherWriterRefusedIsCorrect(t *testing.T) {
	h := cleanHistory()
	b := &histBuilder{h: h, reqN: 100}
	b.granted("n3.1", 6.2, evAcquired, "n3-cccc", 2, 0.005)
	b.write("n3.1", 6.3, 1, "r0", 2, 7.595, writeRefused)
	sortEvents(h.Events)
	r := checkHistory(h, checkOptions{})
	got := violationsOf(r)
	if got[chkUniqueToken] == 0 {
		t.Errorf("token-unique did not catch token 2 granted twice: %v", r.Violations)
	}
	if got[chkMonotonic] != 0 || got[chkLinearizable] != 0 {
		t.Errorf("a register that refused the equal token from another writer was blamed: %v", r.Violations)
	}
	if r.Stats.Linearizable != string(porcupine.Ok) {
		t.Errorf("linearizable = %q, want Ok", r.Stats.Linearizable)
	}
}

// The fenced-register model, step by step: the term (token, writer) decides.
func TestRegisterModelIdentifiesTheTerm(t *testing.T) {
	step := registerModel().Step
	s := any(regState{})
	for i, w := range []struct {
		token  int64
		writer string
		accept bool
	}{
		{3, "n1.1", true},
		{3, "n2.1", false}, // the same token from another term
		{3, "n1.1", true},  // the same term writing again
		{4, "n2.1", true},
		{4, "n1.1", false},
		{2, "n2.1", false},
	} {
		in := regInput{Resource: "r", Token: w.token, Writer: w.writer, Value: fmt.Sprintf("v%d", i)}
		ok, next := step(s, in, regOutput{Accepted: w.accept})
		if !ok {
			t.Fatalf("step %d: write token %d from %s: the model does not allow accepted=%v", i, w.token, w.writer, w.accept)
		}
		if bad, _ := step(s, in, regOutput{Accepted: !w.accept}); bad {
			t.Fatalf("step %d: write token %d from %s: the model allows accepted=%v too", i, w.token, w.writer, !w.accept)
		}
		s = next
	}
}

// A holder frozen (SIGSTOP) while a rival starts is not live: the
// exclusive-work check leaves the frozen time out, and its belief ends when
// its own clock (which runs on while it is frozen) passes safeUntil.
func TestExclusiveWorkExemptsAFrozenHolder(t *testing.T) {
	h := cleanHistory()
	h.Faults = nil
	var keep []event
	for _, e := range h.Events {
		if e.Node == "n1" && e.Wall > at(2.45) {
			continue
		}
		keep = append(keep, e)
	}
	h.Events = keep
	b := &histBuilder{h: h, reqN: 100}
	for s := 2.6; s < 4.65; s += 0.4 { // last renewal at 4.6 s: safeUntil 5.995 s
		b.granted("n1.1", s, evRenewed, "", 1, 0.005)
	}
	// Frozen from 4.7 s to 6.5 s; n2 starts at 4.8 s; n1 wakes past its
	// safeUntil, so its late write and its work's end do not count.
	h.Faults = []fault{{Kind: faultPause, Target: "n1.1", Leader: true, Token: 1, Start: at(4.7), End: at(6.5)}}
	b.write("n1.1", 6.5, 9, "r1", 1, 5.795, writeRefused)
	b.ev("n1.1", 6.51, event{Kind: evLost, Token: 1, SafeUntil: sec(5.795), Reason: "expired"})
	b.ev("n1.1", 6.52, event{Kind: evWorkStop, Token: 1, SafeUntil: sec(5.795)})
	sortEvents(h.Events)
	r := checkHistory(h, checkOptions{})
	if got := violationsOf(r); got[chkExclusive] != 0 {
		t.Fatalf("a frozen holder counted as live: %v", r.Violations)
	}
	// The same, not frozen: now n1 was live and believing until 5.795 s.
	h.Faults = nil
	r = checkHistory(h, checkOptions{})
	if got := violationsOf(r); got[chkExclusive] == 0 {
		t.Fatalf("a live holder overlapping its successor was not caught: %v", r.Violations)
	}
	for _, v := range r.Violations {
		if v.Check == chkExclusive && !strings.Contains(v.Msg, "n1.1 (token 1) and n2.1 (token 2)") {
			t.Errorf("violation names the wrong terms: %s", v)
		}
		// The message carries what it takes to judge it without the files:
		// both terms' grants, renewals, safeUntil, end of belief and last events.
		for _, want := range []string{
			"n1.1 token 1: believed from +1.000s to +5.995s (its clock passed safeUntil; safeUntil 5.995s on its clock); granted by acquire #1 sent +0.995s",
			"the last #106 sent +4.595s (clock 4.595s), answered +4.600s",
			"n2.1 token 2: believed from +4.800s",
			"its last events to then: ",
			"renewed +4.600s t1 su 5.995s",
		} {
			if v.Check == chkExclusive && !strings.Contains(v.Msg, want) {
				t.Errorf("violation lacks %q: %s", want, v)
			}
		}
	}
}

// Two grants whose request-to-answer spans overlap are not ordered: the
// store may have made either first, so any order of their tokens is fine.
func TestTokenOrderIgnoresOverlappingGrants(t *testing.T) {
	h := cleanHistory()
	b := &histBuilder{h: h, reqN: 100}
	b.granted("n3.1", 6.1, evAcquired, "n3-cccc", 4, 0.2)   // sent 5.9, answered 6.1
	b.granted("n4.1", 6.05, evAcquired, "n4-dddd", 3, 0.05) // sent 6.0, answered 6.05
	sortEvents(h.Events)
	r := checkHistory(h, checkOptions{})
	if got := violationsOf(r); got[chkTokenOrder] != 0 {
		t.Fatalf("overlapping grants were ordered: %v", r.Violations)
	}
	// Sent after the other's answer: ordered, and out of order.
	b.granted("n4.1", 6.3, evAcquired, "n4-dddd", 3, 0.05)
	sortEvents(h.Events)
	r = checkHistory(h, checkOptions{})
	if got := violationsOf(r); got[chkTokenOrder] == 0 {
		t.Fatalf("a later grant with a lower token was not caught: %v", r.Violations)
	}
}

func TestOperationsResolveUnknownWritesFromTheLog(t *testing.T) {
	h := cleanHistory()
	// n2's third write got no answer, but the register logged it: it must be
	// an accepted write with an open-ended return. A write without an answer
	// that the register never logged had no effect and is left out.
	for i := range h.Events {
		if h.Events[i].Value == "n2.1#3" && h.Events[i].Kind == evWriteReturn {
			h.Events[i].Result = writeUnknown
		}
	}
	b := &histBuilder{h: h}
	b.ev("n2.1", 6.5, event{Kind: evWriteCall, Op: 4, Token: 2, Resource: "r1", Value: "n2.1#4", SafeUntil: sec(7.395)})
	sortEvents(h.Events)
	ops := operationsOf(h)
	var found bool
	for _, op := range ops {
		in := op.Input.(regInput)
		if in.Value == "n2.1#4" {
			t.Errorf("write with no answer and no log entry was included: %+v", op)
		}
		if in.Value == "n2.1#3" {
			found = true
			if !op.Output.(regOutput).Accepted || op.Return < at(100) {
				t.Errorf("unknown write resolved to %+v", op)
			}
		}
	}
	if !found {
		t.Error("the logged write with no answer is missing")
	}
	r := checkHistory(h, checkOptions{})
	if !r.OK() {
		t.Errorf("violations: %v", r.Violations)
	}
	if r.Stats.WritesUnknown != 2 {
		t.Errorf("unknown writes = %d, want 2", r.Stats.WritesUnknown)
	}
}

func TestHistoryRoundTripAndReport(t *testing.T) {
	h := cleanHistory()
	var buf bytes.Buffer
	if err := writeHistory(&buf, h); err != nil {
		t.Fatal(err)
	}
	h2, err := readHistory(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(h2.Events) != len(h.Events) || h2.Timings != h.Timings || len(h2.Faults) != 1 {
		t.Fatalf("round trip lost data")
	}
	r := checkHistory(h2, checkOptions{})
	var page bytes.Buffer
	if err := writeReport(&page, h2, r); err != nil {
		t.Fatal(err)
	}
	s := page.String()
	for _, want := range []string{"<svg", "PASS", "#1</text>", "#2</text>", "refused: n1.1 wrote n1.1#4 with token 1", "pause on n1.1", chkLinearizable} {
		if !strings.Contains(s, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	// Self-contained: no scripts, no external resources (the SVG namespace
	// is a name, not a fetch).
	bare := strings.ReplaceAll(s, `xmlns="http://www.w3.org/2000/svg"`, "")
	for _, bad := range []string{"<script", "http://", "https://", "src=", "<link"} {
		if strings.Contains(bare, bad) {
			t.Errorf("report is not self-contained: it contains %q", bad)
		}
	}
}

func TestReadEventsSkipsATruncatedLastLine(t *testing.T) {
	in := `{"wall":1,"ev":"start","node":"n1","inc":1}
{"wall":2,"ev":"acquired","node":"n1","inc":1,"token":3}
{"wall":3,"ev":"write-ca`
	ev, err := readEvents(strings.NewReader(in))
	if err != nil || len(ev) != 2 || ev[1].Token != 3 {
		t.Fatalf("readEvents = %v, %v", ev, err)
	}
	if _, err := readEvents(strings.NewReader("garbage\n" + in)); err == nil {
		t.Fatal("a bad line in the middle was accepted")
	}
}

func TestPercentile(t *testing.T) {
	d := []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	if percentile(d, 0.5) != 5 || percentile(d, 0.99) != 10 || percentile(nil, 0.5) != 0 || percentile(d[:1], 0.99) != 1 {
		t.Fatal("wrong percentiles")
	}
}

// A write sent after safeUntil by a process the OS did not run is exempt
// only when the process's own recorded stalls, from when it was told to stop
// (safeUntil - windDown) to the write, add up to at least the overrun.
func TestSafeUntilExemptsOnlyAStallAsLongAsTheOverrun(t *testing.T) {
	// n2.1's write at 6.0 s goes out 100 ms after its safeUntil (5.9 s);
	// it was told to stop at 5.5 s.
	late := func(stalls ...[2]float64) *history {
		h := cleanHistory()
		for i := range h.Events {
			if h.Events[i].Value == "n2.1#3" && h.Events[i].Kind == evWriteCall {
				h.Events[i].SafeUntil = h.Events[i].Clock - sec(0.1)
			}
		}
		b := &histBuilder{h: h}
		for _, s := range stalls {
			b.ev("n2.1", s[1], event{Kind: evStall, StallFrom: at(s[0]), StallTo: at(s[1])})
		}
		sortEvents(h.Events)
		return h
	}
	for _, tc := range []struct {
		name   string
		stalls [][2]float64
		exempt bool
	}{
		{"no stall", nil, false},
		{"a stall shorter than the overrun", [][2]float64{{5.86, 5.95}}, false},
		{"stalls adding up to less than the overrun", [][2]float64{{5.6, 5.64}, {5.9, 5.95}}, false},
		{"a long stall before it was told to stop", [][2]float64{{4.9, 5.45}}, false},
		{"a long stall mostly before it was told to stop", [][2]float64{{4.9, 5.55}}, false},
		{"a stall as long as the overrun", [][2]float64{{5.88, 5.99}}, true},
		{"stalls adding up to the overrun", [][2]float64{{5.52, 5.58}, {5.9, 5.95}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := checkHistory(late(tc.stalls...), checkOptions{})
			got := violationsOf(r)[chkSafeUntil]
			var checked string
			for _, c := range r.Checks {
				if c.Name == chkSafeUntil {
					checked = c.Checked
				}
			}
			if tc.exempt {
				if got != 0 {
					t.Fatalf("a write late by less than its stalls was reported: %v", r.Violations)
				}
				if !strings.Contains(checked, "2 overruns by frozen processes exempt, 1 by processes the OS did not run, longest stall 110ms") &&
					!strings.Contains(checked, ", 1 by processes the OS did not run, longest stall 60ms") {
					t.Errorf("safe-until examined %q", checked)
				}
				return
			}
			if got != 1 {
				t.Fatalf("safe-until violations = %d, want 1 (the write late by more than its stalls): %v", got, r.Violations)
			}
			if !strings.Contains(checked, "2 overruns by frozen processes exempt, 0 by processes the OS did not run") {
				t.Errorf("safe-until examined %q", checked)
			}
		})
	}
}

// TestSafeUntilReportsTheLastWrite: the work does not recall a write on
// its way, so a late return says where its last write was at safeUntil
// (CI once failed with a late return, no stall recorded, and no history
// kept). A write in flight at safeUntil exempts nothing: the check reports
// each case, with the write's timing.
func TestSafeUntilReportsTheLastWrite(t *testing.T) {
	// n2.1 is told to stop at 8.5 s (safeUntil 8.9 s on every event below);
	// its last write is sent at 8.45 s and answered at ret (0: never), and
	// the work returns at 8.981 s.
	late := func(ret float64, write bool) *history {
		h := cleanHistory()
		b := &histBuilder{h: h}
		if write {
			b.ev("n2.1", 8.45, event{Kind: evWriteCall, Op: 9, Token: 2, Resource: "r1", Value: "n2.1#9", SafeUntil: sec(8.9)})
			if ret > 0 {
				b.ev("n2.1", ret, event{Kind: evWriteReturn, Op: 9, Token: 2, Resource: "r1", Value: "n2.1#9", Result: writeUnknown, Err: "context deadline exceeded"})
			}
		}
		b.ev("n2.1", 8.981, event{Kind: evWorkStop, Token: 2, SafeUntil: sec(8.9)})
		sortEvents(h.Events)
		return h
	}
	for _, tc := range []struct {
		name string
		h    *history
		says string
	}{
		{"answered after safeUntil", late(8.98, true), "its last write, n2.1#9, was sent 450ms before its safeUntil on its clock and answered 80ms after it in real time, 1ms before the return"},
		{"not answered", late(0, true), "its last write, n2.1#9, was sent 450ms before its safeUntil on its clock and was not answered before the return"},
		{"the last write long before", late(0, false), "its last write, n2.1#3, was sent 2.9s before its safeUntil on its clock and answered 2.898s before it in real time, 2.979s before the return"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := checkHistory(tc.h, checkOptions{})
			if got := violationsOf(r)[chkSafeUntil]; got != 1 || !strings.HasSuffix(r.Violations[0].Msg, tc.says) {
				t.Fatalf("safe-until violations = %d (%v), want 1 ending %q", got, r.Violations, tc.says)
			}
		})
	}
}

// TestFailoverAllowsTheStoresSlowness: a leader later than the bound is a
// violation, unless a store call sent after the heal by an unfaulted
// process took at least as long as the lateness (the store, or the
// machine, was slow); a faster call excuses nothing.
func TestFailoverAllowsTheStoresSlowness(t *testing.T) {
	var h *history
	late := func(callTook float64) *Result {
		h = cleanHistory()
		// Healed at 6.5 s; the bound (3.36 s) ends at 9.86 s; n1 leads
		// again at 11 s, 1.14 s late.
		leaderlessAfterBlackhole(h, 14)
		b := &histBuilder{h: h, reqN: 100}
		b.ev("n1.1", 7.0, event{Kind: evRequest, Req: 101, Call: callAcquire})
		b.ev("n1.1", 7.0+callTook, event{Kind: evAnswer, Req: 101, Call: callAcquire, Err: "held"})
		b.granted("n1.1", 11.0, evAcquired, "n1-aaaa", 3, 0.005)
		sortEvents(h.Events)
		return checkHistory(h, checkOptions{})
	}
	if r := late(1.5); violationsOf(r)[chkFailover] != 0 {
		t.Errorf("a leader 1.14 s late after a 1.5 s store call: %v, want it allowed", r.Violations)
	} else if c := outcome(r, chkFailover); !strings.Contains(c.Checked, "1 leaders later than the bound") {
		t.Errorf("failover's summary %q does not count the late leader", c.Checked)
	}
	if r := late(0.5); violationsOf(r)[chkFailover] != 1 {
		t.Errorf("a leader 1.14 s late after a 0.5 s store call: violations %v, want one failover", violationsOf(r))
	} else if msg := r.Violations[0].Msg; !strings.Contains(msg, "the next came 4.5s after the heal") {
		t.Errorf("failover violation %q does not say when the next leader came (4.5 s after the heal)", msg)
	} else if d := failoverTimeline(h, r.Violations[0]); !strings.Contains(d, "   +500.0 n1.1   request acquire#101") ||
		!strings.Contains(d, "  +1000.0 n1.1   answer acquire#101 err=\"held\"") ||
		!strings.Contains(d, "  +4500.0 n1.1   acquired token=3") || strings.Contains(d, "+4500.1") {
		t.Errorf("failover violation's timeline does not show the late acquire's request, answer and grant, up to the grant:\n%s", d)
	} else if d := strings.Join(failoverDigest(h, r.Violations[0]), "\n"); !strings.Contains(d, "to 4.5s after it") ||
		!strings.Contains(d, "\nn1.1: [acquire: held x1] [acquire: ok x1] last acquired at +4500.0 ms") {
		t.Errorf("failover violation's digest does not count n1.1's refused acquire up to its grant:\n%s", d)
	}
}

// TestFailoverAllowsTheStoresStalls: a store call of an unfaulted
// process that ran out of time (no answer before its deadline) shows a
// store that did not answer at all: the leader is due a bound after that
// call ended. The control: the same call answered (refused) after as long
// excuses only its own duration, and the late leader is a violation.
func TestFailoverAllowsTheStoresStalls(t *testing.T) {
	// Healed at 6.5 s; the bound (3.36 s) ends at 9.86 s. n1.1's call runs
	// from 7.0 s to 7.9 s and ends with err; n1 leads again at leads. With
	// another fault (on n3.1, 10.5 s to 11.5 s: within the 11.26 s the
	// stall allows, after the bound's 9.86 s), it joins the episode, whose
	// leader is then judged against its heal at 11.5 s.
	call := callAcquire
	run := func(err string, leads float64, another bool) *Result {
		h := cleanHistory()
		leaderlessAfterBlackhole(h, 16)
		if another {
			h.Faults = append(h.Faults, fault{Kind: faultBlackhole, Target: "n3.1", Start: at(10.5), End: at(11.5)})
		}
		b := &histBuilder{h: h, reqN: 100}
		b.ev("n1.1", 7.0, event{Kind: evRequest, Req: 101, Call: call})
		b.ev("n1.1", 7.9, event{Kind: evAnswer, Req: 101, Call: call, Err: err})
		b.granted("n1.1", leads, evAcquired, "n1-aaaa", 3, 0.005)
		sortEvents(h.Events)
		return checkHistory(h, checkOptions{})
	}
	const timedOut = "acquire: Put: context deadline exceeded"
	if r := run(timedOut, 11, false); violationsOf(r)[chkFailover] != 0 {
		t.Errorf("a leader 1.14 s late, due 11.26 s after a call that timed out at 7.9 s: %v, want it allowed", r.Violations)
	} else if c := outcome(r, chkFailover); !strings.Contains(c.Checked, "1 leaders later than the bound") {
		t.Errorf("failover's summary %q does not count the late leader", c.Checked)
	}
	if r := run("held", 11, false); violationsOf(r)[chkFailover] != 1 {
		t.Errorf("a leader 1.14 s late after a 0.9 s call that was answered: violations %v, want one failover", violationsOf(r))
	}
	if r := run(timedOut, 12, true); violationsOf(r)[chkFailover] != 0 {
		t.Errorf("a fault that began while the stalled store's leader was not yet due: %v, want the episode judged from that fault's heal", r.Violations)
	}
	// The control: with the call answered, the first episode's leader was
	// due at 9.86 s (10.76 s with the call's 0.9 s), before that fault.
	if r := run("held", 12, true); violationsOf(r)[chkFailover] != 1 {
		t.Errorf("control, the call answered: violations %v, want one failover (the first heal's)", violationsOf(r))
	}
	// A fair node's enqueue that timed out excuses nothing: the check
	// judges the store by the lease's own calls.
	call = callEnqueue
	if r := run("enqueue: context deadline exceeded", 11, false); violationsOf(r)[chkFailover] != 1 {
		t.Errorf("a leader 1.14 s late after an enqueue that timed out: violations %v, want one failover", violationsOf(r))
	}
}

func outcome(r *Result, name string) checkOutcome {
	for _, c := range r.Checks {
		if c.Name == name {
			return c
		}
	}
	return checkOutcome{}
}

// leaderlessAfterBlackhole drops the clean history's renewals after 6 s,
// blackholes the leader n2.1 from 6.1 s to 6.5 s and ends the run at end
// seconds: nobody leads after the heal.
func leaderlessAfterBlackhole(h *history, end float64) {
	var keep []event
	for _, e := range h.Events {
		if e.Kind == evRenewed && e.Wall > at(6) {
			continue
		}
		keep = append(keep, e)
	}
	h.Events = keep
	h.End = at(end)
	h.Faults = append(h.Faults, fault{Kind: faultBlackhole, Target: "n2.1", Leader: true, Token: 2, Start: at(6.1), End: at(6.5)})
}
