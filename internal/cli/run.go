package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store"
)

type runCmd struct {
	_ [0]func() // not comparable: spares the binary an equality function

	env     *Env
	fs      *flag.FlagSet
	store   storeFlag
	timings timingFlags

	lease        string
	slots        int // --slots: a semaphore of this many slots (runslots.go); 0: one lease
	identity     string
	metadata     string
	restart      bool
	restartDelay time.Duration
	stopOnLoss   bool
	httpAddr     string
	logFormat    string
	logLevel     string
	maxHold      time.Duration
	fair         bool // --fair: wait in the store's first-come, first-served queue (Config.Fair)
	sched        scheduleFlags

	// Set while running.
	elector  *leasehold.Elector
	sem      *leasehold.Semaphore // with --slots
	terms    *termTracker         // with --slots or --every: the terms held, for --http
	metrics  *metrics
	log      *slog.Logger
	sup      *supervisor
	tm       leasehold.Timings
	running  atomic.Bool
	started  time.Time
	storeURL string

	mu           sync.Mutex
	shutdownCode int  // the command's exit code when run stopped it for a signal
	shutdownRan  bool // a command was running when run was told to stop
}

const runAbout = `
Waits until this node holds the lease NAME, then runs CMD with these variables:

  LEASEHOLD_LEASE            the lease name
  LEASEHOLD_HOLDER           this node's holder identity (--identity plus a random suffix)
  LEASEHOLD_TOKEN            the fencing token of this term: send it and the holder with
                             every write, and have the resource refuse an older term (a lower
                             token, or the same token from another holder)
  LEASEHOLD_SAFE_UNTIL       the wall-clock time (RFC 3339) until which the term is trusted
  LEASEHOLD_SAFE_UNTIL_FILE  a file holding that time, rewritten (atomically) at each renewal

The safe-until values are advisory: they are wall-clock readings of a deadline run keeps
on its monotonic clock. The guard is run's own: when the term ends (no renewal before
safeUntil, the store says it is lost, or run is told to stop), the command's process group
gets SIGTERM, then SIGKILL after --term-grace, so that it is dead --kill-margin before
safeUntil, and therefore before any rival may take over. A separate watchdog process enforces
that deadline even while run itself is frozen (SIGSTOP), and kills the command at once if
run dies.

SIGINT and SIGTERM sent to run are forwarded to the command's process group; run then
waits for it (SIGKILL after --term-grace), releases the lease and exits with its code.
When the command exits on its own, run releases the lease and exits with the command's
code (128+N if it died of signal N), unless --restart runs it again. After losing the
lease, run stops the command and contends again, unless --stop-on-loss.

With --fair, the nodes waiting for the lease queue in the store, first come, first
served: only the node first in the queue tries to take the lease, so none waits for ever
behind luckier ones. Every node of a lease should then run with --fair (one without it
still competes whenever the lease is free). The store must keep a queue (SQLite,
PostgreSQL, MySQL/MariaDB, Redis, ZooKeeper, etcd); run refuses --fair on another.
On etcd the queue is etcd's own, shared with waiting "etcdctl lock" users, and a node
without --fair waits until the queue is empty.

With --slots N, NAME is a semaphore of N slots: up to N nodes run CMD at once, each in a
slot of its own (the lease NAME.slot-I), with that slot's token; LEASEHOLD_LEASE is the
slot's lease name, the key a fenced resource keeps its last token under.

Example:
  leasehold run --store postgres://app@db/app --lease nightly-report -- ./report.sh --all
  leasehold run --store postgres://app@db/app --lease transcode --slots 4 -- ./transcode.sh
`

