package leasehold

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/leasehold/leasehold/store"
)

// ErrInvalidConfig is wrapped by every configuration error; the message names
// the rule that failed.
var ErrInvalidConfig = errors.New("leasehold: invalid config")

// The default timings; DefaultTimings is their one exported spelling.
const (
	defaultLeaseDuration = 15 * time.Second
	defaultRenewDeadline = 10 * time.Second
	defaultRenewInterval = 5 * time.Second
	defaultRetryPeriod   = 2 * time.Second
	defaultJitter        = 0.2
)

// NoJitter, as Timings.Jitter, turns jitter off: a zero Jitter means the
// default, DefaultTimings().Jitter.
const NoJitter = -1.0

// MaxLeaseDuration is the longest lease accepted. A longer one is almost
// always a unit mistake, and a crashed holder would block the lease for as
// long.
const MaxLeaseDuration = 24 * time.Hour

// Timings are the durations of a lease and of its renewal. Zero fields take a
// default: with every field zero, those of DefaultTimings(); with only
// LeaseDuration set, the others scale with it in the same proportions
// (2/3, 1/3, 2/15 of the lease).
type Timings struct {
	// LeaseDuration is the TTL the store grants: the time after the store last
	// renewed a term when a rival may legally take it over.
	LeaseDuration time.Duration
	// RenewDeadline is how long after sending its last successful acquire or
	// renew request the holder still trusts its term (safeUntil). It must be
	// below LeaseDuration: the gap is the safety margin.
	RenewDeadline time.Duration
	// RenewInterval is how long after a successful renewal was sent the next
	// one is sent.
	RenewInterval time.Duration
	// RetryPeriod is how often a candidate tries to acquire, and how soon a
	// failed renewal is tried again.
	RetryPeriod time.Duration
	// Jitter is the largest fraction of RetryPeriod added at random to each
	// candidate's wait, so that candidates do not retry in lockstep; in [0, 1].
	// Zero means DefaultTimings().Jitter (0.2); NoJitter turns it off.
	Jitter float64
	// WindDown is how long before safeUntil the guarded work's context is
	// cancelled, so that work which stops within WindDown has returned by
	// safeUntil. Zero: the context is cancelled at safeUntil itself. It must be
	// below RenewDeadline - RenewInterval, or a healthy term would be cut short.
	WindDown time.Duration
}

// DefaultTimings returns the default timings: a 15 s lease, renewed every 5 s
// (a third of the lease), trusted for 10 s after each successful renewal was
// sent, and retried every 2 s when a renewal fails, with jitter 0.2. They are
// the arithmetic of the Kubernetes controller manager. With them:
//
//   - a holder that stops hearing from the store stops its work at most 10 s
//     after it sent its last successful renewal, while a rival may take over no
//     earlier than 15 s after that renewal reached the store: 5 s of margin for
//     clock-rate drift and for the holder's own reaction;
//   - a renewal that fails is retried twice (at 2 s intervals) before the
//     holder gives up, since 5 s separate the scheduled renewal from the 10 s
//     deadline;
//   - a crashed holder's lease is taken over once it expires, up to 15 s later
//     (plus one retry period where the store cannot tell waiters of expiry).
func DefaultTimings() Timings {
	return Timings{
		LeaseDuration: defaultLeaseDuration,
		RenewDeadline: defaultRenewDeadline,
		RenewInterval: defaultRenewInterval,
		RetryPeriod:   defaultRetryPeriod,
		Jitter:        defaultJitter,
	}
}

// WithDefaults returns t with its zero fields filled in, as described on Timings.
func (t Timings) WithDefaults() Timings {
	if t.LeaseDuration == 0 {
		t.LeaseDuration = defaultLeaseDuration
	}
	ld := t.LeaseDuration
	if t.RenewDeadline == 0 {
		t.RenewDeadline = ld * 2 / 3
	}
	if t.RenewInterval == 0 {
		t.RenewInterval = ld / 3
	}
	if t.RetryPeriod == 0 {
		t.RetryPeriod = ld * 2 / 15
	}
	if t.Jitter == 0 {
		t.Jitter = defaultJitter
	}
	return t
}

