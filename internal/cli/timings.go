package cli

import (
	"flag"
	"math"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store"
)

// Bounds on the command's durations. A lease is renewed for as long as its
// holder lives, so a lease longer than a day buys nothing but a day-long wait
// after a crash; beyond it lie typos (a 114-year lease) and arithmetic
// overflow (2562047h). Below a second, the process's own scheduling and the
// stores' TTL granularity (etcd's minimum TTL, the one-second resolution of
// Kubernetes Lease records) eat the whole lease. A store that declares
// store.Limits raises the minimum further (checkLimits).
const (
	maxFlagDuration  = 24 * time.Hour
	minLeaseDuration = time.Second
)

// timingFlags are the lease timings and the child's stop budget, shared by
// `run` and `doctor`. Unset durations take the core's defaults, scaled from
// --lease-duration (see leasehold.Timings).
type timingFlags struct {
	_ [0]func() // not comparable: spares the binary an equality function

	leaseDuration, renewDeadline, renewInterval, retryPeriod time.Duration
	jitter                                                   float64
	termGrace, killMargin                                    time.Duration
	fs                                                       *flag.FlagSet
}

func (t *timingFlags) register(fs *flag.FlagSet) {
	t.fs = fs
	fs.DurationVar(&t.leaseDuration, "lease-duration", leasehold.DefaultTimings().LeaseDuration, "the TTL the store grants: a rival may take over this long after the holder's last renewal")
	fs.DurationVar(&t.renewDeadline, "renew-deadline", 0, "how long after sending its last successful renewal the holder still trusts its term\n(safeUntil); must be below --lease-duration (default 2/3 of --lease-duration)")
	fs.DurationVar(&t.renewInterval, "renew-interval", 0, "how often the holder renews (default 1/3 of --lease-duration)")
	fs.DurationVar(&t.retryPeriod, "retry-period", 0, "how often a standby tries to acquire, and a failed renewal is retried\n(default 2/15 of --lease-duration)")
	fs.Float64Var(&t.jitter, "jitter", leasehold.DefaultTimings().Jitter, "largest fraction of --retry-period added at random to each wait, in [0, 1];\n0 turns jitter off")
	fs.DurationVar(&t.termGrace, "term-grace", 0, "time the command gets between SIGTERM and SIGKILL when its term ends\n(default a quarter of renew-deadline minus renew-interval)")
	fs.DurationVar(&t.killMargin, "kill-margin", 0, "SIGKILL lands this long before safeUntil, so the command is dead before it\n(default a twentieth of renew-deadline minus renew-interval)")
}

// resolve returns the timings with defaults filled in and validated, with
// WindDown = term grace + kill margin, and the two parts. Errors are
// UsageErrors that name the flag.
func (t *timingFlags) resolve() (tm leasehold.Timings, termGrace, killMargin time.Duration, err error) {
	if t.leaseDuration <= 0 {
		return tm, 0, 0, usagef("--lease-duration %v must be positive", t.leaseDuration)
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"--lease-duration", t.leaseDuration}, {"--renew-deadline", t.renewDeadline}, {"--renew-interval", t.renewInterval}, {"--retry-period", t.retryPeriod}, {"--term-grace", t.termGrace}, {"--kill-margin", t.killMargin}} {
		if f.d < 0 || (f.d == 0 && t.set(f.name[2:])) {
			return tm, 0, 0, usagef("%s %v must be positive", f.name, f.d)
		}
		// Checked before any arithmetic, so that an overflow can never be
		// reported against a flag the user did not set.
		if f.d > maxFlagDuration {
			return tm, 0, 0, usagef("%s %v is longer than the longest this command accepts, %v", f.name, f.d, maxFlagDuration)
		}
	}
	if t.leaseDuration < minLeaseDuration {
		return tm, 0, 0, usagef("--lease-duration %v is below the shortest lease this command accepts, %v: the renewals, the store's TTL granularity and the command's stop budget must all fit in it", t.leaseDuration, minLeaseDuration)
	}
	switch {
	case math.IsNaN(t.jitter) || math.IsInf(t.jitter, 0):
		return tm, 0, 0, usagef("--jitter %v is not a number in [0, 1]", t.jitter)
	case t.jitter < 0 || t.jitter > 1:
		return tm, 0, 0, usagef("--jitter %v must be in [0, 1]", t.jitter)
	}
	jitter := t.jitter
	if jitter == 0 {
		// The core reads a zero Jitter as its default (0.2); on the command
		// line 0 means 0, so say so with the core's explicit NoJitter.
		jitter = leasehold.NoJitter
	}
	tm = leasehold.Timings{
		LeaseDuration: t.leaseDuration,
		RenewDeadline: t.renewDeadline,
		RenewInterval: t.renewInterval,
		RetryPeriod:   t.retryPeriod,
		Jitter:        jitter,
	}.WithDefaults()
	switch {
	case tm.RenewDeadline >= tm.LeaseDuration:
		return tm, 0, 0, usagef("--renew-deadline %v must be less than --lease-duration %v (rule: lease duration > renew deadline > renew interval > 0; the gap is the safety margin)", tm.RenewDeadline, tm.LeaseDuration)
	case tm.RenewInterval >= tm.RenewDeadline:
		return tm, 0, 0, usagef("--renew-interval %v must be less than --renew-deadline %v (rule: lease duration > renew deadline > renew interval > 0)", tm.RenewInterval, tm.RenewDeadline)
	case tm.RetryPeriod >= tm.RenewDeadline:
		return tm, 0, 0, usagef("--retry-period %v must be less than --renew-deadline %v, or a failed renewal is never retried", tm.RetryPeriod, tm.RenewDeadline)
	}
	window := tm.RenewDeadline - tm.RenewInterval
	termGrace, killMargin = t.termGrace, t.killMargin
	// The defaults leave most of the window between the scheduled renewal
	// and safeUntil to retries of a failed renewal.
	if termGrace == 0 {
		termGrace = window / 4
	}
	if killMargin == 0 {
		killMargin = window / 20
	}
	if termGrace+killMargin >= window {
		flagName := "--term-grace"
		if t.set("kill-margin") && !t.set("term-grace") {
			flagName = "--kill-margin"
		}
		return tm, 0, 0, usagef("%s: term grace %v + kill margin %v must be less than renew deadline - renew interval = %v: the command is stopped that long before safeUntil, and a healthy term renews every %v", flagName, termGrace, killMargin, window, tm.RenewInterval)
	}
	tm.WindDown = termGrace + killMargin
	if err := tm.Validate(); err != nil {
		return tm, 0, 0, usagef("%v", err)
	}
	return tm, termGrace, killMargin, nil
}

func (t *timingFlags) set(name string) bool { return flagSet(t.fs, name) }

// checkLimits holds the timings to the opened store's own bounds
// (store.Limiter: its shortest lease, and the resolution at which its
// readers tell renewals apart, which the safety margin must exceed), by the
// library's own rule, so the command and the library cannot drift apart.
func checkLimits(tm leasehold.Timings, st store.Store, storeName string) error {
	if err := tm.ValidateFor(st); err != nil {
		return usagef("--lease-duration %v with --renew-deadline %v do not fit store %s: %v", tm.LeaseDuration, tm.RenewDeadline, storeName, err)
	}
	return nil
}
