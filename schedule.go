package leasehold

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold/store"
)

// Missed says what a Scheduler does with a period that no node ran at its
// start (every node was down, or this node started late in the period).
type Missed int

const (
	// MissedSkip (the default): a period runs only if a node claims it
	// within Schedule.Grace of its start; a later one waits for the next
	// period.
	MissedSkip Missed = iota
	// MissedRunOnce: a node that finds the current period unclaimed runs it
	// at once, however late in the period. Earlier periods are never run
	// after the fact: one run stands for all the missed ones.
	MissedRunOnce
)

// Schedule says how often a Scheduler runs its job.
type Schedule struct {
	// Every is the period: a whole number of seconds, at least one. Periods
	// start at multiples of Every since the Unix epoch (so a 24h period
	// starts at midnight UTC).
	Every time.Duration
	// Missed is the policy for a period not run at its start.
	Missed Missed
	// Grace is how late into a period a run may still start with
	// MissedSkip. Zero: Every / 10.
	Grace time.Duration
	// MinHold keeps the run's lease at least this long after it was
	// granted, even if the job returned sooner (it is released only after the
	// job returned, and never before MinHold). It only shows the period's
	// runner for longer (in `leasehold status`); what stops a second run of a
	// period is the period's claim (see Scheduler). At most Config.MaxHold.
	MinHold time.Duration
	// OnSkip, if set, is told of each period this node tried and did not
	// run, and why: ErrPeriodClaimed, ErrPeriodUncertain, ErrPeriodOver, or
	// a store error. It is called on Run's goroutine.
	OnSkip func(period time.Time, err error)
	// Now is the wall clock that names periods; nil means time.Now. It
	// decides only which period a node believes it is in and when it wakes;
	// never whether a period may run twice. Tests set it to model skew.
	Now func() time.Time
}

// JobFunc is a scheduled job: one run for the period starting at period
// (UTC). ctx is lease.Context(), cancelled as a WorkFunc's is, and at
// Config.MaxHold (default: Every) after the run's lease was granted. Every
// write to a fenced resource carries lease.Token(), which rises from run to
// run.
type JobFunc func(ctx context.Context, period time.Time, lease *Lease) error

// ErrPeriodClaimed: the period was claimed by another node (or by an earlier
// attempt of this one whose outcome was unknown), so this node does not run
// it. ErrPeriodUncertain: the claim's outcome was unknown, or it was granted
// too late to be sure it was the first; the period is not run, so that it
// can never run twice. ErrPeriodOver: the period was claimed, but the run's
// lease was not free (a previous run still held it) before the period ended.
var (
	ErrPeriodClaimed   = errors.New("leasehold: period already claimed")
	ErrPeriodUncertain = errors.New("leasehold: period claim uncertain; not run")
	ErrPeriodOver      = errors.New("leasehold: period ended before the run's lease was free")
)

// Scheduler runs a job at most once per period across every node that runs
// a Scheduler on the same name and store, on whichever node claims the
// period first.
//
// A period is claimed through a lease of its own, NAME/period-<unix start>,
// which is never released: a node runs the period only if its grant of that
// name is the first grant ever (a Get found no record, and the grant
// answered within RenewDeadline of that Get being sent). Any grant of the
// name made after the Get was answered would still be live when this grant
// reached the store, and the store would have refused it: so whatever the
// nodes' wall clocks say, and however late a node believes a period starts,
// a period name is run at most once. Skew only moves when a node thinks a
// period starts. The store keeps one small record per period.
//
// The run itself holds the lease NAME (so runs never overlap, and their
// fencing tokens rise from period to period), with metadata
// "period=<start, RFC 3339>", which stores that keep history (store.Historian)
// keep for each run.
type Scheduler struct {
	name  string
	cfg   Config
	sched Schedule
	lock  *Lock
	seq   atomic.Uint64
}

// periodSuffixLen bounds the length of "/period-" plus a Unix time.
const periodSuffixLen = len("/period-") + 20