// Validate checks the rules of SAFETY.md: leaseDuration > renewDeadline >
// renewInterval > 0, leaseDuration at most MaxLeaseDuration, retryPeriod > 0
// and below renewDeadline, jitter in [0, 1] (or NoJitter),
// 0 <= windDown < renewDeadline - renewInterval. Zero fields are checked after
// their defaults are filled in.
func (t Timings) Validate() error {
	t = t.WithDefaults()
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, args...))
	}
	switch {
	case t.LeaseDuration < 0:
		return bad("leaseDuration %v is negative", t.LeaseDuration)
	case t.LeaseDuration > MaxLeaseDuration:
		return bad("leaseDuration %v is above the maximum %v", t.LeaseDuration, MaxLeaseDuration)
	case t.RenewInterval <= 0:
		return bad("renewInterval %v must be > 0 (rule leaseDuration > renewDeadline > renewInterval > 0)", t.RenewInterval)
	case t.RenewDeadline <= t.RenewInterval:
		return bad("renewDeadline %v must be greater than renewInterval %v (rule leaseDuration > renewDeadline > renewInterval > 0)", t.RenewDeadline, t.RenewInterval)
	case t.LeaseDuration <= t.RenewDeadline:
		return bad("leaseDuration %v must be greater than renewDeadline %v (rule leaseDuration > renewDeadline > renewInterval > 0): the gap is the safety margin", t.LeaseDuration, t.RenewDeadline)
	case t.RetryPeriod <= 0:
		return bad("retryPeriod %v must be > 0", t.RetryPeriod)
	case t.RetryPeriod >= t.RenewDeadline:
		return bad("retryPeriod %v must be less than renewDeadline %v, or a failed renewal is never retried", t.RetryPeriod, t.RenewDeadline)
	case t.Jitter != NoJitter && (math.IsNaN(t.Jitter) || t.Jitter < 0 || t.Jitter > 1):
		return bad("jitter %v must be in [0, 1] (or NoJitter)", t.Jitter)
	case t.WindDown < 0:
		return bad("windDown %v is negative", t.WindDown)
	case t.WindDown >= t.RenewDeadline-t.RenewInterval:
		return bad("windDown %v must be less than renewDeadline - renewInterval = %v, or a healthy term is cut short", t.WindDown, t.RenewDeadline-t.RenewInterval)
	}
	return nil
}

// JitterFraction is the largest fraction of RetryPeriod added to a wait:
// Jitter, with NoJitter read as 0.
func (t Timings) JitterFraction() float64 {
	if t.Jitter == NoJitter {
		return 0
	}
	return t.Jitter
}

// ValidateFor validates t as Validate does, and against the limits st
// declares (store.Limiter): what NewElector, NewLock and NewKeeper check,
// for callers (a command, a test harness) that want the answer before they
// build one.
func (t Timings) ValidateFor(st store.Store) error {
	_, err := validateFor(st, t)
	return err
}

// validateFor validates t, fills in its defaults, and checks it against the
// limits st declares (store.Limiter): the store's shortest lease, and a margin
// leaseDuration - renewDeadline wider than the resolution at which readers
// of the store's records tell renewals apart.
func validateFor(st store.Store, t Timings) (Timings, error) {
	if err := t.Validate(); err != nil {
		return t, err
	}
	t = t.WithDefaults()
	l, ok := st.(store.Limiter)
	if !ok {
		return t, nil
	}
	lim := l.Limits()
	switch {
	case t.LeaseDuration < lim.MinLeaseDuration:
		return t, fmt.Errorf("%w: leaseDuration %v is below this store's minimum %v", ErrInvalidConfig, t.LeaseDuration, lim.MinLeaseDuration)
	case t.LeaseDuration-t.RenewDeadline <= lim.TimeResolution:
		return t, fmt.Errorf("%w: leaseDuration - renewDeadline = %v must exceed this store's time resolution %v: a reader of the record may date a renewal up to that much early, and take over before the holder stops trusting its term", ErrInvalidConfig, t.LeaseDuration-t.RenewDeadline, lim.TimeResolution)
	}
	return t, nil
}
