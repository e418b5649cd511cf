package chaos

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store"
)

// Outcome is what a run produced.
type Outcome struct {
	Dir     string
	Seed    uint64
	Plan    []Planned
	History *history
	Result  *Result
	// Summary is the one-line summary (see summaryLine).
	Summary string
	// Report is the path of the HTML report.
	Report string
	// UnexpectedExits lists node processes that ended by themselves with a
	// failure, or did not stop when asked: each is worth reading (its
	// stderr log is in Dir).
	UnexpectedExits []string
	// Groups are the outcomes of the lease groups of a run with
	// Config.Groups > 1, each in its own subdirectory of Dir; the fields
	// above then add them up (History holds the faults of every group, not
	// their events). A group that failed before it recorded anything has
	// no outcome here, only its error in Result.GroupErrors.
	Groups []*Outcome
	// Group names the group of an outcome in Groups (g01, g02, ...).
	Group string
}

type harness struct {
	cfg     Config
	u       *url.URL
	desc    *store.Descriptor
	eps     []string
	dir     string
	lease   string
	st      store.Store // the harness's own handle, straight to the store
	reg     register
	start   time.Time
	nodeURL func(proxies []*proxy) (string, error)

	mu      sync.Mutex
	procs   map[string]*proc // live process per slot
	all     []*proc
	proxies map[string][]*proxy // per slot
	faults  []fault
	reads   []readOp
	busy    map[string]bool // slots under a fault now

	fleet *fleet // the groups of the run (one, unless Config.Groups > 1)
	group string
}

// Run runs the chaos test c describes and checks its history. It returns an
// error only when the harness itself cannot run (bad configuration, the
// store unreachable, a node that never starts); violations found by the
// checker are in the outcome's Result.
func Run(ctx context.Context, c Config) (*Outcome, error) {
	if err := platformSupported(); err != nil {
		return nil, err
	}
	if c.Seed == 0 {
		c.Seed = rand.Uint64()
	}
	if _, _, _, err := c.normalize(); err != nil {
		return nil, err
	}
	if c.Groups > 1 {
		return runFleet(ctx, c)
	}
	return runGroup(ctx, c, newFleet(c.UntilFaults), "")
}

