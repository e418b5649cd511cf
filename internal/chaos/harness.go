package chaos

import (
	"bufio"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/postgres"
)

// StoreControl stops and starts the store, for real store restarts. The
// harness uses it when the caller runs the store itself (a test's own
// redis-server, an embedded etcd member); without it, a store restart is
// emulated at the proxies: every connection is reset and new ones are
// refused while the store is "down".
type StoreControl interface {
	Stop(ctx context.Context) error
	Start(ctx context.Context) error
}

// Config configures a run. Zero fields take the defaults in the comments.
type Config struct {
	// StoreURL names the store (see SupportedSchemes). Required. Network
	// stores must be on a loopback address unless AllowRemote is set; a
	// Kubernetes store (whose server the kubeconfig names, not the URL)
	// needs AllowRemote always, and is not proxied: no network faults.
	StoreURL    string
	AllowRemote bool
	// Open opens a store by URL, in the harness and (the same registry) in
	// the nodes. Required.
	Open Opener
	// NodeCommand is the node program and its leading arguments; the harness
	// appends the node's flags. Required (the leasehold command passes
	// itself with its hidden node subcommand; tests re-execute themselves).
	NodeCommand []string
	// NodeEnv is added to the nodes' environment.
	NodeEnv []string

	// Nodes is the number of node processes (default 3, at most 9).
	Nodes int
	// Duration is how long faults are injected, after the first leader is
	// elected (default 30 s). The run ends after the last fault's quiet period.
	Duration time.Duration
	// Seed draws the fault schedule and the clock offsets. Zero: a random
	// seed, reported in the outcome so that the run can be repeated.
	Seed uint64
	// Faults are the fault kinds to inject (default: every kind the store
	// supports; a local store such as SQLite has no network to cut).
	Faults []string
	// LeaderBias is the share of node faults aimed at whichever node leads
	// (default 0.7; 1 aims every one at the leader).
	LeaderBias float64

	// Timings of the lease (default: a 2 s lease, 1.4 s renew deadline,
	// 400 ms renew interval, 300 ms retry period, 0.2 jitter, 400 ms wind-down).
	// With only LeaseDuration set, the rest scale as in leasehold.Timings,
	// and WindDown is half of RenewDeadline - RenewInterval.
	Timings leasehold.Timings
	// Slack is added to the failover bound (default 1 s: process scheduling
	// and store round trips on a loaded machine).
	Slack time.Duration
	// MaxSkew bounds the constant offset of each node's clock (default 5 s).
	MaxSkew time.Duration
	// MaxDrift bounds clock-rate faults: rates in [1-MaxDrift, 1+MaxDrift]
	// (default 0.2). It must stay below 1 - RenewDeadline/LeaseDuration.
	MaxDrift float64
	// WriteInterval is the pause between a leader's writes (default 10 ms).
	WriteInterval time.Duration
	// Think is how long each write is held between the node deciding to
	// send it and sending it, without looking at the lease (default 40 ms;
	// must be below WindDown).
	Think time.Duration
	// Resources is the number of register resources the leader writes to in
	// turn (default 2).
	Resources int
	// Register is the fenced register's kind: "http", "postgres" or
	// "sqlite". Default: postgres for a PostgreSQL store (a table on the same
	// server, on a connection that bypasses the proxy), sqlite for SQLite (its
	// own file), http otherwise (a server in the harness).
	Register string
	// Unfenced turns the register's token check off: the negative control.
	// The checker must then find violations.
	Unfenced bool
	// BrokenStore, if set, makes every node use a deliberately broken
	// wrapper of the store (BrokenEarlyGrant, BrokenTokenDown): a negative
	// control for the checks that judge the store. The checker must then
	// find violations. Nothing else selects these wrappers.
	BrokenStore string
	// ReadInterval is how often the harness reads each resource (default 100 ms).
	ReadInterval time.Duration
	// Dir receives the histories and the report (default: a new temporary
	// directory).
	Dir string
	// Keep leaves the PostgreSQL register tables in place.
	Keep bool
	// StoreControl, if set, makes store-restart faults real restarts.
	StoreControl StoreControl
	// Progress, if set, receives a line per fault as the run goes.
	Progress io.Writer
	// LinearizeTimeout bounds the porcupine search (default 30 s).
	LinearizeTimeout time.Duration
}

