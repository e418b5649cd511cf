package leasehold

import (
	"context"
	"errors"
	"time"

	"github.com/leasehold/leasehold/store"
)

// handoverWatch watches, while a term is held, for a hand-over request that
// names that exact term. It has one goroutine, owned by the Elector's lead,
// which stops it (and waits for it) when the term ends.
type handoverWatch struct {
	cancel context.CancelFunc
	done   chan struct{}
	req    handoverRequest // written before done closes
	found  bool
}

// watchHandover starts watching for requests to end h's term. A request
// found ends the holding with ErrHandedOver.
func watchHandover(parent context.Context, c *contender, h *holding) *handoverWatch {
	ctx, cancel := context.WithCancel(parent)
	w := &handoverWatch{cancel: cancel, done: make(chan struct{})}
	reqName, err := HandoverRequestName(h.term.Name)
	if err != nil {
		// A name too long to take the suffix: no request can be made for it.
		close(w.done)
		return w
	}
	go func() {
		defer close(w.done)
		w.req, w.found = w.loop(ctx, c, h, reqName)
		if w.found {
			h.end(ErrHandedOver)
		}
	}()
	return w
}

// stop ends the watch and reports the request that ended the term, if any.
func (w *handoverWatch) stop() (handoverRequest, bool) {
	w.cancel()
	<-w.done
	return w.req, w.found
}

func (w *handoverWatch) loop(ctx context.Context, c *contender, h *holding, reqName string) (handoverRequest, bool) {
	t := c.timings
	// The request name's own contender, for its bounded Watch subscription.
	rc := &contender{holdConfig: c.holdConfig, watcher: c.watcher, name: reqName, holder: c.holder}
	// A watch that wakes on grants tells of every request (a request is a
	// grant): while it is up, the request name is read only when it wakes.
	// Otherwise it is read once per RenewInterval: a store.Watcher must push
	// releases but need not push grants (Redis publishes releases only).
	gw, _ := c.watcher.(store.GrantWatcher)
	grantsPushed := gw != nil && gw.WatchesGrants()
	_, preferred := c.store.(store.PreferredHolderReader)
	var wake <-chan struct{}
	stopWatch := func() {}
	defer func() { stopWatch() }()
	var noWatchUntil time.Time
	read := true // the first pass reads, and every pass without a pushing watch
	for {
		if wake == nil && rc.watcher != nil && !c.clock.Now().Before(noWatchUntil) {
			// Subscribe first, then read: a request written in between is
			// read, one written later wakes the watch.
			if ch, cancel, err := rc.subscribe(ctx); err == nil {
				wake, stopWatch = ch, cancel
				read = true
			} else {
				noWatchUntil = c.clock.Now().Add(t.RetryPeriod)
			}
		}
		if req, ok := preferredElsewhere(c.store, h.term); ok {
			return req, true
		}
		pushed := grantsPushed && wake != nil
		var err error
		if read || !pushed {
			gctx, cancel := context.WithTimeout(ctx, t.RetryPeriod)
			var rec store.Record
			rec, err = c.store.Get(gctx, reqName)
			cancel()
			if err == nil && rec.Live() {
				if req, perr := parseHandoverRequest(rec.Metadata); perr == nil && req.token == h.term.Token {
					return req, true
				}
			}
		}
		read = false
		if ctx.Err() != nil {
			return handoverRequest{}, false
		}
		// Wait for the watch; without a pushing watch, read again after
		// RenewInterval (a retry period after an error). A pushing watch
		// needs no timer, except to look at a store.PreferredHolderReader's
		// record (no request) and to read again after a failed read.
		failed := err != nil && !errors.Is(err, store.ErrNotFound)
		var timer Timer
		var timerC <-chan time.Time
		if !pushed || preferred || failed {
			d := t.RenewInterval
			if failed {
				d = min(d, t.RetryPeriod)
				read = true
			}
			timer = c.clock.NewTimer(d)
			timerC = timer.C()
		}
		select {
		case <-ctx.Done():
		case <-timerC:
		case _, open := <-wake:
			read = true
			if !open {
				wake = nil
				stopWatch()
				noWatchUntil = c.clock.Now().Add(t.RetryPeriod)
			}
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

// handOver ends term after its work returned, on the request req: with a
// successor, by a store.Transferer's Transfer (one conditional write); with
// none, or on a store without Transfer, by Release. The reservation lasts req.preferFor, at least the
// store's shortest lease.
func (c *contender) handOver(ctx context.Context, term store.Term, req handoverRequest) {
	if req.to == "" || req.to == term.Holder {
		c.release(ctx, term)
		return
	}
	ttl := c.reservationTTL(req)
	meta := reservedPrefix + term.String()
	if tr, ok := c.store.(store.Transferer); ok {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.timings.RenewDeadline)
		defer cancel()
		sent := c.clock.Now()
		_, err := tr.Transfer(rctx, term, req.to, ttl, meta)
		c.emit(Event{Kind: EventReleased, Name: term.Name, Term: term, Latency: c.clock.Now().Sub(sent), Err: err})
		return
	}
	// No Transferer: release only. An Acquire in the successor's name after
	// the release would be unsafe: if the successor had meanwhile won the
	// lease by itself, that Acquire (same holder) would replace the
	// successor's live term under its feet, and the reservation would then
	// expire while the successor still trusts its term.
	c.release(ctx, term)
}

func (c *contender) reservationTTL(req handoverRequest) time.Duration {
	ttl := req.preferFor
	if lim, ok := c.store.(store.Limiter); ok {
		if m := lim.Limits().MinLeaseDuration; ttl < m {
			ttl = m
		}
	}
	return ttl
}

// standAside waits d (the preference window) before contending again, so
// that a holder that handed over does not take the lease straight back.
func (c *contender) standAside(ctx context.Context, d time.Duration) error {
	timer := c.clock.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C():
		return nil
	}
}

// preferredElsewhere asks a store.PreferredHolderReader (Kubernetes) whether
// the lease's own record prefers another holder than term's: Kubernetes'
// coordinated leader election asks a holder to step down that way. It costs
// no request: the store answers from the version its last renewal saw.
func preferredElsewhere(st store.Store, term store.Term) (handoverRequest, bool) {
	pr, ok := st.(store.PreferredHolderReader)
	if !ok {
		return handoverRequest{}, false
	}
	p := pr.PreferredHolder(term.Name)
	if p == "" || p == term.Holder {
		return handoverRequest{}, false
	}
	req := handoverRequest{token: term.Token, preferFor: DefaultHandoverPreferFor}
	if store.ValidateHolder(p) == nil {
		req.to = p
	}
	return req, true
}
