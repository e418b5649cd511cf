package cli

import (
	"context"
	"fmt"

	"github.com/leasehold/leasehold"
)

const slotsUsage = "make the lease a semaphore of `N` slots: up to N nodes run the command at once, each in a slot with its own token (0: one holder)"

// checkSlots checks --slots against the other flags.
func (r *runCmd) checkSlots() error {
	switch {
	case r.slots < 0 || r.slots > leasehold.MaxSlots:
		return usagef("--slots %d: want 1 to %d (or 0 for a single holder)", r.slots, leasehold.MaxSlots)
	case r.slots > 0 && r.sched.every > 0:
		return usagef("--slots does not go with --every: a scheduled job runs once per period")
	case r.slots > 0:
		if err := validateLeaseName(leasehold.SlotName(r.lease, r.slots-1)); err != nil {
			return usagef("--lease with --slots %d: the slot lease names are too long: %v", r.slots, err)
		}
	}
	return nil
}

// runSlots is run's loop with --slots: wait for a slot of the semaphore, run
// the command under that slot's term (r.work, as under an elector's term),
// release the slot once the command has returned (drain before release), and
// contend again after losing it, unless --stop-on-loss. It ends as the
// elector's Run does: with the work's result when the command exited while
// the term was live, with ctx's error when run is stopping.
func (r *runCmd) runSlots(ctx context.Context) error {
	r.log.Info("contending for a slot", "slots", r.slots)
	for {
		l, err := r.sem.Acquire(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		r.log.Info("holding a slot", "slot", l.Name(), "holder", l.Term().Holder, "token", l.Token())
		// The slot's context ends at safeUntil or on loss; run's context
		// (a signal) ends the work too.
		wctx, cancel := context.WithCancelCause(l.Context())
		stop := context.AfterFunc(ctx, func() { cancel(context.Cause(ctx)) })
		werr := r.work(wctx, l)
		stop()
		returned := wctx.Err() == nil
		cancel(nil)
		cause := context.Cause(l.Context())
		l.Release(context.WithoutCancel(ctx))
		switch {
		case returned:
			return werr
		case ctx.Err() != nil:
			return ctx.Err()
		case r.stopOnLoss:
			return fmt.Errorf("slot %s: %w", l.Name(), cause)
		}
	}
}
