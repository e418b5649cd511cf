package leasehold

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/leasehold/leasehold/store"
)

// holdConfig is what holding a term needs; Elector, Lock and Keeper fill it.
type holdConfig struct {
	store     store.Store
	clock     Clock
	timings   Timings // with defaults, validated
	keepAlive bool
	maxHold   time.Duration // zero: no cap (Config.MaxHold)
	// observe, if set, sees each event at once, on the goroutine that
	// reports it (the Elector's Status); events then go to the user's
	// OnEvent through the queue.
	observe func(Event)
	events  *eventQueue

	// deadlines keeps the deadlines of the terms that are not renewed, on
	// clock if it is an afterFuncClock: made on first use.
	deadlinesOnce sync.Once
	deadlines     *deadlines
}

// deadlinesOn is the config's deadlines on afc, its clock.
func (c *holdConfig) deadlinesOn(afc afterFuncClock) *deadlines {
	c.deadlinesOnce.Do(func() { c.deadlines = newDeadlines(afc) })
	return c.deadlines
}

func (c *holdConfig) emit(e Event) {
	if c.observe != nil {
		c.observe(e)
	}
	c.events.add(e)
}

// emitLater is emit for a caller that flushes the event queue before it
// returns, with no wait between (see eventQueue.addLater).
func (c *holdConfig) emitLater(e Event) {
	if c.observe != nil {
		c.observe(e)
	}
	c.events.addLater(e)
}

// holding keeps one term: it renews it every RenewInterval (if keepAlive),
// retries a failed renewal every RetryPeriod, and cancels ctx at
// safeUntil - WindDown, where safeUntil = (send time of the last successful
// acquire or renew) + RenewDeadline, on the holder's own clock. One goroutine
// (loop) owns the timers and the renewal in flight; stop asks it to end and
// waits for it.
type holding struct {
	cfg  *holdConfig
	term store.Term

	ctx    context.Context
	cancel context.CancelCauseFunc

	mu sync.Mutex
	tr trust

	stopc    chan struct{} // nil for a timed holding
	endNow   func()        // a timed holding's end, for stop
	stopOnce sync.Once
	done     chan struct{} // closed by loop when it has ended
	cause    error         // why it ended; written by loop before done closes
}

type renewResult struct {
	_ [0]func() // not comparable: spares the binary an equality function

	sentAt time.Time
	rec    store.Record
	err    error
	rtt    time.Duration
}

// startHolding begins holding the term of rec, granted by a request sent at
// sentAt, and reports EventAcquired before anything else of the term. The
// term's context derives from parent. flushed says the caller flushes the
// event queue right after (Lock's Acquire and TryAcquire).
//
// A term that is renewed (keepAlive) has one goroutine, loop. A term that is
// not has none on the system clock: a timer cancels it at its deadline, and
// context.AfterFunc ends it (see timed).
func startHolding(parent context.Context, cfg *holdConfig, rec store.Record, sentAt time.Time, flushed bool) *holding {
	ctx, cancel := context.WithCancelCause(parent)
	tr := granted(cfg.timings, sentAt, rec.Remaining)
	tr.capHold(sentAt, cfg.maxHold)
	h := &holding{
		cfg:    cfg,
		term:   rec.Term,
		ctx:    ctx,
		cancel: cancel,
		tr:     tr,
		done:   make(chan struct{}),
	}
	acquired := Event{Kind: EventAcquired, Name: rec.Name, Term: rec.Term, Record: rec, SafeUntil: h.tr.safeUntil}
	if flushed {
		cfg.emitLater(acquired)
	} else {
		cfg.emit(acquired)
	}
	if afc, ok := cfg.clock.(afterFuncClock); ok && !cfg.keepAlive {
		h.timed(cfg.deadlinesOn(afc))
		return h
	}
	h.stopc = make(chan struct{})
	go h.loop()
	return h
}

// timed holds a term that is not renewed without a goroutine of its own: its
// trust never changes, so its deadline in ds (one timer for all the
// config's terms) cancels the term's context at cancelAt,
// and whatever cancels that context (the timer, stop, the parent, end) ends
// the holding once, on context.AfterFunc's goroutine, as loop would.
func (h *holding) timed(ds *deadlines) {
	t := h.cfg.timings
	tr := h.tr
	deadline := ds.at(tr.cancelAt(t), func() {
		// Stop trusting the term now. At the hold cap the term ends by
		// release once the work returns, or by expiry.
		if tr.holdCapped(t) {
			h.cancel(ErrMaxHold)
		} else {
			h.cancel(ErrSafeUntilPassed)
		}
	})
	end := func(emit func(Event)) {
		deadline.Stop()
		h.cause = context.Cause(h.ctx)
		emit(Event{Kind: EventLost, Name: h.term.Name, Term: h.term, SafeUntil: tr.safeUntil, Err: h.cause})
		close(h.done)
	}
	stopEnd := context.AfterFunc(h.ctx, func() { end(h.cfg.emit) })
	// stop ends the holding on its caller's goroutine when nothing has
	// cancelled the context yet, rather than wait for AfterFunc's: a
	// release then sends its request without a goroutine hop first. Its
	// caller (lockKeeping.release) flushes the events.
	h.endNow = func() {
		if stopEnd() {
			h.cancel(ErrReleased)
			end(h.cfg.emitLater)
		}
	}
}