// runGroup runs one lease group: c is normalized, with Groups 1.
func runGroup(ctx context.Context, c Config, fl *fleet, group string) (*Outcome, error) {
	u, desc, eps, err := c.normalize()
	if err != nil {
		return nil, err
	}
	plan, err := planFaults(c.planConfig())
	if err != nil {
		return nil, err
	}
	dir := c.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "leasehold-chaos-"); err != nil {
			return nil, fmt.Errorf("leasehold/chaos: %w", err)
		}
	} else {
		// Nodes append to their history files: two runs must not share a folder.
		if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
			return nil, fmt.Errorf("%w: the output directory %s is not empty; give each run its own", ErrInvalid, dir)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("leasehold/chaos: %w", err)
		}
	}
	var idb [4]byte
	crand.Read(idb[:])
	runID := hex.EncodeToString(idb[:])
	h := &harness{cfg: c, u: u, desc: desc, eps: eps, dir: dir, lease: "chaos-" + runID,
		procs: map[string]*proc{}, proxies: map[string][]*proxy{}, busy: map[string]bool{}, fleet: fl, group: group}
	fl.add(h)
	defer fl.remove(h)
	defer h.closeProxies()

	// The harness's own store handle: for who leads, and (PostgreSQL) to
	// create the lease table before the nodes start.
	storeURL, err := creatingURL(u, desc)
	if err != nil {
		return nil, fmt.Errorf("%w: store %s: %w", ErrInvalid, redact(u), err)
	}
	h.nodeURL = func(proxies []*proxy) (string, error) {
		switch {
		case !proxied(desc.Reach, eps):
			return storeURL.String(), nil
		case desc.Reach == store.ReachAPI:
			// A kubeconfig of the node's own, pointing at its proxy.
			_, port, _ := net.SplitHostPort(proxies[0].Addr())
			return kubeNodeURL(storeURL, proxies[0].Addr(), filepath.Join(dir, "kubeconfig", port+".yaml"))
		}
		return proxiedURL(storeURL, proxies), nil
	}
	// The node kubeconfigs hold the original's credentials: not left behind.
	defer os.RemoveAll(filepath.Join(dir, "kubeconfig"))
	octx, cancel := context.WithTimeout(ctx, 15*time.Second)
	h.st, err = c.Open(octx, storeURL)
	cancel()
	if err != nil {
		if errors.Is(err, store.ErrInvalid) {
			return nil, fmt.Errorf("%w: store %s: %w", ErrInvalid, redact(u), err)
		}
		return nil, fmt.Errorf("%w: open %s: %w", ErrStore, redact(u), err)
	}
	defer h.st.Close()
	if err := c.Timings.ValidateFor(h.st); err != nil {
		return nil, fmt.Errorf("%w: timings for %s://: %w", ErrInvalid, u.Scheme, err)
	}
	if c.BrokenStore == brokenEarlyGrant {
		if _, ok := h.st.(store.ForceReleaser); !ok {
			return nil, fmt.Errorf("%w: --broken-store %s needs a store with ForceRelease; %s:// has none", ErrInvalid, c.BrokenStore, u.Scheme)
		}
	}

	resources := make([]string, c.Resources)
	for i := range resources {
		resources[i] = fmt.Sprintf("r%d", i)
	}
	h.reg, err = h.openRegister(ctx, runID, resources)
	if err != nil {
		return nil, err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		h.reg.Close(cctx)
	}()

	// Per-node constant clock offsets, from the seed.
	rng := rand.New(rand.NewPCG(c.Seed^0x5bd1e995, c.Seed))
	offsets := make([]time.Duration, c.Nodes)
	for i := range offsets {
		offsets[i] = time.Duration((2*rng.Float64() - 1) * float64(c.MaxSkew)).Round(time.Millisecond)
	}

	h.start = time.Now()
	h.progress("chaos: store %s, %d nodes, seed %d, lease %v, faults %s, register %s%s, output %s",
		redact(u), c.Nodes, c.Seed, c.Timings.LeaseDuration, strings.Join(c.Faults, ","), c.Register, cond(c.Unfenced, " UNFENCED (negative control)")+cond(c.BrokenStore != "", " BROKEN STORE "+c.BrokenStore+" (negative control)"), dir)

	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	var runErr error
	for i := 0; i < c.Nodes; i++ {
		slot := fmt.Sprintf("n%d", i+1)
		if _, err := h.startProc(runCtx, slot, slot, offsets[i]); err != nil {
			runErr = err
			break
		}
	}
	readDone := make(chan struct{})
	readCtx, stopReads := context.WithCancel(runCtx)
	go func() { defer close(readDone); h.readLoop(readCtx, resources) }()

	if runErr == nil {
		runErr = h.waitLeader(runCtx, 10*c.Timings.LeaseDuration+10*time.Second)
	}
	if runErr == nil {
		runErr = h.execute(runCtx, plan)
	}
	stopReads()
	<-readDone
	h.stopAll(context.WithoutCancel(ctx))
	// A run that ended in an error (no first leader, a node that would not
	// start, a fault the harness could not make) still has its history
	// checked and written: what it recorded until then counts, and in a
	// fleet the other groups' results are added up with it.
	failed := runErr != nil && ctx.Err() == nil
	hist, err := h.collect(context.WithoutCancel(ctx), resources)
	if err != nil {
		if failed {
			return nil, fmt.Errorf("%w (and collecting what it recorded: %v)", runErr, err)
		}
		return nil, err
	}
	res := checkHistory(hist, checkOptions{LinearizeTimeout: c.LinearizeTimeout})
	if failed {
		res.GroupErrors = []GroupError{{Group: group, Error: runErr.Error()}}
	}
	out := &Outcome{Dir: dir, Seed: c.Seed, Plan: plan, History: hist, Result: res, UnexpectedExits: h.unexpectedExits()}
	out.Summary = summaryLine(hist, res)
	if err := h.writeOutputs(out); err != nil {
		if failed {
			return nil, fmt.Errorf("%w (and writing what it recorded: %v)", runErr, err)
		}
		return nil, err
	}
	if failed {
		return out, runErr
	}
	if ctx.Err() != nil {
		return out, fmt.Errorf("leasehold/chaos: run interrupted: %w", ctx.Err())
	}
	return out, nil
}

func (h *harness) progress(format string, args ...any) {
	if h.cfg.Progress == nil {
		return
	}
	if h.group != "" {
		format = strings.Replace(format, "chaos: ", "chaos: "+h.group+" ", 1)
	}
	fmt.Fprintf(h.cfg.Progress, format+"\n", args...)
}

func (h *harness) elapsed() string {
	return fmt.Sprintf("%6.2fs", time.Since(h.start).Seconds())
}

func (h *harness) openRegister(ctx context.Context, runID string, resources []string) (register, error) {
	fenced := !h.cfg.Unfenced
	switch h.cfg.Register {
	case registerPostgres:
		table := "chaos_reg_" + runID
		if s := h.u.Query().Get("schema"); s != "" {
			if !tableRE.MatchString(s) || strings.Contains(s, ".") {
				return nil, fmt.Errorf("%w: schema %q is not a plain lower-case identifier", ErrInvalid, s)
			}
			table = s + "." + table
		}
		// The lease store created the schema, if any, when it migrated.
		rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		return newPGRegister(rctx, plainPostgres(h.u), table, resources, fenced, h.cfg.Keep)
	case registerSQLite:
		return newSQLiteRegister(ctx, filepath.Join(h.dir, "register.db"), "register", resources, fenced)
	default:
		return newHTTPRegister(resources, fenced)
	}
}

