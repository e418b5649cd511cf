package cli

import (
	"context"
	"errors"
	"flag"
	"strconv"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store"
)

// The environment a scheduled command (run --every) gets besides the term's.
const (
	// EnvPeriodStart is the start of the period the command runs for, in
	// RFC 3339 (UTC).
	EnvPeriodStart = "LEASEHOLD_PERIOD_START"
	// EnvPeriodSeconds is the period's length in seconds.
	EnvPeriodSeconds = "LEASEHOLD_PERIOD_SECONDS"
)

const scheduleAbout = `
With --every D, run is a scheduled job instead of a leader: CMD runs at most once per
period of D across every node running the same --lease on the same store, on whichever
node claims the period first, with LEASEHOLD_PERIOD_START (the period's start, RFC 3339,
UTC) and LEASEHOLD_PERIOD_SECONDS besides the variables above. Periods start at multiples
of D since the Unix epoch. A period is claimed by the first grant ever of the lease
NAME/period-<unix start>, never released, so a node whose clock is skewed cannot run a
period again; the run holds NAME itself, so runs never overlap and their tokens rise.
--missed skip (the default) runs a period only if it starts within --grace of the
period's start; --missed run-once runs the current period at once if nobody has,
however late. The command is stopped at --max-hold (default D) after its run began.
A failing command is logged; the schedule goes on.

Example:
  leasehold run --store postgres://app@db/app --lease nightly-report --every 24h -- ./report.sh
`

// scheduleFlags are run's flags for a scheduled job.
type scheduleFlags struct {
	_ [0]func() // not comparable: spares the binary an equality function

	every   time.Duration
	missed  string
	grace   time.Duration
	minHold time.Duration
}

func (f *scheduleFlags) register(fs *flag.FlagSet) {
	fs.DurationVar(&f.every, "every", 0, "run CMD at most once per period `D` across all nodes (a scheduled job; see below)")
	fs.StringVar(&f.missed, "missed", "skip", "with --every, a period not run at its start: skip (run only within --grace of its start) or run-once (run it late)")
	fs.DurationVar(&f.grace, "grace", 0, "with --every and --missed skip, how late into a period a run may start (0: a tenth of the period)")
	fs.DurationVar(&f.minHold, "min-hold", 0, "with --every, keep the run's lease at least `D` after it began, even if CMD exits sooner")
}

// check refuses flag combinations a scheduled job does not take.
func (f *scheduleFlags) check(r *runCmd) error {
	if f.every == 0 {
		for name, set := range map[string]bool{"--missed": f.missed != "skip", "--grace": f.grace != 0, "--min-hold": f.minHold != 0} {
			if set {
				return usagef("%s needs --every", name)
			}
		}
		return nil
	}
	switch {
	case f.every < 0:
		return usagef("--every %v is negative", f.every)
	case f.missed != "skip" && f.missed != "run-once":
		return usagef("--missed %q: want skip or run-once", f.missed)
	case r.restart:
		return usagef("--restart does not go with --every: each period runs CMD once")
	case r.stopOnLoss:
		return usagef("--stop-on-loss does not go with --every: a scheduled job keeps its schedule")
	}
	return nil
}

// configError maps a leasehold configuration error to a usage error.
func configError(err error) error {
	var ue *UsageError
	if errors.As(err, &ue) {
		return err
	}
	if errors.Is(err, leasehold.ErrInvalidConfig) {
		return usagef("%v", err)
	}
	return err
}

// newScheduler is the scheduler of run --every.
func (r *runCmd) newScheduler(st store.Store, cfg leasehold.Config) (*leasehold.Scheduler, error) {
	f := r.sched
	missed := leasehold.MissedSkip
	if f.missed == "run-once" {
		missed = leasehold.MissedRunOnce
	}
	s, err := leasehold.NewScheduler(st, r.lease, cfg, leasehold.Schedule{
		Every: f.every, Missed: missed, Grace: f.grace, MinHold: f.minHold,
		OnSkip: func(p time.Time, err error) {
			r.log.Info("period not run here", "period", p.Format(time.RFC3339), "reason", err.Error())
		},
	})
	if err != nil {
		return nil, configError(err)
	}
	return s, nil
}

// runScheduled runs the command as a scheduled job (run --every).
func (r *runCmd) runScheduled(ctx context.Context, st *openedStore, s *leasehold.Scheduler) error {
	f := r.sched
	r.log.Info("scheduled", "store", st.Name, "every", f.every.String(), "missed", f.missed)
	job := func(ctx context.Context, p time.Time, l *leasehold.Lease) error {
		if time.Until(l.SafeUntil()) <= r.tm.WindDown {
			return nil // too late in the term to start it
		}
		r.log.Info("running period", "period", p.Format(time.RFC3339), "token", l.Token())
		r.sup.extraEnv = []string{
			EnvPeriodStart + "=" + p.UTC().Format(time.RFC3339),
			EnvPeriodSeconds + "=" + strconv.FormatInt(int64(f.every/time.Second), 10),
		}
		r.terms.runStarted(p, l.Token())
		res, err := r.sup.runOnce(ctx, l)
		if err != nil {
			return err // the command cannot be started: no later period would do better
		}
		r.terms.runEnded(res.code)
		if r.sup.root.Err() != nil {
			r.mu.Lock()
			r.shutdownRan, r.shutdownCode = true, res.code
			r.mu.Unlock()
			return nil
		}
		if res.code != 0 && !res.stopped {
			r.log.Warn("command failed; the schedule goes on", "period", p.Format(time.RFC3339), "code", res.code)
		}
		return nil
	}
	err := s.Run(ctx, job)
	var refused *writeRefusedError
	switch {
	case errors.As(context.Cause(ctx), &refused):
		return &StoreError{URL: st.Name, Err: refused}
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.shutdownRan {
			return &ExitError{Code: r.shutdownCode}
		}
		r.log.Info("stopped", "cause", context.Cause(ctx).Error())
		return nil
	default:
		return err
	}
}
