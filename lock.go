package leasehold

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold/store"
)

// Lock is a lease used as a distributed lock around a short critical section.
// A Lock is safe for concurrent use; each acquisition is its own term.
type Lock struct {
	name    string
	cfg     Config
	hold    holdConfig
	base    string // holder identity prefix: Identity plus the process suffix
	seq     atomic.Uint64
	watcher store.Watcher
	queue   store.Queuer // Config.Fair: the store's queue; nil otherwise
	// unqueued: with queue, the store's store.UnqueuedAcquirer, if it has
	// one: Acquire's first attempt while the lease is not contended.
	unqueued store.UnqueuedAcquirer
	// watchLag: the store's store.WatchLagger answer (0 without one), the
	// least a Lock yields after a contended release.
	watchLag time.Duration

	// yieldUntil: Acquire makes no attempt before this time. Set when a term
	// is released while the lease is contended, so that the waiters woken by
	// that release get there first (see released).
	yieldMu    sync.Mutex
	yieldUntil time.Time
	// yieldForLag: the store's watch lag set the yield's length, so
	// waitYield reads the lease first (see there).
	yieldForLag bool
	// contendedAt: when a released term of this Lock was last won against
	// another holder (zero: never). With Config.Fair: when an Acquire of
	// this Lock last found the lease held or others queued.
	contendedAt time.Time
}

// NewLock validates cfg and returns a Lock on the lease name in st.
func NewLock(st store.Store, name string, cfg Config) (*Lock, error) {
	if st == nil {
		return nil, fmt.Errorf("%w: store is nil", ErrInvalidConfig)
	}
	if err := store.ValidateName(name); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	base, err := cfg.prepare(st)
	if err != nil {
		return nil, err
	}
	l := &Lock{name: name, cfg: cfg, base: base}
	l.hold = holdConfig{store: st, clock: cfg.Clock, timings: cfg.Timings, keepAlive: cfg.KeepAlive,
		maxHold: cfg.MaxHold, events: newEventQueue(cfg.OnEvent)}
	l.watcher, _ = st.(store.Watcher)
	if wl, ok := st.(store.WatchLagger); ok {
		l.watchLag = max(wl.WatchLag(), 0)
	}
	if cfg.Fair {
		l.queue, _ = store.AsQueuer(st)
		l.unqueued, _ = st.(store.UnqueuedAcquirer)
	}
	return l, nil
}

func (l *Lock) contender() *contender {
	holder := l.base + "." + strconv.FormatUint(l.seq.Add(1), 10)
	return &contender{holdConfig: &l.hold, watcher: l.watcher, name: l.name, holder: holder, metadata: l.cfg.Metadata, flushes: true}
}

// TryAcquire makes one attempt, without queueing even when Config.Fair is
// set: it takes a free lease ahead of queued waiters. If another holder's term is live it returns a
// *HeldError (matching ErrHeld). If the outcome is unknown it gives back
// whatever the attempt may have been granted before returning the error.
func (l *Lock) TryAcquire(ctx context.Context) (*Lease, error) {
	defer l.hold.events.flush()
	c := l.contender()
	rec, sent, err := c.try(ctx)
	if err != nil {
		c.giveBackUnknown(ctx)
		if errors.Is(err, store.ErrHeld) {
			return nil, &HeldError{Record: rec}
		}
		return nil, fmt.Errorf("leasehold: acquire %q: %w", l.name, err)
	}
	return l.lease(ctx, c, rec, sent), nil
}