// Outcome is what a run produced.
type Outcome struct {
	Dir     string
	Seed    uint64
	Plan    []Planned
	History *History
	Result  *Result
	// Summary is the one-line summary (see Summary).
	Summary string
	// Report is the path of the HTML report.
	Report string
	// UnexpectedExits lists node processes that ended by themselves with a
	// failure, or did not stop when asked: each is worth reading (its
	// stderr log is in Dir).
	UnexpectedExits []string
}

// DefaultTimings are the chaos run's default lease timings.
func DefaultTimings() leasehold.Timings {
	return leasehold.Timings{
		LeaseDuration: 2 * time.Second,
		RenewDeadline: 1400 * time.Millisecond,
		RenewInterval: 400 * time.Millisecond,
		RetryPeriod:   300 * time.Millisecond,
		Jitter:        0.2,
		WindDown:      400 * time.Millisecond,
	}
}

// normalize fills defaults and validates c. It returns the store and its
// endpoints.
func (c *Config) normalize() (*url.URL, *store.Descriptor, []string, error) {
	bad := func(format string, args ...any) (*url.URL, *store.Descriptor, []string, error) {
		return nil, nil, nil, fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
	}
	if c.StoreURL == "" {
		return bad("no store URL")
	}
	u, desc, eps, err := parseStoreURL(c.StoreURL, c.AllowRemote)
	if err != nil {
		return nil, nil, nil, err
	}
	if c.Open == nil {
		return bad("no store opener")
	}
	if len(c.NodeCommand) == 0 {
		return bad("no node command")
	}
	if c.Nodes == 0 {
		c.Nodes = 3
	}
	if c.LeaderBias == 0 {
		c.LeaderBias = 0.7
	}
	if c.LeaderBias < 0 || c.LeaderBias > 1 {
		return bad("leader bias %v must be in [0, 1]", c.LeaderBias)
	}
	if c.Nodes < 2 || c.Nodes > 9 {
		return bad("--nodes %d: need 2 to 9 nodes", c.Nodes)
	}
	if c.Duration == 0 {
		c.Duration = 30 * time.Second
	}
	if c.Duration < 0 {
		return bad("--duration %v is negative", c.Duration)
	}
	if c.Timings == (leasehold.Timings{}) {
		c.Timings = DefaultTimings()
	} else {
		wd := c.Timings.WindDown
		c.Timings = c.Timings.WithDefaults()
		if wd == 0 {
			c.Timings.WindDown = (c.Timings.RenewDeadline - c.Timings.RenewInterval) / 2
		}
	}
	if err := c.Timings.Validate(); err != nil {
		return bad("%v", err)
	}
	t := c.Timings
	if c.Slack == 0 {
		c.Slack = time.Second
	}
	if c.Slack < 0 {
		return bad("--slack %v is negative", c.Slack)
	}
	if c.MaxSkew == 0 {
		c.MaxSkew = 5 * time.Second
	}
	if c.MaxSkew < 0 {
		return bad("--max-skew %v is negative", c.MaxSkew)
	}
	if c.MaxDrift == 0 {
		c.MaxDrift = 0.2
	}
	limit := 1 - float64(t.RenewDeadline)/float64(t.LeaseDuration)
	switch {
	case c.MaxDrift < 0 || c.MaxDrift >= 0.5:
		return bad("--max-drift %v must be in [0, 0.5)", c.MaxDrift)
	case c.MaxDrift >= limit:
		return bad("--max-drift %v is impossible with these timings: a clock that slow stretches the renew deadline (%v) to %v of real time, past the lease (%v), so the holder would trust its term after a rival may take over; keep it below 1 - renewDeadline/leaseDuration = %.3f",
			c.MaxDrift, t.RenewDeadline, time.Duration(float64(t.RenewDeadline)/(1-c.MaxDrift)).Round(time.Millisecond), t.LeaseDuration, limit)
	}
	if c.WriteInterval == 0 {
		c.WriteInterval = 10 * time.Millisecond
	}
	if c.WriteInterval < 0 {
		return bad("--write-interval %v is negative", c.WriteInterval)
	}
	if c.Think == 0 {
		c.Think = min(40*time.Millisecond, t.WindDown/4)
	}
	if c.Think < 0 || c.Think >= t.WindDown {
		return bad("--think %v must be in [0, wind-down %v): a write prepared just before the work is told to stop must still land before safeUntil", c.Think, t.WindDown)
	}
	if c.Resources == 0 {
		c.Resources = 2
	}
	if c.Resources < 1 || c.Resources > 8 {
		return bad("--resources %d: need 1 to 8", c.Resources)
	}
	if c.ReadInterval == 0 {
		c.ReadInterval = 100 * time.Millisecond
	}
	if c.ReadInterval < 0 {
		return bad("read interval %v is negative", c.ReadInterval)
	}
	if len(c.Faults) == 0 {
		for _, f := range AllFaults {
			if !proxied(desc.Reach) && isNetworkFault(f) {
				continue
			}
			c.Faults = append(c.Faults, f)
		}
	}
	for _, f := range c.Faults {
		if _, err := ParseFaults(f); err != nil {
			return nil, nil, nil, err
		}
		if desc.Reach == store.ReachLocal && isNetworkFault(f) {
			return bad("fault %q needs a store reached over the network; %s:// is a local file with no connection to cut (use %s, %s, %s, %s)",
				f, u.Scheme, FaultPause, FaultKill, FaultClock, FaultTwin)
		}
		if desc.Reach == store.ReachAPI && isNetworkFault(f) {
			return bad("fault %q needs a store reached over the network through the harness's proxy; the harness does not proxy %s:// stores (their server's address is in the kubeconfig, not the URL) (use %s, %s, %s, %s)",
				f, u.Scheme, FaultPause, FaultKill, FaultClock, FaultTwin)
		}
	}
	if c.BrokenStore != "" {
		if err := validBroken(c.BrokenStore); err != nil {
			return nil, nil, nil, err
		}
	}
	switch c.Register {
	case "":
		c.Register = defaultRegister(desc)
	case RegisterHTTP, RegisterSQLite:
	case RegisterPostgres:
		if desc != &postgres.Descriptor {
			return bad("--register postgres needs a PostgreSQL store (it puts the register on the same server)")
		}
	default:
		return bad("--register %q: want %s, %s or %s", c.Register, RegisterHTTP, RegisterPostgres, RegisterSQLite)
	}
	return u, desc, eps, nil
}