// leader returns the live term and the process holding it (nil if none):
// the run's lease, or in a semaphore a slot held by a live node, chosen at
// random.
func (h *harness) leader(ctx context.Context) (store.Record, *proc) {
	names := []string{h.lease}
	if h.cfg.Mode == ModeSemaphore {
		names = names[:0]
		for _, i := range rand.Perm(h.cfg.Slots) {
			names = append(names, leasehold.SlotName(h.lease, i))
		}
	}
	gctx, cancel := context.WithTimeout(ctx, h.cfg.Timings.RenewDeadline)
	defer cancel()
	var first store.Record
	for i, name := range names {
		rec, err := h.st.Get(gctx, name)
		if i == 0 {
			first = rec
		}
		if err != nil || !rec.Live() {
			continue
		}
		if p := h.holderProc(rec.Holder); p != nil {
			return rec, p
		}
	}
	return first, nil
}

// holderProc is the process whose holder identity rec's holder is (an
// elector's), or begins with (a semaphore's or a scheduler's holders add
// a suffix per acquisition).
func (h *harness) holderProc(holder string) *proc {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, p := range h.all {
		if p.holder == holder || (h.cfg.Mode != ModeElector && p.holder != "" && strings.HasPrefix(holder, p.holder+"-")) {
			return p
		}
	}
	return nil
}

func (h *harness) waitLeader(ctx context.Context, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		if _, p := h.leader(ctx); p != nil {
			h.progress("chaos: %s %s leads; faults begin", h.elapsed(), p.name)
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("leasehold/chaos: no node became leader within %v; see the stderr-*.log files in %s", within, h.dir)
		}
		if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
}

// sleepCtx waits d (a fault's length, the run's pacing) or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (h *harness) readLoop(ctx context.Context, resources []string) {
	for {
		for _, r := range resources {
			call := time.Now()
			rctx, cancel := context.WithTimeout(ctx, time.Second)
			v, tok, err := h.reg.Read(rctx, r)
			cancel()
			if ctx.Err() != nil {
				return
			}
			op := readOp{Call: call.UnixNano(), Return: time.Now().UnixNano(), Resource: r, Value: v, Token: tok}
			if err != nil {
				op.Err = err.Error()
			}
			h.mu.Lock()
			h.reads = append(h.reads, op)
			h.mu.Unlock()
		}
		if sleepCtx(ctx, h.cfg.ReadInterval) != nil {
			return
		}
	}
}

func (h *harness) collect(ctx context.Context, resources []string) (*history, error) {
	h.mu.Lock()
	var paths []string
	for _, p := range h.all {
		paths = append(paths, p.history)
	}
	faults := append([]fault(nil), h.faults...)
	reads := append([]readOp(nil), h.reads...)
	h.mu.Unlock()
	events, err := readEventFiles(paths)
	if err != nil {
		return nil, err
	}
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	log, err := h.reg.Log(lctx)
	if err != nil {
		return nil, err
	}
	sort.Slice(faults, func(i, j int) bool { return faults[i].Start < faults[j].Start })
	return &history{
		Store: redact(h.u), Seed: h.cfg.Seed, Fenced: !h.cfg.Unfenced, BrokenStore: h.cfg.BrokenStore, Timings: h.cfg.timingsJSON(), Slack: h.cfg.Slack,
		Start: h.start.UnixNano(), End: time.Now().UnixNano(),
		Events: events, Register: log, RegisterLogsRefused: h.reg.LogsRefused(), Reads: reads, Faults: faults,
		Resources: resources, Mode: h.cfg.Mode, Lease: h.lease, Slots: h.cfg.Slots, Every: h.cfg.Every, FairGroups: h.cfg.FairGroups,
	}, nil
}

func (h *harness) writeOutputs(out *Outcome) error {
	return writeOutputs(h.dir, out, func(w io.Writer) error { return writeReport(w, out.History, out.Result) })
}

// writeOutputs writes a run's history, result and report (by report) into
// dir, and names the report in out.
func writeOutputs(dir string, out *Outcome, report func(io.Writer) error) error {
	write := func(name string, f func(io.Writer) error) error {
		fh, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			return fmt.Errorf("leasehold/chaos: %w", err)
		}
		if err := f(fh); err != nil {
			fh.Close()
			return fmt.Errorf("leasehold/chaos: write %s: %w", name, err)
		}
		return fh.Close()
	}
	if err := write("history.json", func(w io.Writer) error { return writeHistory(w, out.History) }); err != nil {
		return err
	}
	if err := write("result.json", func(w io.Writer) error { return writeResultJSON(w, out) }); err != nil {
		return err
	}
	out.Report = filepath.Join(dir, "report.html")
	return write("report.html", report)
}

// errNotSupported is returned on platforms without SIGSTOP.
var errNotSupported = errors.New("leasehold/chaos: the chaos harness needs a Unix system (SIGSTOP, SIGCONT, SIGKILL)")

func writeResultJSON(w io.Writer, out *Outcome) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", " ")
	return enc.Encode(struct {
		Seed    uint64    `json:"seed"`
		Summary string    `json:"summary"`
		Plan    []Planned `json:"plan"`
		*Result
	}{out.Seed, out.Summary, out.Plan, out.Result})
}
