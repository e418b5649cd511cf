package chaos

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store"
)

// The node's other modes. In each, the node runs the same guarded work as
// an elector's leader (writes to the fenced register, each carrying the
// term's token), under the terms the library's semaphore or scheduler gives
// it, and records the lease each event concerns.

// slotIndex is the slot number of a semaphore slot's lease name (-1 if the
// name is not one of sem's slots).
func slotIndex(sem, name string) int {
	i, err := strconv.Atoi(strings.TrimPrefix(name, sem+".slot-"))
	if err != nil || !strings.HasPrefix(name, sem+".slot-") {
		return -1
	}
	return i
}

// semaphoreNode runs a leasehold.Semaphore of c.slots slots: it acquires a
// slot, works under it (renewing it) for one to three lease durations or
// until the term ends, releases it after the work returned, and acquires
// again.
func semaphoreNode(c *nodeConfig, st store.Store, cfg leasehold.Config, hw *historyWriter) (func(context.Context, leasehold.WorkFunc) error, string, error) {
	slots := c.slots
	if c.broken == brokenExtraSlot {
		slots++ // negative control: a lease the others never contend for
	}
	cfg.KeepAlive = true
	identity, err := processIdentity(&cfg)
	if err != nil {
		return nil, "", err
	}
	sem, err := leasehold.NewSemaphore(st, c.lease, slots, cfg)
	if err != nil {
		return nil, "", err
	}
	run := func(ctx context.Context, work leasehold.WorkFunc) error {
		for ctx.Err() == nil {
			l, err := sem.Acquire(ctx)
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				if errors.Is(err, store.ErrInvalid) || errors.Is(err, store.ErrClosed) {
					return err
				}
				hw.emit(event{Kind: evAcquireErr, Err: errString(err)})
				if sleepCtx(ctx, c.timings.RetryPeriod) != nil {
					return nil
				}
				continue
			}
			// The work ends after hold, when the slot's term does, or when
			// the node is asked to stop (the slot's context is its own, not
			// ctx's): a node told to stop has LeaseDuration + 5 s to exit,
			// and hold reaches 3 leases (CI caught a 3 s lease's run killed).
			hold := time.Duration((1 + 2*rand.Float64()) * float64(c.timings.LeaseDuration))
			wctx, cancel := context.WithTimeout(l.Context(), hold)
			stopWork := context.AfterFunc(ctx, cancel)
			work(wctx, l)
			stopWork()
			cancel()
			// Only after the guarded work returned.
			rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), c.timings.RenewDeadline)
			l.Release(rctx)
			rcancel()
		}
		return nil
	}
	return run, identity, nil
}

// scheduleNode runs a leasehold.Scheduler with period c.every on the node's
// own (skewed, drifting) clock, missed periods run once: each run records
// its period and token, then works for half a period under the run's lease.
func scheduleNode(c *nodeConfig, st store.Store, cfg leasehold.Config, hw *historyWriter, clock leasehold.Clock) (func(context.Context, leasehold.WorkFunc) error, string, error) {
	identity, err := processIdentity(&cfg)
	if err != nil {
		return nil, "", err
	}
	sched, err := leasehold.NewScheduler(st, c.lease, cfg, leasehold.Schedule{
		Every: c.every, Missed: leasehold.MissedRunOnce, Now: clock.Now,
		OnSkip: func(p time.Time, err error) {
			hw.emit(event{Kind: evSkip, Period: p.Unix(), Err: errString(err)})
		},
	})
	if err != nil {
		return nil, "", err
	}
	run := func(ctx context.Context, work leasehold.WorkFunc) error {
		err := sched.Run(ctx, func(jctx context.Context, p time.Time, l *leasehold.Lease) error {
			hw.emit(event{Kind: evRun, Period: p.Unix(), Token: l.Token(), Lease: hw.leaseOf(l.Name())})
			wctx, cancel := context.WithTimeout(jctx, c.every/2)
			defer cancel()
			return work(wctx, l)
		})
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	return run, identity, nil
}

// processIdentity makes cfg's identity unique to this process, as an
// Elector's holder identity is: a semaphore's and a scheduler's holders are
// that identity plus suffixes of their own, by which the harness knows
// which process holds a slot or runs a period (twins share a configured
// identity, never this one).
func processIdentity(cfg *leasehold.Config) (string, error) {
	id, err := leasehold.NewIdentity(cfg.Identity)
	if err != nil {
		return "", err
	}
	cfg.Identity = id
	return id, nil
}
