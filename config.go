package leasehold

import (
	"fmt"
	"time"

	"github.com/leasehold/leasehold/store"
)

// Config configures an Elector, a Lock, a Keeper or a Scheduler. The lease
// name is not part of it: NewElector, NewLock and NewScheduler take it, and a
// Keeper takes one per Acquire.
type Config struct {
	// Identity names this node (a host or pod name). Required. The holder
	// identity is Identity plus a random per-process suffix (see NewIdentity);
	// a Lock adds a sequence number per acquisition, so two acquisitions,
	// even in one process, are never the same holder.
	Identity string
	// Metadata is optional data stored with the lease while it is held, such
	// as this node's address; at most store.MaxMetadataLen bytes.
	Metadata string
	// Timings of the lease; zero fields take defaults (see Timings).
	Timings Timings
	// Clock is the holder's clock; nil means SystemClock().
	Clock Clock
	// OnEvent, if set, is called with each step of each term (see Event):
	// one event at a time, in the order they happened, on a goroutine of the
	// Elector's, Lock's or Keeper's own, never the one that keeps the lease.
	// Events wait in a queue while it runs, so a slow OnEvent delays later
	// events, never the lease. It must not call the Elector, Lock or Keeper
	// that calls it. Run, Acquire, TryAcquire, Release and Close return only
	// once OnEvent has been given the events they caused.
	OnEvent func(Event)
	// KeepAlive makes a Lock renew its lease while it is held, for work that
	// may outlast one lease duration. Without it a Lock's term is trusted
	// until RenewDeadline after the acquire request was sent, and never
	// renewed. An Elector, a Keeper and a Scheduler's run always renew.
	KeepAlive bool
	// MaxHold, if set, caps how long one term is kept: MaxHold after its
	// acquire request was sent, the term's context is cancelled with cause
	// ErrMaxHold and renewing stops, so a holder whose work is stuck cannot
	// keep the lease for ever. The term then ends by release once the work
	// has returned (never while it runs), or by expiry on the store's clock if
	// the work never returns. An Elector contends again after releasing, as
	// after any loss. Zero: no cap. A Keeper refuses it.
	MaxHold time.Duration
	// StopOnLoss makes an Elector's Run return (with the loss's cause) after
	// this node loses a term, instead of contending again. A Lock and a
	// Keeper never contend again by themselves.
	StopOnLoss bool
	// Fair makes a Lock's Acquire and an Elector wait in a first-come,
	// first-served queue kept in the store (store.Queuer): each waiter
	// writes its place ahead, only the waiter first in the queue tries to
	// acquire, and a release wakes it by the store's watch alone, so no
	// waiter starves however many contend. An acquisition that waits costs
	// one write to join the queue and one to leave it (and a refresh of the
	// place every RetryPeriod while waiting); the place leaves while the term
	// starts, not before Acquire returns, and before the term is released.
	// On a store with store.UnqueuedAcquirer (memstore, SQLite, PostgreSQL
	// with its lease functions, Redis, etcd), a lease that is free with nobody
	// queued is taken in one request with no place written, as without
	// Fair; a Lock that found its lease contended within the last
	// LeaseDuration queues at once instead.
	// The queue only orders who tries:
	// tokens, expiry and every other rule are those of the default mode. A
	// waiter that dies leaves its place to expire LeaseDuration after its
	// last refresh, delaying those behind it by at most that long. A waiter
	// whose turn came but whose acquire got no answer (or a grant too late
	// to trust) goes to the back, so one that reaches the queue but not the
	// lease does not hold up those behind it. Holders
	// that do not queue (the default mode, TryAcquire, other clients of the
	// store) still compete with the head of the queue when the lease is
	// free. A store without a queue is refused with ErrInvalidConfig. A
	// Semaphore, a Keeper and a Scheduler refuse Fair.
	Fair bool
}

// prepare validates cfg for st and fills in its defaults. It returns the
// holder identity of this process (Identity plus the random suffix).
func (cfg *Config) prepare(st store.Store) (holder string, err error) {
	if st == nil {
		return "", fmt.Errorf("%w: store is nil", ErrInvalidConfig)
	}
	if cfg.MaxHold < 0 {
		return "", fmt.Errorf("%w: maxHold %v is negative", ErrInvalidConfig, cfg.MaxHold)
	}
	if err := store.ValidateMetadata(cfg.Metadata); err != nil {
		return "", fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	if cfg.Fair {
		if _, ok := store.AsQueuer(st); !ok {
			return "", fmt.Errorf("%w: fair: store %T has no first-come, first-served queue (store.Queuer)", ErrInvalidConfig, st)
		}
	}
	timings, err := validateFor(st, cfg.Timings)
	if err != nil {
		return "", err
	}
	holder, err = NewIdentity(cfg.Identity)
	if err != nil {
		return "", err
	}
	cfg.Timings = timings
	if cfg.Clock == nil {
		cfg.Clock = SystemClock()
	}
	return holder, nil
}