// Acquire waits until it holds the lock or ctx ends. It wakes when the store
// announces a change (if it can) or when the holder's term expires, and polls
// every RetryPeriod otherwise. ctx bounds only the wait: the returned Lease
// has its own context. After a term of this Lock is released while the lease
// is contended (a term of this Lock was won against another holder within
// the last LeaseDuration), Acquire first waits max(2 × the release's
// latency, 1 ms, the store's watch lag), at most RetryPeriod, so the waiters
// woken by that release get there first (see released); a yield as long as
// the watch lag ends early when a read shows the lease held already (by one
// of them, most often). This applies to every goroutine sharing the Lock.
// With Config.Fair, Acquire waits its turn in the store's queue instead,
// and never yields. On a store with
// store.UnqueuedAcquirer, a fair Acquire first asks for the lease on the
// condition that nobody is queued, unless an Acquire of this Lock found it
// held or others queued within the last LeaseDuration: a lease nobody else
// wants is then taken in one request, with no place written.
func (l *Lock) Acquire(ctx context.Context) (*Lease, error) {
	defer l.hold.events.flush()
	if err := l.waitYield(ctx); err != nil {
		return nil, fmt.Errorf("leasehold: acquire %q: %w", l.name, err)
	}
	c := l.contender()
	c.queue = l.queue
	if l.queue != nil && !l.fairContended() {
		c.unqueued = l.unqueued
	}
	rec, sent, err := c.acquire(ctx)
	if l.queue != nil && (c.sawHeld || c.queuedBehind) {
		l.yieldMu.Lock()
		l.contendedAt = l.hold.clock.Now()
		l.yieldMu.Unlock()
	}
	if err != nil {
		return nil, fmt.Errorf("leasehold: acquire %q: %w", l.name, err)
	}
	return l.lease(ctx, c, rec, sent), nil
}

// fairContended reports whether a fair Acquire of this Lock found the
// lease held or others queued within the last LeaseDuration. Its next
// Acquire then queues at once: an attempt that skips the queue
// (store.UnqueuedAcquirer) would most likely be refused, a request for
// nothing on every turn of a busy lock.
func (l *Lock) fairContended() bool {
	l.yieldMu.Lock()
	defer l.yieldMu.Unlock()
	return !l.contendedAt.IsZero() && l.hold.clock.Now().Sub(l.contendedAt) < l.hold.timings.LeaseDuration
}

func (l *Lock) lease(ctx context.Context, c *contender, rec store.Record, sent time.Time) *Lease {
	h := startHolding(context.WithoutCancel(ctx), &l.hold, rec, sent, true)
	return &Lease{term: rec.Term, ctx: h.ctx, keep: lockKeeping{h: h, c: c, l: l}}
}

// released is called after each release of a term of the Lock (not with
// Config.Fair, whose queue orders the waiters). wonAgainst: an attempt of
// that term's acquire found another holder's live term.
//
// While the lease is contended, the other contenders wait on the store's
// watch, and the release's notification reaches them about when its answer
// reaches us: a releaser that tried again at once would often win its own
// race and take turn after turn while a waiter goes hungry (measured on
// Redis with 8 contenders: the releaser took 29 % of the turns, a fair
// lottery 12.5 %). So the Lock's next Acquire first waits twice as long as
// the release took (the notification's way out and a woken waiter's
// attempt), and at least minYield, at most RetryPeriod. On a store whose
// watch polls (store.WatchLagger), waiters in other processes learn of the
// release only at their next poll, so the Lock yields at least the store's
// watch lag (MySQL: 1½ poll intervals, 37.5 ms by default).
//
// The lease counts as contended for LeaseDuration after the release of a
// term that was won against another holder, not only after that release: a
// releaser that wins again at once never meets the waiters, so its next
// term would look uncontended, it would not yield, and it would win again
// (measured on ZooKeeper with 8 contenders, where the store tries a lease
// it saw go free without looking first: the releaser took about half the
// turns and 4 of 8 contenders were starved). A Lock that never met another
// holder never waits; TryAcquire never waits.
func (l *Lock) released(wonAgainst bool, releaseLatency time.Duration) {
	l.yieldMu.Lock()
	defer l.yieldMu.Unlock()
	now := l.hold.clock.Now()
	if wonAgainst {
		l.contendedAt = now
	}
	if l.contendedAt.IsZero() || now.Sub(l.contendedAt) >= l.hold.timings.LeaseDuration {
		return
	}
	d := max(2*releaseLatency, minYield, l.watchLag)
	l.yieldForLag = l.watchLag > max(2*releaseLatency, minYield)
	d = min(d, l.hold.timings.RetryPeriod)
	l.yieldUntil = now.Add(d)
}