func (c *Config) timingsJSON() TimingsJSON {
	t := c.Timings
	return TimingsJSON{LeaseDuration: t.LeaseDuration, RenewDeadline: t.RenewDeadline, RenewInterval: t.RenewInterval,
		RetryPeriod: t.RetryPeriod, Jitter: t.Jitter, WindDown: t.WindDown}
}

// Validate checks a configuration without running it, and returns the fault
// schedule its seed gives.
func Validate(c Config) ([]Planned, error) {
	if _, _, _, err := c.normalize(); err != nil {
		return nil, err
	}
	return Plan(c.planConfig())
}

func (c *Config) planConfig() PlanConfig {
	return PlanConfig{Seed: c.Seed, Faults: c.Faults, Span: c.Duration, Nodes: c.Nodes, Timings: c.timingsJSON(), Slack: c.Slack, MaxDrift: c.MaxDrift, LeaderBias: c.LeaderBias}
}

// proc is one node process.
type proc struct {
	slot     string
	identity string
	inc      int
	name     string // slot.inc
	cmd      *exec.Cmd
	stdin    io.WriteCloser
	holder   string
	exited   chan struct{}
	history  string
	proxies  []*Proxy
	offset   time.Duration
	killed   bool // by a kill fault
	forced   bool // killed because it did not stop when asked
	errLog   string
}

