package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store"
)

type doctorCmd struct {
	_ [0]func() // not comparable: spares the binary an equality function

	env     *Env
	fs      *flag.FlagSet
	store   storeFlag
	timings timingFlags
	lease   string
	samples int
}

func newDoctorCmd(env *Env) Command {
	c := &doctorCmd{env: env}
	c.fs = newFlagSet(env, "doctor", "[flags]", `
Checks a store and a set of timings (the same flags as run): measures the store's read
round trip, and prints what the timings mean: the safety margin between safeUntil and the
earliest moment a rival may legally take over, how many renewal attempts fit before
safeUntil, when run stops its command, and the worst-case failover times. It warns (and
exits 1) when the arithmetic is unsafe or fragile for the measured round trip. It changes
nothing in the store.

Examples:
  leasehold doctor
  leasehold doctor --store postgres://app@db/app --lease-duration 6s --renew-deadline 4s`)
	c.store.register(c.fs)
	c.store.readOnly = true // a mistyped path must not become a new, empty store
	c.timings.register(c.fs)
	c.fs.StringVar(&c.lease, "lease", "leasehold-doctor", "the lease `NAME` to read while measuring the round trip (read only)")
	c.fs.IntVar(&c.samples, "samples", 5, "how many reads measure the round trip")
	return c
}

func (c *doctorCmd) Run(ctx context.Context, args []string) error {
	if err := parseFlags(c.fs, args); err != nil {
		return err
	}
	if c.fs.NArg() != 0 {
		return usagef("takes no arguments, got %q", c.fs.Args())
	}
	if c.samples < 1 {
		return usagef("--samples %d must be at least 1", c.samples)
	}
	if err := validateLeaseName(c.lease); err != nil {
		return usagef("--lease: %v", err)
	}
	tm, termGrace, killMargin, err := c.timings.resolve()
	if err != nil {
		return err
	}
	st, err := c.store.open(ctx, c.env)
	if err != nil {
		return err
	}
	defer closeStore(st)
	rtts, err := measure(ctx, st, c.lease, c.samples, c.store.timeout)
	if err != nil {
		return err
	}
	cp := capabilities(st.Store)
	cp.schema = schemaState(ctx, st.Store, c.store.timeout)
	r := diagnose(tm, termGrace, killMargin, rtts, cp)
	r.print(c.env.Stdout, st.Name)
	if len(r.warnings) > 0 {
		return &ExitError{Code: ExitFailure}
	}
	return nil
}

// measure times n reads of name.
func measure(ctx context.Context, st *openedStore, name string, n int, timeout time.Duration) ([]time.Duration, error) {
	var rtts []time.Duration
	for i := 0; i < n; i++ {
		gctx, cancel := context.WithTimeout(ctx, timeout)
		start := time.Now()
		_, err := st.Store.Get(gctx, name)
		rtt := time.Since(start)
		cancel()
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, &StoreError{URL: st.Name, Err: err}
		}
		rtts = append(rtts, rtt)
	}
	sort.Slice(rtts, func(i, j int) bool { return rtts[i] < rtts[j] })
	return rtts, nil
}

type caps struct {
	_ [0]func() // not comparable: spares the binary an equality function

	watch, list, force, history, migrate bool
	// schema is what store.MigrationChecker said (schemaState); empty for a
	// store without it.
	schema string
	// watchLag: how late a watch that polls learns of a change made
	// elsewhere (store.WatchLagger); 0 for a watch that is pushed.
	watchLag time.Duration
}

func capabilities(st store.Store) caps {
	var c caps
	_, c.watch = st.(store.Watcher)
	if wl, ok := st.(store.WatchLagger); ok && c.watch {
		c.watchLag = wl.WatchLag()
	}
	_, c.list = st.(store.Lister)
	_, c.force = st.(store.ForceReleaser)
	_, c.history = st.(store.Historian)
	_, c.migrate = st.(store.Migrator)
	return c
}

