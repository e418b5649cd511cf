package leasehold

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/leasehold/leasehold/store"
)

// contender tries to acquire one lease for one holder, and waits between
// tries: a jittered RetryPeriod, cut short when the current holder's term
// expires (the store says how long it has left) or when the store's watch says
// the lease changed.
type contender struct {
	_ [0]func() // not comparable: spares the binary an equality function

	*holdConfig
	watcher  store.Watcher // nil: poll
	name     string
	holder   string
	metadata string
	// unknown is set while an acquire whose outcome is unknown may have granted
	// this holder a term that it does not know the token of.
	unknown bool
	// lastHolder is the last other holder this contender saw, for EventHolderObserved.
	lastHolder string
	// sawHeld is set once an attempt found another holder's live term: the
	// lease is contended (see Lock.released).
	sawHeld bool
	// queue is the store's first-come, first-served queue (Config.Fair);
	// nil: no queue, every waiter tries.
	queue store.Queuer
	// unqueued, if set with queue, makes acquire's first attempt one
	// store.UnqueuedAcquirer request: a lease that is free with nobody
	// queued is taken without writing a place. Its owner sets it per
	// acquire (a Lock only while its lease is not contended).
	unqueued store.UnqueuedAcquirer
	// placed is set once acquire has called Enqueue: a place may exist,
	// and leaves the queue on the way out.
	placed bool
	// queuedBehind is set once the queue answered that places are ahead
	// (Enqueue, or ErrQueued from the unqueued attempt): the lease is
	// contended.
	queuedBehind bool
	// firstAt is when the store last said this contender's place is first
	// in the queue (zero: not known to be first). A place first stays first
	// until it leaves, so it is only refreshed every RetryPeriod.
	firstAt time.Time
	// leaving is closed when the place a granted acquire left behind has
	// left the queue (see acquire); nil when none is leaving. The term's
	// keeper waits for it (waitLeft) before it releases.
	leaving chan struct{}
	// flushes: whoever called try flushes the event queue as soon as an
	// attempt is granted (a Lock's Acquire and TryAcquire), so a granted
	// attempt's event waits for that flush rather than start a goroutine.
	flushes bool
}

// errQueued: a fair contender's place is not first in the queue, so it
// does not try yet.
var errQueued = errors.New("leasehold: waiting for earlier waiters in the queue")

// errTooSlow: a grant arrived after its own safeUntil; it was given back.
var errTooSlow = errors.New("leasehold: acquire answered after its safe deadline; term given back")

// try sends one acquire request. On success it returns the term's record and
// the time the request was sent. An error matching store.ErrHeld comes with
// the live record.
func (c *contender) try(ctx context.Context) (store.Record, time.Time, error) {
	return c.tryWith(ctx, nil)
}

// tryWith is try, sending unqueued.AcquireUnqueued instead of Acquire if
// unqueued is set.
func (c *contender) tryWith(ctx context.Context, unqueued store.UnqueuedAcquirer) (store.Record, time.Time, error) {
	t := c.timings
	sent := c.clock.Now()
	// A grant that takes longer than RenewDeadline is useless: it would be past
	// its own safeUntil on arrival.
	actx, cancel := context.WithTimeout(ctx, t.RenewDeadline)
	var rec store.Record
	var err error
	if unqueued != nil {
		rec, err = unqueued.AcquireUnqueued(actx, c.name, c.holder, t.LeaseDuration, c.metadata)
	} else {
		rec, err = c.store.Acquire(actx, c.name, c.holder, t.LeaseDuration, c.metadata)
	}
	cancel()
	rtt := c.clock.Now().Sub(sent)
	attempt := Event{Kind: EventAcquireAttempt, Name: c.name, Term: rec.Term, Record: rec, Latency: rtt, Err: err}
	if err == nil && c.flushes {
		c.emitLater(attempt)
	} else {
		c.emit(attempt)
	}
	switch {
	case err == nil:
		c.unknown = false
		if !granted(t, sent, rec.Remaining).trusted(t, c.clock.Now()) {
			c.release(ctx, rec.Term)
			return store.Record{}, sent, errTooSlow
		}
		return rec, sent, nil
	case errors.Is(err, store.ErrHeld):
		// Another term is live, so no grant of ours is.
		c.unknown = false
		c.sawHeld = true
		if rec.Holder != c.lastHolder {
			c.lastHolder = rec.Holder
			c.emit(Event{Kind: EventHolderObserved, Name: c.name, Record: rec})
		}
		return rec, sent, err
	case errors.Is(err, store.ErrQueued):
		// Nothing was granted: waiters are queued, or the store could not tell.
		c.unknown = false
		return rec, sent, err
	case errors.Is(err, store.ErrInvalid), errors.Is(err, store.ErrClosed):
		return rec, sent, err
	default:
		c.unknown = true
		return rec, sent, err
	}
}