type harness struct {
	cfg     Config
	u       *url.URL
	desc    *store.Descriptor
	eps     []string
	dir     string
	lease   string
	st      store.Store // the harness's own handle, straight to the store
	reg     Register
	start   time.Time
	nodeURL func(proxies []*Proxy) string

	mu      sync.Mutex
	procs   map[string]*proc // live process per slot
	all     []*proc
	proxies map[string][]*Proxy // per slot
	faults  []Fault
	reads   []ReadOp
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
	u, desc, eps, err := c.normalize()
	if err != nil {
		return nil, err
	}
	plan, err := Plan(c.planConfig())
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
		procs: map[string]*proc{}, proxies: map[string][]*Proxy{}}
	defer h.closeProxies()

	// The harness's own store handle: for who leads, and (PostgreSQL) to
	// create the lease table before the nodes start.
	storeURL, err := creatingURL(u, desc)
	if err != nil {
		return nil, fmt.Errorf("%w: store %s: %w", ErrInvalid, redact(u), err)
	}
	h.nodeURL = func(proxies []*Proxy) string {
		if !proxied(desc.Reach) {
			return storeURL.String()
		}
		return proxiedURL(storeURL, proxies)
	}
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
	if c.BrokenStore == BrokenEarlyGrant {
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
	if runErr != nil && ctx.Err() == nil {
		return nil, runErr
	}

	hist, err := h.collect(context.WithoutCancel(ctx), resources)
	if err != nil {
		return nil, err
	}
	res := Check(hist, CheckOptions{LinearizeTimeout: c.LinearizeTimeout})
	out := &Outcome{Dir: dir, Seed: c.Seed, Plan: plan, History: hist, Result: res, UnexpectedExits: h.unexpectedExits()}
	out.Summary = Summary(hist, res)
	if err := h.writeOutputs(out); err != nil {
		return nil, err
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
	fmt.Fprintf(h.cfg.Progress, format+"\n", args...)
}

func (h *harness) elapsed() string {
	return fmt.Sprintf("%6.2fs", time.Since(h.start).Seconds())
}

func (h *harness) openRegister(ctx context.Context, runID string, resources []string) (Register, error) {
	fenced := !h.cfg.Unfenced
	switch h.cfg.Register {
	case RegisterPostgres:
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
	case RegisterSQLite:
		return newSQLiteRegister(ctx, filepath.Join(h.dir, "register.db"), "register", resources, fenced)
	default:
		return newHTTPRegister(resources, fenced)
	}
}

// slotProxies returns the proxies of a slot, creating them on first use.
func (h *harness) slotProxies(slot string) ([]*Proxy, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if p, ok := h.proxies[slot]; ok {
		return p, nil
	}
	var ps []*Proxy
	for _, ep := range h.eps {
		p, err := NewProxy(ep)
		if err != nil {
			for _, q := range ps {
				q.Close()
			}
			return nil, err
		}
		ps = append(ps, p)
	}
	h.proxies[slot] = ps
	return ps, nil
}

func (h *harness) allProxies() []*Proxy {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []*Proxy
	for _, slot := range sortedKeys(h.proxies) {
		out = append(out, h.proxies[slot]...)
	}
	return out
}

func (h *harness) closeProxies() {
	for _, p := range h.allProxies() {
		p.Close()
	}
}

// startProc starts the next incarnation of slot and waits until it contends.
func (h *harness) startProc(ctx context.Context, slot, identity string, offset time.Duration) (*proc, error) {
	proxies, err := h.slotProxies(slot)
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	inc := 1
	for _, p := range h.all {
		if p.slot == slot && p.inc >= inc {
			inc = p.inc + 1
		}
	}
	h.mu.Unlock()
	p := &proc{slot: slot, identity: identity, inc: inc, name: ProcName(slot, inc), proxies: proxies, offset: offset,
		history: filepath.Join(h.dir, fmt.Sprintf("history-%s.jsonl", ProcName(slot, inc))), exited: make(chan struct{})}
	c := h.cfg
	t := c.Timings
	spec := h.reg.spec()
	res := make([]string, c.Resources)
	for i := range res {
		res[i] = fmt.Sprintf("r%d", i)
	}
	args := append([]string(nil), c.NodeCommand[1:]...)
	args = append(args,
		"--node", slot, "--identity", identity, "--inc", strconv.Itoa(inc),
		"--store", h.nodeURL(proxies), "--lease", h.lease, "--history", p.history,
		"--register-kind", spec.Kind, "--register", spec.URL, "--register-table", spec.Table,
		"--resources", strings.Join(res, ","),
		"--lease-duration", t.LeaseDuration.String(), "--renew-deadline", t.RenewDeadline.String(),
		"--renew-interval", t.RenewInterval.String(), "--retry-period", t.RetryPeriod.String(),
		"--jitter", strconv.FormatFloat(t.Jitter, 'g', -1, 64), "--wind-down", t.WindDown.String(),
		"--write-interval", c.WriteInterval.String(), "--think", c.Think.String(),
		// A write begun as the work is told to stop (think, then the write)
		// returns with half of the wind-down to spare before safeUntil.
		"--write-timeout", ((t.WindDown - c.Think) / 2).String(),
		"--clock-offset", offset.String(),
	)
	if !spec.Fenced {
		args = append(args, "--unfenced")
	}
	if c.BrokenStore != "" {
		args = append(args, "--broken-store", c.BrokenStore)
	}
	cmd := exec.Command(c.NodeCommand[0], args...)
	cmd.Env = append(os.Environ(), c.NodeEnv...)
	setProcAttr(cmd)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("leasehold/chaos: start %s: %w", p.name, err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("leasehold/chaos: start %s: %w", p.name, err)
	}
	errf, err := os.Create(filepath.Join(h.dir, fmt.Sprintf("stderr-%s.log", p.name)))
	if err != nil {
		return nil, fmt.Errorf("leasehold/chaos: %w", err)
	}
	cmd.Stderr = errf
	p.errLog = errf.Name()
	if err := cmd.Start(); err != nil {
		errf.Close()
		return nil, fmt.Errorf("leasehold/chaos: start node %s (%s): %w", p.name, c.NodeCommand[0], err)
	}
	p.cmd, p.stdin = cmd, stdin
	go func() {
		cmd.Wait()
		errf.Close()
		close(p.exited)
	}()
	h.mu.Lock()
	h.all = append(h.all, p)
	h.procs[slot] = p
	h.mu.Unlock()

	ready := make(chan nodeReady, 1)
	go func() {
		br := bufio.NewReader(stdout)
		line, err := br.ReadBytes('\n')
		var r nodeReady
		if err == nil && json.Unmarshal(line, &r) == nil {
			ready <- r
		}
		close(ready)
		io.Copy(io.Discard, br)
	}()
	timer := time.NewTimer(30 * time.Second)
	defer timer.Stop()
	select {
	case r, ok := <-ready:
		if !ok {
			<-p.exited
			return nil, fmt.Errorf("leasehold/chaos: node %s exited before it was ready (%v); see %s", p.name, cmd.ProcessState, errf.Name())
		}
		p.holder = r.Holder
	case <-timer.C:
		cmd.Process.Kill()
		return nil, fmt.Errorf("leasehold/chaos: node %s was not ready within 30s; see %s", p.name, errf.Name())
	case <-ctx.Done():
		cmd.Process.Kill()
		return nil, ctx.Err()
	}
	return p, nil
}

// stopProc asks p to stop (closing its stdin: it releases its lease and
// exits) and kills it if it has not exited within wait.
func (h *harness) stopProc(p *proc, wait time.Duration) {
	p.stdin.Close()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-p.exited:
	case <-t.C:
		p.forced = true
		p.cmd.Process.Kill()
		<-p.exited
	}
}

