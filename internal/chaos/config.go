package chaos

import (
	"context"
	"fmt"
	"io"
	"net/url"
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
	// StoreURL names the store (any scheme of store/registry). Required. Network
	// stores must be on a loopback address unless AllowRemote is set; a
	// Kubernetes store (whose server the kubeconfig names, not the URL)
	// needs AllowRemote always, and is proxied (network faults) only when
	// its kubeconfig names a server on a loopback address.
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

	// Mode is what each node runs: ModeElector (the default: an Elector
	// on one lease), ModeSemaphore (a Semaphore of Slots slots; while a node
	// holds a slot it writes to that slot's resource with the slot's token)
	// or ModeSchedule (a Scheduler with period Every; each run writes with
	// the run's token and records its period).
	Mode string
	// Slots is a semaphore's number of slots (ModeSemaphore; default 2,
	// fewer than Nodes).
	Slots int
	// Every is a schedule's period (ModeSchedule; default 2 s, a whole
	// number of seconds). Each run works for half of it.
	Every time.Duration

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
	// Groups is the number of independent lease groups run at once on the
	// store (default 1), each with its own nodes, lease, register, fault
	// schedule (from its own seed) and check; the outcome adds them up. A
	// real store restart (StoreControl) hits every group: only the first
	// group's schedule draws them, and every group's history records them.
	Groups int
	// Overlap is the most faults injected together in one burst (default 1:
	// one fault at a time). The faults of a burst overlap, on different
	// nodes; each burst is followed by a quiet period (the failover bound)
	// after its last fault heals.
	Overlap int
	// UntilFaults, if positive, ends the run once the groups together have
	// injected this many faults (each group finishes its current burst and
	// quiet period), or when Duration runs out, whichever is first.
	UntilFaults int
	// FairGroups is the number of lease groups, the last ones, whose nodes
	// run their Elector with leasehold.Config.Fair: the fair queue, and a
	// fair acquire's first try without a place (store.UnqueuedAcquirer).
	// Default 0; at most Groups; elector runs only (a Semaphore and a
	// Scheduler refuse Fair).
	FairGroups int

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
	// wrapper of the store (brokenEarlyGrant, brokenTokenDown): a negative
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

// The modes of a run (Config.Mode).
const (
	ModeElector   = "elector"
	ModeSemaphore = "semaphore"
	ModeSchedule  = "schedule"
)

// defaultTimings are the chaos run's default lease timings.
func defaultTimings() leasehold.Timings {
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
	if c.Groups == 0 {
		c.Groups = 1
	}
	if c.Groups < 1 || c.Groups > 64 {
		return bad("--groups %d: need 1 to 64 lease groups", c.Groups)
	}
	if c.Overlap == 0 {
		c.Overlap = 1
	}
	if c.Overlap < 1 || c.Overlap > c.Nodes {
		return bad("--overlap %d: need 1 to --nodes (%d): a burst has at most one fault per node", c.Overlap, c.Nodes)
	}
	if c.UntilFaults < 0 {
		return bad("--until-faults %d is negative", c.UntilFaults)
	}
	if c.Duration < 0 {
		return bad("--duration %v is negative", c.Duration)
	}
	if c.Timings == (leasehold.Timings{}) {
		c.Timings = defaultTimings()
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
	if c.FairGroups < 0 || c.FairGroups > c.Groups {
		return bad("%d fair groups: need 0 to --groups (%d)", c.FairGroups, c.Groups)
	}
	if c.FairGroups > 0 && c.Mode != "" && c.Mode != ModeElector {
		return bad("fair groups need an elector run: a %s refuses Config.Fair", c.Mode)
	}
	switch c.Mode {
	case "", ModeElector:
		c.Mode = ModeElector
		if c.Slots != 0 || c.Every != 0 {
			return bad("--slots needs a semaphore run and --every a schedule run (Mode %q)", c.Mode)
		}
	case ModeSemaphore:
		if c.Slots == 0 {
			c.Slots = 2
		}
		if c.Slots < 1 || c.Slots >= c.Nodes {
			return bad("--slots %d: need 1 to --nodes - 1 (%d): with a slot for every node, nobody ever waits for one", c.Slots, c.Nodes-1)
		}
		if c.Every != 0 {
			return bad("--every needs a schedule run, not a semaphore")
		}
		// One resource per slot: the register fences per slot (and one for
		// the slot the extra-slot control adds).
		c.Resources = c.Slots
		if c.BrokenStore == brokenExtraSlot {
			c.Resources++
		}
	case ModeSchedule:
		if c.Every == 0 {
			c.Every = 2 * time.Second
		}
		if c.Every < time.Second || c.Every%time.Second != 0 {
			return bad("--every %v: want a whole number of seconds, at least 1s", c.Every)
		}
		if c.Slots != 0 {
			return bad("--slots needs a semaphore run, not a schedule")
		}
		if c.Every/2 <= t.WindDown {
			return bad("--every %v: a run works for half a period, which must exceed the wind-down %v", c.Every, t.WindDown)
		}
	default:
		return bad("mode %q: want %s, %s or %s", c.Mode, ModeElector, ModeSemaphore, ModeSchedule)
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
			if !proxied(desc.Reach, eps) && isNetworkFault(f) {
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
				f, u.Scheme, faultPause, faultKill, faultClock, faultTwin)
		}
		if desc.Reach == store.ReachAPI && !proxied(desc.Reach, eps) && isNetworkFault(f) {
			return bad("fault %q needs a store reached over the network through the harness's proxy; the harness proxies a %s:// store only when its kubeconfig names a server on this host (https://127.0.0.1 or ::1 or localhost), and this one does not (use %s, %s, %s, %s)",
				f, u.Scheme, faultPause, faultKill, faultClock, faultTwin)
		}
	}
	if c.BrokenStore != "" {
		if err := validBroken(c.BrokenStore); err != nil {
			return nil, nil, nil, err
		}
		if m := brokenMode[c.BrokenStore]; m != "" && m != c.Mode {
			return bad("--broken-store %s needs a %s run", c.BrokenStore, m)
		}
	}
	switch c.Register {
	case "":
		c.Register = defaultRegister(desc)
	case registerHTTP, registerSQLite:
	case registerPostgres:
		if desc != &postgres.Descriptor {
			return bad("--register postgres needs a PostgreSQL store (it puts the register on the same server)")
		}
	default:
		return bad("--register %q: want %s, %s or %s", c.Register, registerHTTP, registerPostgres, registerSQLite)
	}
	return u, desc, eps, nil
}

func (c *Config) timingsJSON() timingsRecord {
	t := c.Timings
	return timingsRecord{LeaseDuration: t.LeaseDuration, RenewDeadline: t.RenewDeadline, RenewInterval: t.RenewInterval,
		RetryPeriod: t.RetryPeriod, Jitter: t.Jitter, WindDown: t.WindDown}
}

// Validate checks a configuration without running it, and returns the fault
// schedule its seed gives.
func Validate(c Config) ([]Planned, error) {
	if _, _, _, err := c.normalize(); err != nil {
		return nil, err
	}
	return planFaults(c.planConfig())
}

func (c *Config) planConfig() scheduleConfig {
	// A schedule's quiet period waits a period more: its failover bound's.
	return scheduleConfig{Seed: c.Seed, Faults: c.Faults, Span: c.Duration, Nodes: c.Nodes, Timings: c.timingsJSON(), Slack: c.Slack + c.Every, MaxDrift: c.MaxDrift, LeaderBias: c.LeaderBias, Overlap: c.Overlap}
}
