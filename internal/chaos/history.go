package chaos

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"sync"
	"time"
)

// Kinds of node history events (event.Kind).
const (
	evStart       = "start"         // the process started; Holder is its holder identity
	evAcquired    = "acquired"      // a term was granted: Token, SafeUntil, Latency of the acquire
	evAcquireErr  = "acquire-error" // an acquire attempt got no definite answer (Err): it may have granted a term
	evRenewed     = "renewed"       // a renewal succeeded: SafeUntil moved; Latency
	evRenewFailed = "renew-failed"  // a renewal failed (Err)
	evLost        = "lost"          // the node stopped holding Token (Reason)
	evReleased    = "released"      // the release request returned (Err)
	evWorkStart   = "work-start"    // the guarded work began, under Token
	evWorkStop    = "work-stop"     // the guarded work returned
	evWriteCall   = "write-call"    // a write to the register is about to be sent (Op, Res, Value, Token)
	evWriteReturn = "write-return"  // its answer: Result accepted, refused or error
	evClockBefore = "clock-before"  // the node's clock is about to be changed: its last reading before
	evClock       = "clock"         // the node's clock was changed (Detail)
	evRequest     = "request"       // the elector's Call (with Req, and Token for renew and release) is about to reach the store
	evAnswer      = "answer"        // the store answered request Req: Token granted or renewed, or Err
	evExit        = "exit"          // the process is exiting normally
	evRun         = "run"           // a scheduled job's run began: Period (Unix s of its start) and Token of the run's lease
	evSkip        = "skip"          // a scheduled period this node tried and did not run (Period, Err)
	evStall       = "stall"         // the process was not run (CPU starvation, a GC pause, SIGSTOP) from StallFrom to StallTo (wall ns), written after it woke
)

// Store calls the node records (event.Call).
const (
	callAcquire = "acquire"
	callRenew   = "renew"
	callRelease = "release"
	// A fair node's place in the store's queue: recorded for the timeline
	// only (an enqueue answers with Detail "ahead N"), since a place grants
	// nothing.
	callEnqueue = "enqueue"
	callDequeue = "dequeue"
)

// Results of a write (event.Result, registerEntry.Result).
const (
	writeAccepted = "accepted"
	writeRefused  = "refused"
	writeUnknown  = "error" // no definite answer: the write may or may not have landed
)

// event is one line of a node's history file. Times are recorded three ways:
// Wall is the host's wall clock (Unix nanoseconds; every process on the host
// shares it, so the checker orders events of different processes by it); Mono
// is the real monotonic time since the process started; Clock and SafeUntil
// are readings of the node's own injected clock (nanoseconds since that
// clock's reading at process start), the clock on which the node decides when
// to stop trusting its term.
type event struct {
	_ [0]func() // not comparable: spares the binary an equality function

	Wall  int64  `json:"wall"`
	Mono  int64  `json:"mono"`
	Clock int64  `json:"clock"`
	Node  string `json:"node"` // the process slot: n1, n2, or a twin such as n1b
	Inc   int    `json:"inc"`  // incarnation of the slot: 1, then +1 per restart
	Kind  string `json:"ev"`

	Identity  string `json:"identity,omitempty"` // the configured identity (twins share it)
	Holder    string `json:"holder,omitempty"`   // the holder identity: Identity plus a random suffix
	PID       int    `json:"pid,omitempty"`
	Token     int64  `json:"token,omitempty"`
	SafeUntil int64  `json:"safe_until,omitempty"` // on the node's clock, like Clock
	Latency   int64  `json:"latency,omitempty"`    // ns: round trip of the request, from when it was sent
	Reason    string `json:"reason,omitempty"`
	Err       string `json:"err,omitempty"`
	Op        int64  `json:"op,omitempty"` // write number within the process
	Resource  string `json:"res,omitempty"`
	Value     string `json:"value,omitempty"`
	Result    string `json:"result,omitempty"`
	Detail    string `json:"detail,omitempty"`
	// Req numbers a store call within the process (evRequest, evAnswer);
	// Call names it (callAcquire, callRenew, callRelease).
	Req  int64  `json:"req,omitempty"`
	Call string `json:"call,omitempty"`
	// Lease names the lease an event concerns, in the modes where a node
	// uses more than one (a semaphore's slots; a schedule's run lease and
	// period claims). Empty: the process as a whole (start, clock, exit).
	Lease string `json:"lease,omitempty"`
	// Period is the start (Unix seconds) of the period a run (evRun) ran.
	Period int64 `json:"period,omitempty"`
	// StallFrom and StallTo (evStall) bound, on the host's wall clock, a
	// span in which the process's stall recorder was due to run and did not.
	StallFrom int64 `json:"stall_from,omitempty"`
	StallTo   int64 `json:"stall_to,omitempty"`
}

