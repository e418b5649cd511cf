package cli

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/chaos"
	"github.com/leasehold/leasehold/store/registry"
)

// chaosNodeCommand is the hidden subcommand verify starts its nodes with.
const chaosNodeCommand = "__chaos-node"

type verifyCmd struct {
	env   *Env
	flags verifyFlags
}

type verifyFlags struct {
	_ [0]func() // not comparable: spares the binary an equality function

	store, faults, out, register, brokenStore                string
	nodes, resources, groups, overlap, untilFaults, slots    int
	duration, slack, maxSkew, writeInterval, think           time.Duration
	leaseDuration, renewDeadline, renewInterval, retryPeriod time.Duration
	windDown, every                                          time.Duration
	jitter, maxDrift, leaderBias                             float64
	seed                                                     uint64
	unfenced, keep, plan, allowRemote, fair                  bool
}

func newVerifyCmd(env *Env) Command { return &verifyCmd{env: env} }

func (c *verifyCmd) Run(ctx context.Context, args []string) error {
	f := &c.flags
	fs := newFlagSet(c.env, "verify", "[flags]", `
Proves, on your own store, that no stale write is ever accepted. verify starts --nodes real
leasehold processes that contend for a lease; the leader writes to a fenced register with
its token. Meanwhile it injects faults, at random but reproducibly from --seed: pauses longer
than the lease (SIGSTOP), crashes and restarts (SIGKILL), cut-offs, resets and latency
between a node and the store (through a TCP fault proxy in front of the store), a store
restart (emulated at the proxies: every connection reset and refused for a while), clock
skew and rate drift, and twins started with another node's identity. Then it checks the
recorded history: the register never accepted a lower token after a higher one, no token
was granted twice, a grant made after another has a higher token, every accepted write came
from its token's term, no two live nodes ran guarded work at once, no work ran past its
safeUntil, a leader came back within the failover bound after each fault, and the register
is linearizable (porcupine). It prints one summary line and writes an HTML report.

The register is a table on the same PostgreSQL server (for a postgres:// store; created
and dropped by verify), its own SQLite file (sqlite://), or a small server inside verify.
Only stores on this host (loopback) are accepted unless --allow-remote is given. Without
--store, verify uses a new SQLite file in the output directory.

Exit status: 0 when every check passed, 1 when the checker found a violation, 2 for bad
flags, 69 when the store cannot be reached.

Examples:
  leasehold verify
  leasehold verify --store postgres://postgres@127.0.0.1/test --duration 2m --seed 42
  leasehold verify --store redis://127.0.0.1:6379/0 --faults pause,blackhole --plan
  leasehold verify --groups 12 --overlap 3 --lease-duration 1s --until-faults 10000 --duration 24h   # a soak
  leasehold verify --fair --faults pause,kill   # electors waiting in the fair queue (run --fair)
  leasehold verify --unfenced          # the negative control: must exit 1
  leasehold verify --broken-store early-grant --faults kill   # a store that grants early: must exit 1
  leasehold verify --slots 2 --faults pause,kill,clock   # a semaphore of 2 slots on 3 nodes
  leasehold verify --every 2s --faults pause,kill,clock  # a job run at most once per 2 s period
  leasehold verify --every 2s --broken-store forget-claims --faults kill   # must exit 1`)
	fs.StringVar(&f.store, "store", "", "the lease store `URL` to verify (default: $"+StoreEnv+", else a new SQLite file in --out)")
	fs.IntVar(&f.nodes, "nodes", 3, "node processes (of each lease group)")
	fs.IntVar(&f.groups, "groups", 1, "independent lease groups run at once, each with its own --nodes nodes, lease,\nregister and fault schedule; the summary adds them up")
	fs.IntVar(&f.overlap, "overlap", 1, "most faults injected together in one burst, each on its own node (1 to --nodes);\neach burst is followed by a quiet period after its last fault heals")
	fs.IntVar(&f.untilFaults, "until-faults", 0, "end the run once the groups have injected `N` faults (or when --duration ends)")
	fs.DurationVar(&f.duration, "duration", 30*time.Second, "how long faults are injected, after the first leader is elected")
	fs.Uint64Var(&f.seed, "seed", 0, "seed of the fault schedule and clock offsets (default: random, printed)")
	fs.StringVar(&f.faults, "faults", "all", "comma-separated `KINDS` to inject: "+strings.Join(chaos.AllFaults, ", ")+", or all\n(a SQLite store has no network, nor a Kubernetes store whose kubeconfig names a server off this host:\nall means pause, kill, clock, twin there)")
	fs.Float64Var(&f.leaderBias, "leader-bias", 0.7, "share of node faults aimed at whichever node leads, in [0, 1]")
	fs.DurationVar(&f.leaseDuration, "lease-duration", 0, "lease timings (default: a 2s lease, 1.4s renew deadline, 400ms renew interval,\n300ms retry period, 400ms wind-down; with only --lease-duration, the rest scale)")
	fs.DurationVar(&f.renewDeadline, "renew-deadline", 0, "the holder's trust window after each renewal it sent")
	fs.DurationVar(&f.renewInterval, "renew-interval", 0, "how often the holder renews")
	fs.DurationVar(&f.retryPeriod, "retry-period", 0, "how often standbys try to acquire")
	fs.Float64Var(&f.jitter, "jitter", 0, "random share of the retry period added to each wait (default 0.2)")
	fs.DurationVar(&f.windDown, "wind-down", 0, "how long before safeUntil the work is told to stop")
	fs.DurationVar(&f.slack, "slack", time.Second, "added to the failover bound (lease duration + retry period)")
	fs.DurationVar(&f.maxSkew, "max-skew", 5*time.Second, "largest constant offset of a node's clock")
	fs.Float64Var(&f.maxDrift, "max-drift", 0.2, "clock faults run a node's clock at a rate in [1-d, 1+d]; must stay below\n1 - renew-deadline/lease-duration")
	fs.DurationVar(&f.writeInterval, "write-interval", 10*time.Millisecond, "pause between the leader's writes")
	fs.DurationVar(&f.think, "think", 40*time.Millisecond, "time each write spends on its way, without looking at the lease; below --wind-down")
	fs.IntVar(&f.resources, "resources", 2, "register resources the leader writes in turn")
	fs.StringVar(&f.register, "register", "", "the fenced register: http, postgres or sqlite (default: postgres for a\nPostgreSQL store, sqlite for SQLite, http otherwise)")
	fs.BoolVar(&f.fair, "fair", false, "the nodes' electors wait in the store's fair queue, as 'leasehold run --fair' does\n(every group; not with --slots or --every)")
	fs.BoolVar(&f.unfenced, "unfenced", false, "turn the register's token check off: the negative control, which must fail")
	fs.IntVar(&f.slots, "slots", 0, "run a semaphore of `N` slots on every node instead of an elector (1 to --nodes - 1): each holder\nwrites to its slot's resource with its slot's token; checks per slot, and at most N at work at once")
	fs.DurationVar(&f.every, "every", 0, "run a scheduled job of period `D` (whole seconds) on every node instead of an elector,\non each node's skewed clock: each run writes with its token; checks at most one run per period")
	fs.StringVar(&f.brokenStore, "broken-store", "", "`MODE` runs every node on a deliberately broken wrapper of the store (or, for\nforge-token and overrun, a node that misuses the library): "+strings.Join(chaos.BrokenStores, ", ")+";\na negative control for the checks that judge the store and the nodes, which must fail")
	fs.StringVar(&f.out, "out", "", "`DIR` for the histories and report.html (default: a new temporary directory)")
	fs.BoolVar(&f.keep, "keep", false, "keep the PostgreSQL register tables")
	fs.BoolVar(&f.plan, "plan", false, "print the fault schedule the seed gives, and exit without running")
	fs.BoolVar(&f.allowRemote, "allow-remote", false, "allow a store that is not on this host (verify writes test data and cuts connections)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return usagef("takes no arguments, got %q", fs.Args())
	}
	if f.groups < 1 {
		return usagef("--groups %d: need 1 to 64 lease groups", f.groups)
	}
	if f.overlap < 1 {
		return usagef("--overlap %d: need 1 to --nodes (%d)", f.overlap, f.nodes)
	}
	if f.slots != 0 && f.every != 0 {
		return usagef("--slots and --every: a run is a semaphore or a schedule, not both")
	}
	if err := checkFairMode(f.fair, f.slots != 0, f.every != 0); err != nil {
		return err
	}
	faults, err := chaos.ParseFaults(f.faults)
	if err != nil {
		return usagef("--faults: %v", strings.TrimPrefix(err.Error(), chaos.ErrInvalid.Error()+": "))
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("cannot find the leasehold executable to start nodes: %w", err)
	}
	out := f.out
	if out == "" && !f.plan {
		if out, err = os.MkdirTemp("", "leasehold-verify-"); err != nil {
			return err
		}
	}
	storeURL, from := f.store, "--store"
	if storeURL == "" {
		storeURL, from = c.env.Getenv(StoreEnv), "$"+StoreEnv
	}
	if storeURL == "" {
		dir := out
		if dir == "" {
			dir = os.TempDir()
		}
		storeURL = (&url.URL{Scheme: "sqlite", Path: filepath.Join(dir, "leases.db")}).String()
		from = "default"
		if !f.plan {
			fmt.Fprintf(c.env.Stderr, "leasehold verify: no --store given: using a new SQLite file, %s\n", storeURL)
		}
	}
	if f.faults == "all" {
		faults = nil // every kind the store supports: a store without a proxy has no network faults
	}
	mode := chaos.ModeElector
	switch {
	case f.slots != 0:
		mode = chaos.ModeSemaphore
	case f.every != 0:
		mode = chaos.ModeSchedule
	}
	fairGroups := 0
	if f.fair {
		fairGroups = f.groups
	}
	cfg := chaos.Config{
		StoreURL: storeURL, AllowRemote: f.allowRemote, Mode: mode, Slots: f.slots, Every: f.every,
		Open:        registry.Open,
		NodeCommand: []string{self, chaosNodeCommand},
		Nodes:       f.nodes, Groups: f.groups, Overlap: f.overlap, UntilFaults: f.untilFaults, Duration: f.duration, Seed: f.seed, Faults: faults, LeaderBias: f.leaderBias,
		Timings: leasehold.Timings{LeaseDuration: f.leaseDuration, RenewDeadline: f.renewDeadline, RenewInterval: f.renewInterval,
			RetryPeriod: f.retryPeriod, Jitter: f.jitter, WindDown: f.windDown},
		Slack: f.slack, MaxSkew: f.maxSkew, MaxDrift: f.maxDrift, WriteInterval: f.writeInterval, Think: f.think,
		Resources: f.resources, Register: f.register, Unfenced: f.unfenced, FairGroups: fairGroups, BrokenStore: f.brokenStore, Dir: out, Keep: f.keep,
		Progress: c.env.Stderr,
	}
	if cfg.Seed == 0 {
		cfg.Seed = uint64(time.Now().UnixNano())%1_000_000_000 + 1
	}
	if f.plan {
		plan, err := chaos.Validate(cfg)
		if err != nil {
			return verifyUsage(from, err)
		}
		fmt.Fprintf(c.env.Stdout, "fault schedule of seed %d (times from the first leader's election):\n", cfg.Seed)
		for _, p := range plan {
			fmt.Fprintf(c.env.Stdout, "  %s\n", p)
		}
		return nil
	}
	res, err := chaos.Run(ctx, cfg)
	if err != nil && res == nil && f.out == "" {
		os.Remove(out) // the directory made above, if the refused run left it empty
	}
	if u, perr := url.Parse(storeURL); perr == nil {
		from = u.Redacted() // name the store, never its password
	}
	if res != nil {
		for _, e := range res.UnexpectedExits {
			fmt.Fprintf(c.env.Stderr, "leasehold verify: warning: node %s\n", e)
		}
		fmt.Fprintln(c.env.Stdout, res.Summary)
		fmt.Fprintf(c.env.Stdout, "report: %s\n", res.Report)
		fmt.Fprintf(c.env.Stdout, "repeat: leasehold verify --seed %d (with the same flags)\n", res.Seed)
	}
	if err != nil {
		return verifyUsage(from, err)
	}
	if !res.Result.OK() {
		return &ExitError{Code: ExitFailure, Msg: fmt.Sprintf("%d violations found; see %s", len(res.Result.Violations), res.Report)}
	}
	return nil
}

// verifyUsage maps the harness's errors to the command's exit codes.
func verifyUsage(from string, err error) error {
	switch {
	case errors.Is(err, chaos.ErrInvalid):
		return usagef("%s", strings.TrimPrefix(err.Error(), chaos.ErrInvalid.Error()+": "))
	case errors.Is(err, chaos.ErrStore):
		return &StoreError{URL: from, Err: err}
	}
	return err
}

// chaosNodeCmd is one node of a verify run (hidden).
type chaosNodeCmd struct{ env *Env }

func newChaosNodeCmd(env *Env) Command { return &chaosNodeCmd{env: env} }

func (c *chaosNodeCmd) Run(ctx context.Context, args []string) error {
	for _, a := range args {
		if a == "-h" || a == "-help" || a == "--help" {
			fmt.Fprintf(c.env.Stdout, "Usage: leasehold %s [flags]\n\nOne node of a `leasehold verify` run, started by it with its flags; not for direct use.\n", chaosNodeCommand)
			return nil
		}
	}
	if code := chaos.NodeMain(ctx, args, c.env.Stdin, c.env.Stdout, c.env.Stderr, registry.Open); code != 0 {
		return &ExitError{Code: code}
	}
	return nil
}