// NewScheduler validates cfg and sched and returns a Scheduler of the job
// named name on st. A zero cfg.MaxHold means sched.Every.
func NewScheduler(st store.Store, name string, cfg Config, sched Schedule) (*Scheduler, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, args...))
	}
	switch {
	case sched.Every < time.Second || sched.Every%time.Second != 0:
		return nil, bad("schedule every %v: want a whole number of seconds, at least 1s", sched.Every)
	case sched.Missed != MissedSkip && sched.Missed != MissedRunOnce:
		return nil, bad("schedule missed policy %d: want MissedSkip or MissedRunOnce", sched.Missed)
	case sched.Grace < 0 || sched.Grace > sched.Every:
		return nil, bad("schedule grace %v: want 0 to every (%v)", sched.Grace, sched.Every)
	case sched.MinHold < 0:
		return nil, bad("schedule minHold %v is negative", sched.MinHold)
	case cfg.Fair:
		return nil, bad("fair is for a Lock or an Elector; a Scheduler claims each period once")
	case len(name) > store.MaxNameLen-periodSuffixLen:
		return nil, bad("schedule name %q is %d bytes; with its period suffix the limit is %d", name, len(name), store.MaxNameLen-periodSuffixLen)
	}
	if sched.Grace == 0 {
		sched.Grace = sched.Every / 10
	}
	if sched.Now == nil {
		sched.Now = time.Now
	}
	if cfg.MaxHold == 0 {
		cfg.MaxHold = sched.Every
	}
	if sched.MinHold > cfg.MaxHold {
		return nil, bad("schedule minHold %v is above maxHold %v", sched.MinHold, cfg.MaxHold)
	}
	if err := store.ValidateMetadata(periodMetadata(time.Unix(0, 0), cfg.Metadata)); err != nil {
		return nil, fmt.Errorf("%w: with the period: %v", ErrInvalidConfig, err)
	}
	cfg.KeepAlive = true
	lock, err := NewLock(st, name, cfg)
	if err != nil {
		return nil, err
	}
	return &Scheduler{name: name, cfg: lock.cfg, sched: sched, lock: lock}, nil
}

// PeriodName is the name of the lease that claims the period starting at
// start for the scheduled job name.
func PeriodName(name string, start time.Time) string {
	return name + "/period-" + strconv.FormatInt(start.Unix(), 10)
}

// periodMetadata is the run lease's metadata: the period, and the
// configured metadata if any.
func periodMetadata(start time.Time, extra string) string {
	m := "period=" + start.UTC().Format(time.RFC3339)
	if extra != "" {
		m += " " + extra
	}
	return m
}

// periodOf is the start of the period that contains t.
func (s *Scheduler) periodOf(t time.Time) time.Time { return PeriodStart(t, s.sched.Every) }

// PeriodStart is the start (UTC) of the period of a schedule of every
// (whole seconds, as Schedule.Every) that contains t: periods start at
// multiples of every since the Unix epoch.
func PeriodStart(t time.Time, every time.Duration) time.Time {
	e := int64(every / time.Second)
	if e < 1 {
		e = 1
	}
	u := t.Unix()
	p := u - ((u%e)+e)%e
	return time.Unix(p, 0).UTC()
}

// Run runs the schedule until ctx ends: at each period's start (on the
// Schedule's wall clock) it tries to claim the period and, if it does, runs
// job under the lease NAME; Schedule.OnSkip hears of the periods it tried
// and did not run.
//
// Run returns ctx.Err() when ctx ends, job's error (after releasing) if it
// returns one (a job that should keep the schedule going returns nil), and a
// store error that retrying cannot mend (store.ErrInvalid, store.ErrClosed).
func (s *Scheduler) Run(ctx context.Context, job JobFunc) error {
	onSkip := s.sched.OnSkip
	defer s.lock.hold.events.flush()
	clock := s.cfg.Clock
	var last time.Time // the last period this node tried: never tried twice
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		now := s.sched.Now()
		p := s.periodOf(now)
		late := now.Sub(p)
		if p.After(last) && (s.sched.Missed == MissedRunOnce || late < s.sched.Grace) {
			last = p
			err := s.runPeriod(ctx, p, job)
			switch {
			case err == nil:
			case errors.Is(err, ErrPeriodClaimed), errors.Is(err, ErrPeriodUncertain), errors.Is(err, ErrPeriodOver):
				if onSkip != nil {
					onSkip(p, err)
				}
			case ctx.Err() != nil:
				return ctx.Err()
			default:
				var je jobError
				if errors.As(err, &je) {
					return je.err
				}
				if errors.Is(err, store.ErrInvalid) || errors.Is(err, store.ErrClosed) {
					return err
				}
				if onSkip != nil {
					onSkip(p, err)
				}
			}
			continue
		}
		wait := p.Add(s.sched.Every).Sub(now)
		timer := clock.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return ctx.Err()
		case <-timer.C():
		}
	}
}

// jobError carries the job's own error out of runPeriod.
type jobError struct{ err error }

func (e jobError) Error() string { return e.err.Error() }