// Proc names one process: its slot and incarnation, such as "n2.3".
func (e event) Proc() string { return procName(e.Node, e.Inc) }

// procName is the name of incarnation inc of slot node.
func procName(node string, inc int) string { return fmt.Sprintf("%s.%d", node, inc) }

// registerEntry is one write the fenced register logged. SQL registers log
// the writes they accepted, in the same statement as the write; the HTTP
// register logs every attempt, accepted or refused.
type registerEntry struct {
	_ [0]func() // not comparable: spares the binary an equality function

	Seq      int64  `json:"seq"` // the register's own order of writes
	Wall     int64  `json:"wall"`
	Resource string `json:"res"`
	Token    int64  `json:"token"`
	Value    string `json:"value"`
	Writer   string `json:"writer"` // the writing process (Event.Proc)
	Result   string `json:"result"` // Accepted or Refused
}

// readOp is one read of the register by the harness.
type readOp struct {
	_ [0]func() // not comparable: spares the binary an equality function

	Call     int64  `json:"call"` // wall ns
	Return   int64  `json:"return"`
	Resource string `json:"res"`
	Value    string `json:"value"`
	Token    int64  `json:"token"`
	Err      string `json:"err,omitempty"`
}

// fault is one fault the harness injected. Start and End are wall times (Unix
// ns); End is when the fault healed (equal to Start for an instant fault).
type fault struct {
	_ [0]func() // not comparable: spares the binary an equality function

	Kind   string `json:"kind"`
	Target string `json:"target,omitempty"` // the process (Event.Proc), or "store"
	// Leader is true when the target held the lease when the fault began.
	Leader bool `json:"leader,omitempty"`
	// Lease is the lease the target held (a semaphore's slot), if not the
	// run's one lease.
	Lease  string `json:"lease,omitempty"`
	Token  int64  `json:"token,omitempty"` // the live token when the fault began (0: none)
	Start  int64  `json:"start"`
	End    int64  `json:"end"`
	Detail string `json:"detail,omitempty"`
	Err    string `json:"err,omitempty"`
	// Echo marks a fault another lease group of the run injected that hit
	// this group too (a real store restart): the checks take it into
	// account, the fault counts do not count it again.
	Echo bool `json:"echo,omitempty"`
}

// history is everything a run recorded: the input of the checker.
type history struct {
	Store  string `json:"store"` // the store URL, password redacted
	Seed   uint64 `json:"seed"`
	Fenced bool   `json:"fenced"`
	// BrokenStore names the broken-store negative control the run used, if any.
	BrokenStore string        `json:"broken_store,omitempty"`
	Timings     timingsRecord `json:"timings"`
	// Slack is added to the failover bound (see checkHistory).
	Slack    time.Duration   `json:"slack"`
	Start    int64           `json:"start"`
	End      int64           `json:"end"`
	Events   []event         `json:"events"`
	Register []registerEntry `json:"register"`
	// RegisterLogsRefused is true when Register holds refused attempts too
	// (the HTTP register), not only the accepted writes (SQL registers).
	RegisterLogsRefused bool     `json:"register_logs_refused"`
	Reads               []readOp `json:"reads"`
	Faults              []fault  `json:"faults"`
	// Resources are the register's resources.
	Resources []string `json:"resources"`
	// Mode is the run's mode (Config.Mode; empty: an elector); Lease the
	// lease (or semaphore, or job) name; Slots a semaphore's slots; Every a
	// schedule's period.
	Mode  string        `json:"mode,omitempty"`
	Lease string        `json:"lease,omitempty"`
	Slots int           `json:"slots,omitempty"`
	Every time.Duration `json:"every,omitempty"`
	// Groups is the number of lease groups a fleet's merged history adds up
	// (0 or 1: one group, whose events these are).
	Groups int `json:"groups,omitempty"`
	// FairGroups is how many of those groups ran fair electors
	// (Config.FairGroups; in a group's own history, 1 if it did).
	FairGroups int `json:"fair_groups,omitempty"`
}