func newRunCmd(env *Env) Command {
	r := &runCmd{env: env}
	fs := newFlagSet(env, "run", "--lease NAME [flags] -- CMD [ARGS...]", runAbout+scheduleAbout)
	r.fs = fs
	r.store.register(fs)
	r.timings.register(fs)
	host, _ := os.Hostname()
	if host == "" {
		host = "node"
	}
	fs.StringVar(&r.lease, "lease", "", "the lease `NAME` the nodes share (required)")
	fs.IntVar(&r.slots, "slots", 0, slotsUsage)
	fs.StringVar(&r.identity, "identity", host, "this node's name; a random suffix makes each process's holder identity unique")
	fs.StringVar(&r.metadata, "metadata", "", "optional data stored with the lease while this node leads (such as its address)")
	fs.BoolVar(&r.restart, "restart", false, "run the command again when it exits while this node still leads")
	fs.DurationVar(&r.restartDelay, "restart-delay", time.Second, "wait between a command's exit and its restart (with --restart)")
	fs.BoolVar(&r.stopOnLoss, "stop-on-loss", false, "exit (code 3) after losing the lease, instead of contending again")
	fs.StringVar(&r.httpAddr, "http", "", "serve the status page, /healthz, /leader (with --slots /slots, with --every /schedule) and /metrics on `ADDR` (such as 127.0.0.1:9090)")
	fs.StringVar(&r.logFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&r.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.BoolVar(&r.fair, "fair", false, "wait in a first-come, first-served queue kept in the store, so that no node starves (not with --slots or --every)")
	fs.DurationVar(&r.maxHold, "max-hold", 0, "stop the command and stop renewing `D` after the term began, so a stuck command cannot keep the lease (0: no cap; with --every, the period)")
	r.sched.register(fs)
	return r
}

func (r *runCmd) Run(ctx context.Context, args []string) error {
	if err := parseFlags(r.fs, args); err != nil {
		return err
	}
	argv := r.fs.Args()
	switch {
	case r.lease == "":
		return usagef("--lease is required")
	case len(argv) == 0:
		return usagef("no command given: leasehold run --lease NAME [flags] -- CMD [ARGS...]")
	}
	if err := validateLeaseName(r.lease); err != nil {
		return usagef("--lease: %v", err)
	}
	if err := store.ValidateMetadata(r.metadata); err != nil {
		return usagef("--metadata: %v", err)
	}
	if r.restartDelay < 0 {
		return usagef("--restart-delay %v is negative", r.restartDelay)
	}
	if r.maxHold < 0 {
		return usagef("--max-hold %v is negative", r.maxHold)
	}
	if err := r.sched.check(r); err != nil {
		return err
	}
	if err := r.checkSlots(); err != nil {
		return err
	}
	if err := checkFairMode(r.fair, r.slots > 0, r.sched.every > 0); err != nil {
		return err
	}
	tm, termGrace, killMargin, err := r.timings.resolve()
	if err != nil {
		return err
	}
	r.tm = tm
	log, err := newLogger(r.env, r.logFormat, r.logLevel)
	if err != nil {
		return err
	}
	r.log = log.With("lease", r.lease)
	if !supervisorSupported {
		return errors.New("leasehold run needs process groups and signals (Linux or another Unix)")
	}
	if _, err := exec.LookPath(argv[0]); err != nil {
		code := ExitCannotExecute
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			code = ExitNotFound
		}
		return &ExitError{Code: code, Msg: err.Error()}
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("cannot find the leasehold binary for the watchdog: %w", err)
	}

	st, err := r.store.open(ctx, r.env)
	if err != nil {
		return err
	}
	defer closeStore(st)
	r.storeURL = st.Name
	if err := checkLimits(tm, st.Store, st.Name); err != nil {
		return err
	}
	if err := checkFair(r.fair, st); err != nil {
		return err
	}
	if err := st.probe(ctx, r.lease, r.store.timeout); err != nil {
		return err
	}

	tracked := []string{r.lease}
	if r.slots > 0 {
		tracked = tracked[:0]
		for i := range r.slots {
			tracked = append(tracked, leasehold.SlotName(r.lease, i))
		}
	}
	if r.slots > 0 || r.sched.every > 0 {
		r.terms = newTermTracker()
	}
	r.metrics = newMetrics(r.lease, tracked...)
	renewed := make(chan struct{}, 1)
	// A store that refuses this client's writes for good ends the run.
	ctx, stopRefused := context.WithCancelCause(ctx)
	defer stopRefused(nil)
	cfg := leasehold.Config{
		Identity:   r.identity,
		Metadata:   r.metadata,
		Timings:    tm,
		MaxHold:    r.maxHold,
		StopOnLoss: r.stopOnLoss,
		Fair:       r.fair,
		OnEvent: func(ev leasehold.Event) {
			r.metrics.observe(ev)
			if r.terms != nil {
				r.terms.observe(ev)
			}
			r.logEvent(ev)
			if ev.Kind == leasehold.EventAcquireAttempt && writeRefused(ev.Err) {
				stopRefused(&writeRefusedError{store: st.Name, err: ev.Err})
			}
			if ev.Kind == leasehold.EventRenewed {
				select {
				case renewed <- struct{}{}:
				default:
				}
			}
		},
	}

	// The safe-until file's directory; one left by a run killed with SIGKILL
	// is removed by the next run (makeRunDir).
	tmp, removeTmp, err := makeRunDir()
	if err != nil {
		return err
	}
	defer removeTmp()
	// The command runs in a process group of its own, so a terminal would
	// stop it (SIGTTIN) the moment it read from it: give it no terminal input.
	stdin := r.env.Stdin
	if isTerminal(stdin) {
		stdin = nil
	}
	r.sup = &supervisor{
		exe: exe, argv: argv,
		termGrace: termGrace, killMargin: killMargin,
		stdin: stdin, stdout: r.env.rawStdout, stderr: r.env.rawStderr,
		log: r.log, root: ctx,
		safeFile: filepath.Join(tmp, "safe-until"),
		renewed:  renewed,
		onStart:  func(int) { r.metrics.childStarted() },
	}
	var sched *leasehold.Scheduler
	if r.sched.every > 0 {
		if sched, err = r.newScheduler(st.Store, cfg); err != nil {
			return err
		}
	} else {
		if r.elector, err = leasehold.NewElector(st.Store, r.lease, cfg); err != nil {
			return configError(err)
		}
		if r.slots > 0 {
			semCfg := cfg
			semCfg.KeepAlive = true // renewed while the command runs, as an elector's term
			if r.sem, err = leasehold.NewSemaphore(st.Store, r.lease, r.slots, semCfg); err != nil {
				return configError(err)
			}
		}
	}

	r.started = time.Now()
	r.running.Store(true)
	defer r.running.Store(false)
	if r.httpAddr != "" {
		stopHTTP, err := r.serveHTTP(st.Store)
		if err != nil {
			return err
		}
		defer stopHTTP()
	}
	if sched != nil {
		return r.runScheduled(ctx, st, sched)
	}
	e := r.elector
	r.log.Info("contending", "store", st.Name, "holder", e.Identity(),
		"lease_duration", tm.LeaseDuration.String(), "renew_deadline", tm.RenewDeadline.String(),
		"renew_interval", tm.RenewInterval.String(), "retry_period", tm.RetryPeriod.String(), "fair", r.fair,
		"term_grace", termGrace.String(), "kill_margin", killMargin.String(),
		"command", strings.Join(argv, " "))
	if r.sem != nil {
		err = r.runSlots(ctx)
	} else {
		err = e.Run(ctx, r.work)
	}
	r.running.Store(false)

	var (
		exit    *ExitError
		refused *writeRefusedError
	)
	switch {
	case errors.As(context.Cause(ctx), &refused):
		return &StoreError{URL: st.Name, Err: refused}
	case err == nil:
		return nil
	case errors.As(err, &exit):
		return err
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.shutdownRan {
			return &ExitError{Code: r.shutdownCode}
		}
		r.log.Info("stopped", "cause", context.Cause(ctx).Error())
		return nil
	case r.stopOnLoss && errors.Is(err, leasehold.ErrHandedOver):
		r.log.Info("handed over on request (--stop-on-loss): exiting")
		return nil
	case r.stopOnLoss && (errors.Is(err, leasehold.ErrSafeUntilPassed) || errors.Is(err, leasehold.ErrLeaseLost) || errors.Is(err, leasehold.ErrMaxHold)):
		return &ExitError{Code: ExitLeaseLost, Msg: "lost the lease (--stop-on-loss): " + err.Error()}
	default:
		return err
	}
}