// schemaState asks a store that can tell (store.MigrationChecker) whether its
// schema is current. It is said, not warned of: what the store cannot do on
// the older schema fails on its own, naming the migration.
func schemaState(ctx context.Context, st store.Store, timeout time.Duration) string {
	mc, ok := st.(store.MigrationChecker)
	if !ok {
		return ""
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	current, err := mc.MigrationCurrent(cctx)
	switch {
	case err != nil:
		return fmt.Sprintf("not checked (%v)", err)
	case current:
		return "current"
	default:
		return "made by an earlier version: `leasehold migrate` (run as a role that may change the schema) adds what this version brings, such as PostgreSQL's lease functions, which make each call cheaper, or MySQL's fair queue tables"
	}
}

// diagnosis is the arithmetic of a set of timings for a measured round trip.
type diagnosis struct {
	tm                    leasehold.Timings
	termGrace, killMargin time.Duration
	rtts                  []time.Duration
	caps                  caps

	margin       time.Duration // lease duration - renew deadline
	attempts     int           // renewal attempts between the last success and the cut-off
	cutoff       time.Duration // after the last successful renewal was sent: the work is stopped
	crashFail    time.Duration // worst-case failover after the holder dies
	releaseFail  time.Duration // worst-case failover after a clean release
	warnings     []string
	maxRTT       time.Duration
	retryWaitMax time.Duration
}

func diagnose(tm leasehold.Timings, termGrace, killMargin time.Duration, rtts []time.Duration, cp caps) *diagnosis {
	d := &diagnosis{tm: tm, termGrace: termGrace, killMargin: killMargin, rtts: rtts, caps: cp}
	d.maxRTT = rtts[len(rtts)-1]
	d.margin = tm.LeaseDuration - tm.RenewDeadline
	d.cutoff = tm.RenewDeadline - tm.WindDown
	// Renewals are sent RenewInterval after the last success, then every
	// RetryPeriod after a failure, and must be answered before the cut-off.
	for at := tm.RenewInterval; at+d.maxRTT < d.cutoff; at += tm.RetryPeriod {
		d.attempts++
	}
	d.retryWaitMax = tm.RetryPeriod + time.Duration(tm.JitterFraction()*float64(tm.RetryPeriod))
	// A waiter sleeps at most until the holder's term expires (the store says
	// how long it has left), so after a crash the lease is taken over about
	// one lease duration after the last renewal reached the store.
	d.crashFail = tm.LeaseDuration + 2*d.maxRTT
	if cp.watch {
		d.releaseFail = cp.watchLag + 2*d.maxRTT
	} else {
		d.releaseFail = d.retryWaitMax + d.maxRTT
	}

	warn := func(format string, args ...any) { d.warnings = append(d.warnings, fmt.Sprintf(format, args...)) }
	if min := max(tm.LeaseDuration/10, 4*d.maxRTT); d.margin < min {
		warn("the safety margin %v (lease duration - renew deadline) is below %v (a tenth of the lease, or 4 round trips): it must absorb clock-rate drift and any delay before a stale holder stops; lower --renew-deadline or raise --lease-duration", d.margin, min)
	}
	switch {
	case d.attempts == 0:
		warn("no renewal can be answered before the cut-off: renew interval %v + round trip %v is past renew deadline - term grace - kill margin = %v; every term ends after one renew deadline", tm.RenewInterval, d.maxRTT, d.cutoff)
	case d.attempts == 1:
		warn("only one renewal attempt fits before the cut-off (%v after the last success): a single failed renewal ends the term; lower --renew-interval or --retry-period, or raise --renew-deadline", d.cutoff)
	}
	if d.maxRTT > tm.RetryPeriod/2 {
		warn("the store's round trip (up to %v) is more than half the retry period %v, which bounds each renewal request: renewals will time out", d.maxRTT, tm.RetryPeriod)
	}
	if 4*d.maxRTT > d.cutoff {
		warn("the store's round trip (up to %v) is more than a quarter of the %v a grant is trusted for: slow grants are given back at once", d.maxRTT, d.cutoff)
	}
	if killMargin < 10*time.Millisecond {
		warn("--kill-margin %v leaves almost no time for SIGKILL to land before safeUntil", killMargin)
	}
	return d
}

func (d *diagnosis) print(w io.Writer, storeName string) {
	yes := func(b bool) string {
		if b {
			return "yes"
		}
		return "no"
	}
	tm := d.tm
	median := d.rtts[len(d.rtts)/2]
	fmt.Fprintf(w, "store     %s\n", storeName)
	fmt.Fprintf(w, "          read round trip over %d samples: min %v, median %v, max %v\n", len(d.rtts), round(d.rtts[0]), round(median), round(d.maxRTT))
	fmt.Fprintf(w, "          watch %s, list %s, force-release %s, history %s, migrate %s\n", yes(d.caps.watch), yes(d.caps.list), yes(d.caps.force), yes(d.caps.history), yes(d.caps.migrate))
	if d.caps.schema != "" {
		fmt.Fprintf(w, "          schema %s\n", d.caps.schema)
	}
	fmt.Fprintf(w, "timings   lease %v, renew deadline %v, renew every %v, retry every %v (+ up to %.0f%% jitter)\n", tm.LeaseDuration, tm.RenewDeadline, tm.RenewInterval, tm.RetryPeriod, tm.JitterFraction()*100)
	fmt.Fprintf(w, "          run: SIGTERM %v before safeUntil, SIGKILL %v before it (term grace %v, kill margin %v)\n\n", tm.WindDown, d.killMargin, d.termGrace, d.killMargin)

	rows := [][2]string{
		{"safety margin", fmt.Sprintf("%v: a holder stops trusting its term (safeUntil) %v after sending its last successful renewal; a rival may take over no earlier than %v after it", d.margin, tm.RenewDeadline, tm.LeaseDuration)},
		{"command killed by", fmt.Sprintf("%v before safeUntil, so at least %v before the earliest legal takeover", d.killMargin, d.margin+d.killMargin)},
		{"renewal attempts", fmt.Sprintf("%d before the cut-off (%v after the last success): one at %v, then a retry every %v", d.attempts, d.cutoff, tm.RenewInterval, tm.RetryPeriod)},
		{"failover, crash", fmt.Sprintf("at most about %v: the lease expires %v after the last renewal, and waiters wake when it does", round(d.crashFail), tm.LeaseDuration)},
	}
	switch {
	case d.caps.watch && d.caps.watchLag > 0:
		rows = append(rows, [2]string{"failover, release", fmt.Sprintf("at most about %v: waiters elsewhere learn of a release at their next poll of the store at the latest, within %v (a store may ring them sooner: MySQL's doorbells)", round(d.releaseFail), d.caps.watchLag)})
	case d.caps.watch:
		rows = append(rows, [2]string{"failover, release", fmt.Sprintf("about %v: the store tells waiters at once", round(d.releaseFail))})
	default:
		rows = append(rows, [2]string{"failover, release", fmt.Sprintf("at most about %v: this store cannot tell waiters, they poll every retry period (+ jitter)", round(d.releaseFail))})
	}
	for _, r := range rows {
		fmt.Fprintf(w, "%-18s %s\n", r[0], r[1])
	}
	fmt.Fprintln(w)
	if len(d.warnings) == 0 {
		fmt.Fprintln(w, "OK: the arithmetic is safe for the measured round trip.")
		return
	}
	for _, msg := range d.warnings {
		fmt.Fprintf(w, "WARNING: %s\n", msg)
	}
	fmt.Fprintf(w, "%d warning(s).\n", len(d.warnings))
}

func round(d time.Duration) time.Duration {
	switch {
	case d < time.Millisecond:
		return d.Round(time.Microsecond)
	case d < time.Second:
		return d.Round(100 * time.Microsecond)
	default:
		return d.Round(time.Millisecond)
	}
}