// timingsRecord is leasehold.Timings as recorded in a history.
type timingsRecord struct {
	LeaseDuration time.Duration `json:"lease_duration"`
	RenewDeadline time.Duration `json:"renew_deadline"`
	RenewInterval time.Duration `json:"renew_interval"`
	RetryPeriod   time.Duration `json:"retry_period"`
	Jitter        float64       `json:"jitter"`
	WindDown      time.Duration `json:"wind_down"`
}

// historyWriter appends events to a node's history file, one write per line,
// so that a SIGKILL loses at most the line being written.
type historyWriter struct {
	mu    sync.Mutex
	f     *os.File
	node  string
	inc   int
	start time.Time // real, monotonic
	clock func() int64
	err   error
	// single is the run's one lease in the elector mode, whose events
	// name no lease (leaseOf); empty in the other modes.
	single string
}

// leaseOf is the lease an event names: empty for the elector's one lease
// (its histories stay as they were), the name otherwise.
func (w *historyWriter) leaseOf(name string) string {
	if name == w.single {
		return ""
	}
	return name
}

func (w *historyWriter) emit(e event) {
	now := time.Now()
	e.Wall = now.UnixNano()
	e.Mono = int64(now.Sub(w.start))
	e.Clock = w.clock()
	e.Node, e.Inc = w.node, w.inc
	b, err := json.Marshal(e)
	if err != nil {
		panic(err) // an event always marshals
	}
	b = append(b, '\n')
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return
	}
	if _, err := w.f.Write(b); err != nil {
		w.err = err
		return
	}
	// A write held up by the disk (or by another goroutine's) holds up
	// whatever emitted it, a node's work too: time the harness itself did
	// not let the process go on is a stall, recorded as one. (A soak at
	// load 94 saw a node write nothing for 940 ms and its work return past
	// safeUntil with no stall recorded.)
	if d := time.Since(now); d > stallThreshold && e.Kind != evStall {
		to := now.Add(d).UnixNano()
		st, _ := json.Marshal(event{Kind: evStall, StallFrom: now.UnixNano(), StallTo: to, Wall: to,
			Mono: int64(now.Add(d).Sub(w.start)), Clock: w.clock(), Node: w.node, Inc: w.inc})
		if _, err := w.f.Write(append(st, '\n')); err != nil {
			w.err = err
		}
	}
}

// readEvents reads a node history file. A truncated last line (a process
// killed mid-write) is skipped; any other bad line is an error.
func readEvents(r io.Reader) ([]event, error) {
	var out []event
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	var pending error
	line := 0
	for sc.Scan() {
		line++
		if pending != nil {
			return nil, pending
		}
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			pending = fmt.Errorf("leasehold/chaos: history line %d: %w", line, err)
			continue
		}
		out = append(out, e)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("leasehold/chaos: read history: %w", err)
	}
	return out, nil // a bad last line is a truncated write: dropped
}

// readEventFiles reads and merges history files, ordered by wall time.
func readEventFiles(paths []string) ([]event, error) {
	var all []event
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return nil, fmt.Errorf("leasehold/chaos: %w", err)
		}
		ev, err := readEvents(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%w (%s)", err, p)
		}
		all = append(all, ev...)
	}
	sortEvents(all)
	return all, nil
}

// sortEvents orders events by wall time, keeping each process's own order.
func sortEvents(ev []event) {
	sort.SliceStable(ev, func(i, j int) bool { return ev[i].Wall < ev[j].Wall })
}

// writeHistory writes h as JSON.
func writeHistory(w io.Writer, h *history) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", " ")
	return enc.Encode(h)
}

// readHistory reads a history written by writeHistory.
func readHistory(r io.Reader) (*history, error) {
	var h history
	if err := json.NewDecoder(r).Decode(&h); err != nil {
		return nil, fmt.Errorf("leasehold/chaos: read history: %w", err)
	}
	if h.Timings.LeaseDuration <= 0 {
		return nil, errors.New("leasehold/chaos: history has no timings")
	}
	return &h, nil
}