// minYield is the least a Lock yields after a contended release: a woken
// waiter's way from the store's notification through the client's fan-out to
// its attempt. Measured with 8 contenders on Redis on a loaded 2-core machine
// (bench -scenarios contention): yielding 2 × the release's latency alone
// left the releaser 33 % of the turns and one waiter 493 turns of others
// (starved); 1 ms gave 10 % and at most 79 turns; 5 ms 16 % and 78.
const minYield = time.Millisecond

// waitYield waits until yieldUntil, or returns ctx's error. When the
// store's watch lag set the yield (a poller: MySQL's 37.5 ms by default),
// it first reads the lease: if a holder has it already (most often a
// waiter that the release woke), the waiters have learned of the release,
// and an attempt now is refused as theirs would be and waits on the watch
// for the next release like any waiter; the yield would only delay this
// Lock's turn after that release (measured on MySQL: a Lock that called
// Acquire right after releasing took over a release 2–50 ms later only
// once its yield ended, in half the samples). A read that fails, or
// answers later than the yield ends, changes nothing. A yield of about a
// release's round trip (a watch that pushes) is kept whole: ending it
// early only lets the releaser join the next race sooner, which on Redis
// with 8 contenders in a loop doubled the longest wait for a turn, once
// past a fair lottery's bound.
func (l *Lock) waitYield(ctx context.Context) error {
	l.yieldMu.Lock()
	d := l.yieldUntil.Sub(l.hold.clock.Now())
	forLag := l.yieldForLag
	l.yieldMu.Unlock()
	if d <= 0 {
		return nil
	}
	if forLag && l.heldByAnyone(ctx, d) {
		return nil
	}
	if d = l.yieldLeft(); d <= 0 {
		return nil
	}
	t := l.hold.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// yieldLeft is how long the yield still lasts.
func (l *Lock) yieldLeft() time.Duration {
	l.yieldMu.Lock()
	defer l.yieldMu.Unlock()
	return l.yieldUntil.Sub(l.hold.clock.Now())
}

// heldByAnyone reads the lease and reports whether a live term holds it,
// waiting at most d for the answer.
func (l *Lock) heldByAnyone(ctx context.Context, d time.Duration) bool {
	gctx, cancel := context.WithCancel(ctx)
	defer cancel()
	answer := make(chan bool, 1) // the read's goroutine never blocks on it
	go func() {
		rec, err := l.hold.store.Get(gctx, l.name)
		answer <- err == nil && rec.Live()
	}()
	t := l.hold.clock.NewTimer(d)
	defer t.Stop()
	select {
	case held := <-answer:
		return held
	case <-t.C():
		return false
	case <-ctx.Done():
		return false
	}
}

// lockKeeping keeps one term of a Lock.
type lockKeeping struct {
	h *holding
	c *contender
	l *Lock // nil: no yield after release (the Scheduler's claims, a Semaphore's slots)
}

func (k lockKeeping) safeUntil() time.Time { return k.h.SafeUntil() }

// release stops the holding, then ends the term in the store unless the
// store already said it was lost.
func (k lockKeeping) release(ctx context.Context) error {
	defer k.c.events.flush()
	k.c.waitLeft() // the place leaves the queue before the term ends
	if cause := k.h.stop(); errors.Is(cause, ErrLeaseLost) {
		return store.ErrNotHeld
	}
	sent := k.c.clock.Now()
	err := k.c.releaseEmit(ctx, k.h.term, k.c.emitLater) // flushed by the defer above
	if err == nil && k.l != nil && k.c.queue == nil {
		k.l.released(k.c.sawHeld, k.c.clock.Now().Sub(sent))
	}
	return err
}