// unexpectedExits lists the processes that failed on their own or had to be
// killed at the end. Call it after stopAll.
func (h *harness) unexpectedExits() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, p := range h.all {
		switch st := p.cmd.ProcessState; {
		case p.killed:
		case p.forced:
			out = append(out, fmt.Sprintf("%s did not stop within %v of being asked, and was killed (see %s)", p.name, h.cfg.Timings.LeaseDuration+5*time.Second, p.errLog))
		case st != nil && !st.Success():
			out = append(out, fmt.Sprintf("%s exited by itself: %v (see %s)", p.name, st, p.errLog))
		}
	}
	return out
}

func (h *harness) stopAll(ctx context.Context) {
	h.mu.Lock()
	procs := append([]*proc(nil), h.all...)
	h.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			signalCont(p.cmd.Process) // in case a pause was interrupted
			h.stopProc(p, h.cfg.Timings.LeaseDuration+5*time.Second)
		}()
	}
	wg.Wait()
}

// leader returns the live term and the process holding it (nil if none).
func (h *harness) leader(ctx context.Context) (store.Record, *proc) {
	gctx, cancel := context.WithTimeout(ctx, h.cfg.Timings.RenewDeadline)
	defer cancel()
	rec, err := h.st.Get(gctx, h.lease)
	if err != nil || !rec.Live() {
		return rec, nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, p := range h.all {
		if p.holder == rec.Holder {
			return rec, p
		}
	}
	return rec, nil
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
			op := ReadOp{Call: call.UnixNano(), Return: time.Now().UnixNano(), Resource: r, Value: v, Token: tok}
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

// execute injects the planned faults, each no earlier than its planned time
// and no earlier than a quiet period after the previous one healed.
func (h *harness) execute(ctx context.Context, plan []Planned) error {
	phase := time.Now()
	quiet := quietPeriod(h.cfg.timingsJSON(), h.cfg.Slack)
	var healed time.Time
	for _, p := range plan {
		at := phase.Add(p.At)
		if !healed.IsZero() && healed.Add(quiet).After(at) {
			at = healed.Add(quiet)
		}
		if err := sleepCtx(ctx, time.Until(at)); err != nil {
			return nil // interrupted: check what was recorded
		}
		f, err := h.inject(ctx, p)
		h.mu.Lock()
		h.faults = append(h.faults, f)
		h.mu.Unlock()
		if err != nil {
			return err
		}
		healed = time.Unix(0, f.End)
	}
	end := phase.Add(h.cfg.Duration)
	if !healed.IsZero() && healed.Add(quiet).After(end) {
		end = healed.Add(quiet)
	}
	sleepCtx(ctx, time.Until(end))
	return nil
}

// inject carries out one planned fault and returns its record.
func (h *harness) inject(ctx context.Context, p Planned) (Fault, error) {
	rec, leader := h.leader(ctx)
	target := leader
	if !p.Leader || target == nil {
		h.mu.Lock()
		target = h.procs[fmt.Sprintf("n%d", p.Node+1)]
		h.mu.Unlock()
	}
	f := Fault{Kind: p.Kind, Target: target.name, Leader: leader != nil && target == leader}
	if rec.Live() {
		f.Token = rec.Token
	}
	role := "standby"
	if f.Leader {
		role = fmt.Sprintf("leader, token %d", rec.Token)
	}
	f.Start = time.Now().UnixNano()
	var err error
	switch p.Kind {
	case FaultPause:
		h.progress("chaos: %s pause %s (%s) for %v", h.elapsed(), target.name, role, p.Duration.Round(time.Millisecond))
		f.Detail = fmt.Sprintf("SIGSTOP for %v", p.Duration.Round(time.Millisecond))
		if err = signalStop(target.cmd.Process); err == nil {
			sleepCtx(ctx, p.Duration)
			err = signalCont(target.cmd.Process)
		}
	case FaultKill:
		h.progress("chaos: %s kill %s (%s), restart after %v", h.elapsed(), target.name, role, p.Duration.Round(time.Millisecond))
		target.killed = true
		target.cmd.Process.Kill()
		<-target.exited
		sleepCtx(ctx, p.Duration)
		var np *proc
		np, err = h.startProc(ctx, target.slot, target.identity, target.offset)
		if err == nil {
			f.Detail = fmt.Sprintf("SIGKILL, restarted as %s after %v", np.name, p.Duration.Round(time.Millisecond))
		}
	case FaultBlackhole:
		h.progress("chaos: %s blackhole %s (%s) for %v", h.elapsed(), target.name, role, p.Duration.Round(time.Millisecond))
		f.Detail = fmt.Sprintf("no bytes forwarded for %v", p.Duration.Round(time.Millisecond))
		for _, px := range target.proxies {
			px.Blackhole()
		}
		sleepCtx(ctx, p.Duration)
		for _, px := range target.proxies {
			px.Heal()
		}
	case FaultReset:
		n := 0
		for _, px := range target.proxies {
			_, before := px.Stats()
			px.Reset()
			_, after := px.Stats()
			n += after - before
		}
		h.progress("chaos: %s reset %s (%s): %d connections", h.elapsed(), target.name, role, n)
		f.Detail = fmt.Sprintf("%d connections reset", n)
	case FaultLatency:
		h.progress("chaos: %s latency +%v on %s (%s) for %v", h.elapsed(), p.Latency.Round(time.Millisecond), target.name, role, p.Duration.Round(time.Millisecond))
		f.Detail = fmt.Sprintf("+%v per round trip for %v", p.Latency.Round(time.Millisecond), p.Duration.Round(time.Millisecond))
		for _, px := range target.proxies {
			px.SetLatency(p.Latency)
		}
		sleepCtx(ctx, p.Duration)
		for _, px := range target.proxies {
			px.Heal()
		}
	case FaultStoreRestart:
		f.Target, f.Leader = "store", false
		if h.cfg.StoreControl != nil {
			h.progress("chaos: %s restart the store (down %v)", h.elapsed(), p.Duration.Round(time.Millisecond))
			f.Detail = fmt.Sprintf("real restart, down %v", p.Duration.Round(time.Millisecond))
			// A store that dies resets its connections; the proxies do it at
			// once, so that a store that stops gracefully does not wait for
			// the nodes' open streams.
			all := h.allProxies()
			for _, px := range all {
				px.Refuse(true)
				px.Reset()
			}
			if err = h.cfg.StoreControl.Stop(ctx); err == nil {
				sleepCtx(ctx, p.Duration)
				err = h.cfg.StoreControl.Start(context.WithoutCancel(ctx))
			}
			for _, px := range all {
				px.Refuse(false)
			}
		} else {
			h.progress("chaos: %s store restart, emulated at the proxies (down %v)", h.elapsed(), p.Duration.Round(time.Millisecond))
			f.Detail = fmt.Sprintf("emulated: every connection reset and new ones refused for %v", p.Duration.Round(time.Millisecond))
			all := h.allProxies()
			for _, px := range all {
				px.Refuse(true)
				px.Reset()
			}
			sleepCtx(ctx, p.Duration)
			for _, px := range all {
				px.Refuse(false)
			}
		}
	case FaultClock:
		h.progress("chaos: %s clock of %s (%s): rate %.3f, step +%v, for %v", h.elapsed(), target.name, role, p.Rate, p.Step.Round(time.Millisecond), p.Duration.Round(time.Millisecond))
		f.Detail = fmt.Sprintf("rate %.3f, step +%v, for %v", p.Rate, p.Step.Round(time.Millisecond), p.Duration.Round(time.Millisecond))
		if _, err = fmt.Fprintf(target.stdin, "clock %s %s\n", strconv.FormatFloat(p.Rate, 'f', 4, 64), p.Step); err == nil {
			sleepCtx(ctx, p.Duration)
			_, err = fmt.Fprintf(target.stdin, "clock 1 0s\n")
		}
	case FaultTwin:
		twinSlot := target.slot + "b"
		var tw *proc
		tw, err = h.startProc(ctx, twinSlot, target.identity, target.offset)
		if err == nil {
			h.progress("chaos: %s twin %s started with %s's identity %q (%s) for %v", h.elapsed(), tw.name, target.name, target.identity, role, p.Duration.Round(time.Millisecond))
			f.Detail = fmt.Sprintf("%s runs with identity %q (as %s does) for %v", tw.name, target.identity, target.name, p.Duration.Round(time.Millisecond))
			f.Target = tw.name
			sleepCtx(ctx, p.Duration)
			h.stopProc(tw, h.cfg.Timings.LeaseDuration+5*time.Second)
			h.mu.Lock()
			delete(h.procs, twinSlot)
			h.mu.Unlock()
		}
	default:
		err = fmt.Errorf("%w: unknown fault %q", ErrInvalid, p.Kind)
	}
	f.End = time.Now().UnixNano()
	if err != nil {
		f.Err = err.Error()
		if ctx.Err() != nil {
			return f, nil
		}
		return f, fmt.Errorf("leasehold/chaos: inject %s on %s: %w", p.Kind, f.Target, err)
	}
	return f, nil
}

func (h *harness) collect(ctx context.Context, resources []string) (*History, error) {
	h.mu.Lock()
	var paths []string
	for _, p := range h.all {
		paths = append(paths, p.history)
	}
	faults := append([]Fault(nil), h.faults...)
	reads := append([]ReadOp(nil), h.reads...)
	h.mu.Unlock()
	events, err := ReadEventFiles(paths)
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
	return &History{
		Store: redact(h.u), Seed: h.cfg.Seed, Fenced: !h.cfg.Unfenced, BrokenStore: h.cfg.BrokenStore, Timings: h.cfg.timingsJSON(), Slack: h.cfg.Slack,
		Start: h.start.UnixNano(), End: time.Now().UnixNano(),
		Events: events, Register: log, RegisterLogsRefused: h.reg.LogsRefused(), Reads: reads, Faults: faults,
		Resources: resources,
	}, nil
}

func (h *harness) writeOutputs(out *Outcome) error {
	write := func(name string, f func(io.Writer) error) error {
		fh, err := os.Create(filepath.Join(h.dir, name))
		if err != nil {
			return fmt.Errorf("leasehold/chaos: %w", err)
		}
		if err := f(fh); err != nil {
			fh.Close()
			return fmt.Errorf("leasehold/chaos: write %s: %w", name, err)
		}
		return fh.Close()
	}
	if err := write("history.json", func(w io.Writer) error { return WriteHistory(w, out.History) }); err != nil {
		return err
	}
	if err := write("result.json", func(w io.Writer) error {
		enc := json.NewEncoder(w)
		enc.SetIndent("", " ")
		return enc.Encode(struct {
			Seed    uint64    `json:"seed"`
			Summary string    `json:"summary"`
			Plan    []Planned `json:"plan"`
			*Result
		}{out.Seed, out.Summary, out.Plan, out.Result})
	}); err != nil {
		return err
	}
	out.Report = filepath.Join(h.dir, "report.html")
	return write("report.html", func(w io.Writer) error { return WriteReport(w, out.History, out.Result) })
}

// errNotSupported is returned on platforms without SIGSTOP.
var errNotSupported = errors.New("leasehold/chaos: the chaos harness needs a Unix system (SIGSTOP, SIGCONT, SIGKILL)")