// work is the elector's guarded work: the command, run (and rerun with
// --restart) until it exits on its own or the term ends.
func (r *runCmd) work(ctx context.Context, l *leasehold.Lease) error {
	for {
		// Never start the command with less time left than it takes to stop
		// it: the elector is about to end this term anyway.
		if time.Until(l.SafeUntil()) <= r.tm.WindDown {
			<-ctx.Done()
			return nil
		}
		res, err := r.sup.runOnce(ctx, l)
		if err != nil {
			return err
		}
		if res.deadline && ctx.Err() == nil {
			// The watchdog reached its deadline while the elector still holds
			// the term: a renewal's new deadline reached the watchdog too late,
			// or run was frozen and has not yet noticed its term is over.
			// The check above tells the two apart.
			r.log.Warn("the watchdog stopped the command at its deadline while the term was still held; starting it again if the term is still safe")
			continue
		}
		if ctx.Err() != nil || res.stopped {
			if r.sup.root.Err() != nil {
				r.mu.Lock()
				r.shutdownRan, r.shutdownCode = true, res.code
				r.mu.Unlock()
			}
			// The term is over (lost, expired, or run is stopping): the
			// elector decides what comes next.
			return nil
		}
		if !r.restart {
			if res.code == 0 {
				return nil
			}
			return &ExitError{Code: res.code}
		}
		r.log.Info("restarting the command", "after", r.restartDelay.String())
		t := time.NewTimer(r.restartDelay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

func (r *runCmd) healthView() healthView {
	var status leasehold.Status
	if r.terms != nil {
		status = r.terms.status(r.sem != nil)
	} else {
		status = r.elector.Status()
	}
	return healthView{
		status:   status,
		running:  r.running.Load(),
		started:  r.started,
		timings:  r.tm,
		now:      time.Now(),
		storeURL: r.storeURL,
	}
}

func (r *runCmd) serveHTTP(st store.Store) (stop func(), err error) {
	ln, err := net.Listen("tcp", r.httpAddr)
	if err != nil {
		return nil, usagef("--http %s: %v", r.httpAddr, err)
	}
	// The status page shows every lease of the store where it can list
	// them, else this run's lease.
	var names []string
	if _, ok := st.(store.Lister); !ok {
		names = []string{r.lease}
	}
	page, err := newStatusPage(st, r.storeURL, names, time.Second, r.store.timeout, 50)
	if err != nil {
		ln.Close()
		return nil, err
	}
	if r.terms != nil {
		page.self = r.terms.holds
	} else {
		page.self = func(rec store.Record) bool { return rec.Holder == r.elector.Identity() }
	}
	mux := r.httpHandler(st)
	page.routes(mux)
	stop = servePage(context.Background(), page, ln, scrubHandler(r.env.secrets, mux))
	what := "/leader"
	switch {
	case r.sem != nil:
		what = "/slots"
	case r.sched.every > 0:
		what = "/schedule"
	}
	r.log.Info("serving the status page, /healthz, "+what+" and /metrics", "addr", ln.Addr().String())
	return stop, nil
}

func newLogger(env *Env, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, usagef("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(env.Stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(env.Stderr, opts)), nil
	default:
		return nil, usagef("--log-format %q: want text or json", format)
	}
}

// logEvent logs one step of the election.
func (r *runCmd) logEvent(ev leasehold.Event) {
	log := r.log
	switch ev.Kind {
	case leasehold.EventAcquireAttempt:
		switch o := leasehold.OutcomeOf(ev.Err); {
		case o == leasehold.OutcomeApplied:
			log.Debug("acquire granted", "token", ev.Term.Token, "latency", ev.Latency.String())
		case writeRefused(ev.Err):
			log.Error("acquire refused: the store refuses this client's writes", "err", ev.Err.Error())
		case o == leasehold.OutcomeHeld:
			log.Debug("acquire refused: held", "holder", ev.Record.Holder, "token", ev.Record.Token, "remaining", ev.Record.Remaining.String())
		case o == leasehold.OutcomeQueued:
			log.Debug("acquire refused: others are queued ahead (--fair)")
		default:
			log.Warn("acquire failed, outcome unknown", "err", ev.Err.Error(), "latency", ev.Latency.String())
		}
	case leasehold.EventAcquired:
		log.Info("acquired lease", "holder", ev.Term.Holder, "token", ev.Term.Token, "safe_until", wallAt(ev.SafeUntil).Format(time.RFC3339Nano))
	case leasehold.EventRenewed:
		log.Debug("renewed", "token", ev.Term.Token, "latency", ev.Latency.String(), "safe_until", wallAt(ev.SafeUntil).Format(time.RFC3339Nano))
	case leasehold.EventRenewFailed:
		log.Warn("renewal failed", "token", ev.Term.Token, "err", ev.Err.Error(), "safe_until", wallAt(ev.SafeUntil).Format(time.RFC3339Nano))
	case leasehold.EventLost:
		reason := leasehold.LossReason(ev.Err)
		lv := slog.LevelWarn
		if reason == "released" || reason == "shutdown" || reason == "handed-over" {
			lv = slog.LevelInfo
		}
		log.Log(context.Background(), lv, "term ended", "token", ev.Term.Token, "reason", reason, "cause", errString(ev.Err))
	case leasehold.EventReleased:
		if ev.Err != nil {
			log.Info("release not applied", "token", ev.Term.Token, "err", ev.Err.Error())
		} else {
			log.Info("released lease", "token", ev.Term.Token)
		}
	case leasehold.EventHolderObserved:
		log.Info("standing by", "leader", ev.Record.Holder, "token", ev.Record.Token, "remaining", ev.Record.Remaining.Round(time.Millisecond).String())
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// checkFairMode refuses --fair beside --slots or --every (run and verify).
func checkFairMode(fair, slots, every bool) error {
	switch {
	case fair && slots:
		return usagef("--fair does not go with --slots: a semaphore's slots have no queue")
	case fair && every:
		return usagef("--fair does not go with --every: a scheduled job runs once per period, whoever is first")
	}
	return nil
}

// checkFair refuses --fair on a store without a queue (store.AsQueuer, which
// also sees through a wrapper that reports what it wraps), naming the store,
// before anything is written.
func checkFair(fair bool, st *openedStore) error {
	if !fair {
		return nil
	}
	if _, ok := store.AsQueuer(st.Store); !ok {
		return usagef("--fair: the store %s keeps no first-come, first-served queue (%T has no store.Queuer); run without --fair, or use a store that queues", st.Name, st.Store)
	}
	return nil
}