// SafeUntil is the current local deadline of the term.
func (h *holding) SafeUntil() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.tr.safeUntil
}

func (h *holding) trust() trust {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.tr
}

// end cancels the term's context with cause (the holding's loop then ends
// with that cause), as a hand-over request does.
func (h *holding) end(cause error) { h.cancel(cause) }

// stop ends the holding (cancelling its context with ErrReleased if it is
// still live), waits for its goroutine, and returns why it ended.
func (h *holding) stop() error {
	h.stopOnce.Do(func() {
		if h.stopc == nil {
			h.endNow() // timed: ended here, or already by context.AfterFunc
		} else {
			close(h.stopc)
		}
	})
	<-h.done
	return h.cause
}

func (h *holding) loop() {
	defer close(h.done)
	t := h.cfg.timings
	clock := h.cfg.clock

	deadline := clock.NewTimer(h.trust().cancelAt(t).Sub(clock.Now()))
	defer deadline.Stop()

	var renewC <-chan time.Time
	var renewTimer Timer
	if h.cfg.keepAlive {
		renewTimer = clock.NewTimer(h.trust().nextRenew.Sub(clock.Now()))
		defer renewTimer.Stop()
		renewC = renewTimer.C()
	}

	results := make(chan renewResult, 1)
	var inflight context.CancelFunc // non-nil while a renewal is in flight
	finish := func(cause error) {
		h.cancel(cause)
		if inflight != nil {
			inflight()
			<-results
		}
		h.cause = context.Cause(h.ctx)
	}

	for {
		select {
		case <-h.stopc:
			finish(ErrReleased)
			h.cfg.emit(Event{Kind: EventLost, Name: h.term.Name, Term: h.term, SafeUntil: h.SafeUntil(), Err: h.cause})
			return
		case <-h.ctx.Done():
			finish(context.Cause(h.ctx))
			h.cfg.emit(Event{Kind: EventLost, Name: h.term.Name, Term: h.term, SafeUntil: h.SafeUntil(), Err: h.cause})
			return
		case <-deadline.C():
			// Stop trusting the term now, whatever a renewal in flight may say.
			// At the hold cap, stop renewing too: the term ends by release
			// once the work returns, or by expiry.
			if h.trust().holdCapped(t) {
				finish(ErrMaxHold)
			} else {
				finish(ErrSafeUntilPassed)
			}
			h.cfg.emit(Event{Kind: EventLost, Name: h.term.Name, Term: h.term, SafeUntil: h.SafeUntil(), Err: h.cause})
			return
		case <-renewC:
			renewC = nil // one renewal in flight at a time
			sent := clock.Now()
			rctx, cancel := context.WithTimeout(h.ctx, t.RetryPeriod)
			inflight = cancel
			go func() {
				rec, err := h.cfg.store.Renew(rctx, h.term, t.LeaseDuration)
				results <- renewResult{sentAt: sent, rec: rec, err: err, rtt: clock.Now().Sub(sent)}
			}()
		case r := <-results:
			inflight()
			inflight = nil
			switch {
			case r.err == nil:
				h.mu.Lock()
				h.tr.renewed(t, r.sentAt)
				tr := h.tr
				h.mu.Unlock()
				deadline.Reset(tr.cancelAt(t).Sub(clock.Now()))
				h.cfg.emit(Event{Kind: EventRenewed, Name: h.term.Name, Term: h.term, Record: r.rec, SafeUntil: tr.safeUntil, Latency: r.rtt})
				renewTimer.Reset(tr.nextRenew.Sub(clock.Now()))
			case errors.Is(r.err, store.ErrNotHeld):
				h.cfg.emit(Event{Kind: EventRenewFailed, Name: h.term.Name, Term: h.term, SafeUntil: h.SafeUntil(), Latency: r.rtt, Err: r.err})
				h.cancel(ErrLeaseLost)
				h.cause = ErrLeaseLost
				h.cfg.emit(Event{Kind: EventLost, Name: h.term.Name, Term: h.term, SafeUntil: h.SafeUntil(), Err: h.cause})
				return
			default:
				// Outcome unknown: try again a retry period after this one was sent.
				h.mu.Lock()
				h.tr.renewFailed(t, r.sentAt)
				tr := h.tr
				h.mu.Unlock()
				h.cfg.emit(Event{Kind: EventRenewFailed, Name: h.term.Name, Term: h.term, SafeUntil: tr.safeUntil, Latency: r.rtt, Err: r.err})
				renewTimer.Reset(tr.nextRenew.Sub(clock.Now()))
			}
			renewC = renewTimer.C()
		}
	}
}