// claim claims the period p: it succeeds only with the first grant ever of
// p's lease name (see Scheduler). It retries a store error that leaves the
// outcome unknown only while nothing may have been granted.
func (s *Scheduler) claim(ctx context.Context, p time.Time) error {
	t := s.cfg.Timings
	clock := s.cfg.Clock
	st := s.lock.hold.store
	name := PeriodName(s.name, p)
	holder := s.lock.base + ".p" + strconv.FormatUint(s.seq.Add(1), 10)
	for {
		sent := clock.Now()
		gctx, cancel := context.WithTimeout(ctx, t.RenewDeadline)
		rec, err := st.Get(gctx, name)
		switch {
		case err == nil:
			cancel()
			if rec.Holder == "" {
				return fmt.Errorf("%w: %s (token %d; that term has ended)", ErrPeriodClaimed, name, rec.Token)
			}
			return fmt.Errorf("%w: %s by %s (token %d)", ErrPeriodClaimed, name, rec.Holder, rec.Token)
		case errors.Is(err, store.ErrNotFound):
		case errors.Is(err, store.ErrInvalid), errors.Is(err, store.ErrClosed):
			cancel()
			return err
		default:
			cancel()
			// Nothing was written: try again while the period may still run.
			if werr := s.retryWait(ctx, p); werr != nil {
				return fmt.Errorf("leasehold: claim %s: %w (last error: %v)", name, werr, err)
			}
			continue
		}
		rec, err = st.Acquire(gctx, name, holder, t.LeaseDuration, periodMetadata(p, ""))
		cancel()
		switch {
		case err == nil:
			// Trusted only if granted within RenewDeadline of sending the Get:
			// then any other grant since the Get was answered is still live.
			if !granted(t, sent, t.LeaseDuration).trusted(t, clock.Now()) {
				return fmt.Errorf("%w: %s granted (token %d) too late after its check", ErrPeriodUncertain, name, rec.Token)
			}
			return nil
		case errors.Is(err, store.ErrHeld):
			return fmt.Errorf("%w: %s by %s (token %d)", ErrPeriodClaimed, name, rec.Holder, rec.Token)
		case errors.Is(err, store.ErrInvalid), errors.Is(err, store.ErrClosed):
			return err
		default:
			// The claim may have been granted: never try this period again.
			return fmt.Errorf("%w: %s: %v", ErrPeriodUncertain, name, err)
		}
	}
}

// retryWait waits a retry period, or returns an error if ctx ends or the
// period p can no longer start by then.
func (s *Scheduler) retryWait(ctx context.Context, p time.Time) error {
	c := contender{holdConfig: &s.lock.hold}
	timer := s.cfg.Clock.NewTimer(c.retryWait())
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C():
	}
	if !s.mayStart(p, s.sched.Now()) {
		return ErrPeriodOver
	}
	return nil
}

// mayStart reports whether a run of period p may start at now.
func (s *Scheduler) mayStart(p, now time.Time) bool {
	if s.periodOf(now) != p {
		return false
	}
	return s.sched.Missed == MissedRunOnce || now.Sub(p) < s.sched.Grace
}

// runPeriod claims p, then runs job under the lease NAME, waiting for it at
// most until p ends.
func (s *Scheduler) runPeriod(ctx context.Context, p time.Time, job JobFunc) error {
	if err := s.claim(ctx, p); err != nil {
		return err
	}
	l := s.lock
	c := l.contender()
	c.metadata = periodMetadata(p, s.cfg.Metadata)
	wait := p.Add(s.sched.Every).Sub(s.sched.Now())
	actx, cancel := context.WithCancel(ctx)
	timer := s.cfg.Clock.NewTimer(wait)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		select {
		case <-timer.C():
			cancel()
		case <-actx.Done():
		}
	}()
	rec, sent, err := c.acquire(actx)
	cancel()
	<-stopped
	timer.Stop()
	l.hold.events.flush()
	if err != nil {
		if ctx.Err() == nil && !errors.Is(err, store.ErrInvalid) && !errors.Is(err, store.ErrClosed) {
			return fmt.Errorf("%w: %s: %v", ErrPeriodOver, s.name, err)
		}
		return err
	}
	// Unlike a Lock's lease, the run's ends with Run's context.
	h := startHolding(ctx, &l.hold, rec, sent, false)
	lease := &Lease{term: rec.Term, ctx: h.ctx, keep: lockKeeping{h: h, c: c}}
	jerr := job(lease.Context(), p, lease)
	// MinHold: keep the lease (renewed) until MinHold after its grant.
	if left := sent.Add(s.sched.MinHold).Sub(s.cfg.Clock.Now()); left > 0 {
		hold := s.cfg.Clock.NewTimer(left)
		select {
		case <-hold.C():
		case <-lease.Context().Done():
		case <-ctx.Done():
		}
		hold.Stop()
	}
	lease.Release(ctx)
	if jerr != nil {
		return jobError{jerr}
	}
	return nil
}