// acquire tries until it holds the lease or ctx ends. With ctx ended it gives
// back any term an unknown outcome may have granted, and returns ctx's error.
func (c *contender) acquire(ctx context.Context) (_ store.Record, _ time.Time, err error) {
	var watch <-chan struct{}
	var noWatchUntil time.Time // after a watch broke, poll until then
	stopWatch := func() {}
	defer func() { stopWatch() }()
	c.placed, c.queuedBehind = false, false
	unqueued := c.unqueued
	if c.queue == nil {
		unqueued = nil
	} else {
		// Leave the queue on every way out, if a place was written: with
		// the lease (the next waiter moves up while this one holds), or
		// without it. With the lease, the place leaves while the term
		// starts, not before the caller has it: a place only orders who
		// tries, and the holder's keeper waits for it to be gone before it
		// releases the term, so the next waiter still finds it gone when
		// the term ends.
		defer func() {
			switch {
			case !c.placed:
			case err == nil:
				c.leaveQueueLater(ctx)
			default:
				c.leaveQueue(ctx)
			}
		}()
	}
	// failed is the error of the last attempt if it failed (not a refusal:
	// the store was unreachable or answered an error), so that an acquire
	// that runs out of time says why it got nowhere, such as a table that
	// was never created, rather than only that time ran out. Both the
	// context's error and the failure match errors.Is.
	var failed error
	for {
		if err := ctx.Err(); err != nil {
			c.giveBackUnknown(ctx)
			if failed != nil {
				err = fmt.Errorf("%w (the last attempt failed: %w)", err, failed)
			}
			return store.Record{}, time.Time{}, err
		}
		var rec store.Record
		var sent time.Time
		var err error
		if unqueued != nil {
			// First, take the lease at once if it is free and nobody is
			// queued: no place is written. Refused (queued, held, or no
			// answer), queue as usual, at once.
			rec, sent, err = c.tryWith(ctx, unqueued)
			unqueued = nil
			switch {
			case err == nil:
				return rec, sent, nil
			case errors.Is(err, store.ErrInvalid), errors.Is(err, store.ErrClosed):
				c.giveBackUnknown(ctx)
				return store.Record{}, time.Time{}, err
			case errors.Is(err, store.ErrQueued):
				c.queuedBehind = true
			}
			continue
		}
		if c.queued(ctx) {
			err = errQueued
		} else {
			rec, sent, err = c.try(ctx)
			if err == nil {
				return rec, sent, nil
			}
			if errors.Is(err, store.ErrInvalid) || errors.Is(err, store.ErrClosed) {
				c.giveBackUnknown(ctx)
				return store.Record{}, time.Time{}, err
			}
			if !c.firstAt.IsZero() && ctx.Err() == nil && !errors.Is(err, store.ErrHeld) && !errors.Is(err, store.ErrQueued) {
				// Its turn came, the queue answered, and the acquire did
				// not: no answer, or a grant too late to trust. The places
				// behind do not try while this one is first, so it goes
				// to the back (the next Enqueue writes a new place), or a
				// waiter that can reach the queue but cannot take the
				// lease would keep everyone from it. (An ended ctx
				// leaves the queue on the way out.) An acquire with no
				// answer may have been granted: that term is given back
				// first, or the waiters now ahead would find the lease
				// held by nobody's turn until it expired.
				c.giveBackUnknown(ctx)
				c.leaveQueue(ctx)
			}
		}
		// A definite answer to wait on: another term is live, or earlier
		// waiters are queued. Only these may be cut short by the watch.
		waitable := errors.Is(err, store.ErrHeld) || errors.Is(err, errQueued)
		failed = nil
		if !waitable && ctx.Err() == nil {
			failed = err
		}
		if waitable && watch == nil && c.watcher != nil && !c.clock.Now().Before(noWatchUntil) {
			// Watch only once there is something to wait for, so a slow watch
			// never delays a free lease; then try again at once, so that a
			// release between the refusal and the subscription is not missed.
			if ch, cancel, werr := c.subscribe(ctx); werr == nil {
				watch, stopWatch = ch, cancel
				continue
			}
			// The subscription failed or hung: poll, and try again no sooner
			// than a retry period from now.
			noWatchUntil = c.clock.Now().Add(c.retryWait())
		}
		wait := c.retryWait()
		// Only a definite "held" answer may be cut short: after an unknown
		// outcome the wait is a full retry period, or a store that fails
		// while its watch fires would be hammered.
		var wake <-chan struct{}
		if waitable {
			wake = watch
			if rec.Remaining > 0 && rec.Remaining < wait {
				// Wake exactly when the holder's term expires on the store's clock.
				wait = rec.Remaining
			}
		}
		timer := c.clock.NewTimer(wait)
	waiting:
		for {
			select {
			case <-ctx.Done():
			case <-timer.C():
			case _, ok := <-wake:
				if !ok {
					// The watch broke: finish this wait by the timer, and
					// subscribe again no sooner than a retry period from now,
					// so a watch that keeps breaking cannot make us spin.
					watch, wake = nil, nil
					stopWatch()
					noWatchUntil = c.clock.Now().Add(c.retryWait())
					continue waiting
				}
			}
			break
		}
		timer.Stop()
	}
}

// errWatchTimeout: a Watch call did not answer within a retry period.
var errWatchTimeout = errors.New("leasehold: watch subscription did not answer within the retry period")

// subscribe calls Watch, waiting for its answer at most a retry period: the
// Watcher contract sets no bound on the call, and a store whose subscription
// hangs must not stall a candidate, who then polls instead. An abandoned call
// has its context cancelled, and whatever it returns later is dropped. The
// returned cancel ends the watch.
func (c *contender) subscribe(ctx context.Context) (<-chan struct{}, context.CancelFunc, error) {
	wctx, cancel := context.WithCancel(ctx)
	type answer struct {
		ch  <-chan struct{}
		err error
	}
	answers := make(chan answer, 1) // the call's goroutine never blocks on it
	go func() {
		ch, err := c.watcher.Watch(wctx, c.name)
		answers <- answer{ch, err}
	}()
	timer := c.clock.NewTimer(c.timings.RetryPeriod)
	defer timer.Stop()
	select {
	case a := <-answers:
		if a.err != nil {
			cancel()
			return nil, nil, a.err
		}
		return a.ch, cancel, nil
	case <-timer.C():
		cancel()
		return nil, nil, errWatchTimeout
	case <-ctx.Done():
		cancel()
		return nil, nil, ctx.Err()
	}
}

// retryWait is RetryPeriod plus up to Jitter × RetryPeriod at random.
func (c *contender) retryWait() time.Duration {
	t := c.timings
	return t.RetryPeriod + time.Duration(rand.Float64()*t.JitterFraction()*float64(t.RetryPeriod))
}

// release gives back term with a detached context bounded by RenewDeadline:
// waiting longer than that is pointless, the lease will soon expire anyway.
func (c *contender) release(ctx context.Context, term store.Term) error {
	return c.releaseEmit(ctx, term, c.emit)
}

// releaseEmit is release, reporting EventReleased with emit.
func (c *contender) releaseEmit(ctx context.Context, term store.Term, emit func(Event)) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.timings.RenewDeadline)
	defer cancel()
	sent := c.clock.Now()
	err := c.store.Release(rctx, term)
	emit(Event{Kind: EventReleased, Name: term.Name, Term: term, Latency: c.clock.Now().Sub(sent), Err: err})
	return err
}

// giveBackUnknown ends a term that an acquire with an unknown outcome may have
// granted: if the store shows this holder's live term, release exactly it.
func (c *contender) giveBackUnknown(ctx context.Context) {
	if !c.unknown {
		return
	}
	gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.timings.RenewDeadline)
	defer cancel()
	rec, err := c.store.Get(gctx, c.name)
	if err != nil {
		return // unreachable: the term, if granted, expires on its own
	}
	c.unknown = false
	if rec.Holder == c.holder && rec.Live() {
		c.release(gctx, rec.Term)
	}
}

// queued reports whether a fair contender must wait because earlier places
// are in the queue: it writes or refreshes its place (store.Queuer.Enqueue)
// unless the store said less than a RetryPeriod ago that it is first. If
// the queue fails, the contender tries anyway: the queue only orders who
// tries, and a broken queue must not stop a free lease from being taken.
func (c *contender) queued(ctx context.Context) bool {
	if c.queue == nil {
		return false
	}
	now := c.clock.Now()
	if !c.firstAt.IsZero() && now.Sub(c.firstAt) < c.timings.RetryPeriod {
		return false
	}
	qctx, cancel := context.WithTimeout(ctx, c.timings.RenewDeadline)
	c.placed = true
	ahead, err := store.EnqueueWithMetadata(qctx, c.queue, c.name, c.holder, c.timings.LeaseDuration, c.metadata)
	cancel()
	c.firstAt = time.Time{}
	if err != nil {
		return false
	}
	if ahead == 0 {
		c.firstAt = now
		return false
	}
	c.queuedBehind = true
	return true
}

// leaveQueue removes this contender's place from the queue, with a
// detached context bounded by RenewDeadline. If it fails, the place
// expires LeaseDuration after its last refresh.
func (c *contender) leaveQueue(ctx context.Context) {
	c.firstAt = time.Time{}
	qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.timings.RenewDeadline)
	defer cancel()
	_ = c.queue.Dequeue(qctx, c.name, c.holder)
}

// leaveQueueLater removes this contender's place from the queue on a
// goroutine of its own, which waitLeft waits for. The call is bounded as
// leaveQueue's is.
func (c *contender) leaveQueueLater(ctx context.Context) {
	c.firstAt = time.Time{}
	done := make(chan struct{})
	c.leaving = done
	qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.timings.RenewDeadline)
	go func() {
		defer close(done)
		defer cancel()
		_ = c.queue.Dequeue(qctx, c.name, c.holder)
	}()
}

// waitLeft waits until the place a granted acquire left behind has left
// the queue (leaveQueueLater), if one is leaving.
func (c *contender) waitLeft() {
	if c.leaving != nil {
		<-c.leaving
		c.leaving = nil
	}
}
