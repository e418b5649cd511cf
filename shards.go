package leasehold

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/leasehold/leasehold/store"
)

// ErrAlreadyKept: a Keeper was asked for a lease it already holds, or is
// acquiring right now. Acquiring it again would replace the term it holds.
var ErrAlreadyKept = errors.New("leasehold: lease already held by this keeper")

// ErrKeeperClosed: the Keeper was closed.
var ErrKeeperClosed = errors.New("leasehold: keeper closed")

// ErrDraining: a Keeper was asked for a lease whose previous term ended
// (its safeUntil passed, or it was lost) but has not been released: its work
// may still be running. A new term for the same holder would replace the old
// one in the store at once, with no expiry in between, so the Keeper starts
// none until Release of the old term says its work has returned.
var ErrDraining = errors.New("leasehold: previous term still draining; call Release on it once its work has returned")

// keeperParallelism bounds the renewals in flight at once for a store
// without the store.BatchRenewer capability.
const keeperParallelism = 16

// Keeper holds many leases for one process, one per shard or partition, and
// renews all of them together: one batched call per renew interval
// (store.BatchRenewer, a single statement on PostgreSQL), or, on a store
// without that capability, one Renew per lease, a few at a time.
//
// Each lease keeps the rules of an Elector's term. Its safeUntil is the send
// time of its own last successful acquire or renew plus RenewDeadline; at
// safeUntil (minus WindDown) its context is cancelled, whatever a batch in
// flight may still say; and a batch that answers "not held" for one lease
// ends that lease alone, with ErrLeaseLost, while the others carry on. A
// batch whose outcome is unknown is sent again a retry period after it was
// sent. The batch is sent when the earliest lease is due, and carries every
// lease: a lease acquired just before is simply renewed early.
//
// A Keeper is safe for concurrent use. Close stops it.
type Keeper struct {
	cfg     Config
	hold    holdConfig
	holder  string
	batch   store.BatchRenewer // nil: one Renew per lease
	watcher store.Watcher

	mu        sync.Mutex
	kept      map[string]*kept
	draining  map[string]*kept // ended, not yet released: work may still run
	acquiring map[string]bool
	closed    bool

	kick  chan struct{} // buffered 1: the set of leases changed
	stopc chan struct{}
	done  chan struct{} // closed by loop
}

// kept is one lease a Keeper holds.
type kept struct {
	k      *Keeper
	c      *contender
	term   store.Term
	cancel context.CancelCauseFunc

	// Guarded by k.mu.
	tr    trust
	ended bool
	cause error
}

// NewKeeper validates cfg and starts a Keeper on st. Close stops it.
func NewKeeper(st store.Store, cfg Config) (*Keeper, error) {
	if cfg.MaxHold != 0 {
		return nil, fmt.Errorf("%w: maxHold is for an Elector or a Lock; a Keeper's leases are released by its caller", ErrInvalidConfig)
	}
	if cfg.Fair {
		return nil, fmt.Errorf("%w: fair is for a Lock or an Elector; a Keeper has no queue", ErrInvalidConfig)
	}
	holder, err := cfg.prepare(st)
	if err != nil {
		return nil, err
	}
	k := &Keeper{
		cfg:       cfg,
		holder:    holder,
		kept:      map[string]*kept{},
		draining:  map[string]*kept{},
		acquiring: map[string]bool{},
		kick:      make(chan struct{}, 1),
		stopc:     make(chan struct{}),
		done:      make(chan struct{}),
	}
	k.hold = holdConfig{store: st, clock: cfg.Clock, timings: cfg.Timings, keepAlive: true,
		events: newEventQueue(cfg.OnEvent)}
	k.batch, _ = st.(store.BatchRenewer)
	k.watcher, _ = st.(store.Watcher)
	go k.loop()
	return k, nil
}

// Identity is the holder identity of every lease of this Keeper.
func (k *Keeper) Identity() string { return k.holder }

// Terms returns the terms the Keeper holds now, ordered by name.
func (k *Keeper) Terms() []store.Term {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make([]store.Term, 0, len(k.kept))
	for _, kp := range k.kept {
		out = append(out, kp.term)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// reserve marks name as being acquired.
func (k *Keeper) reserve(name string) error {
	if err := store.ValidateName(name); err != nil {
		return fmt.Errorf("leasehold: acquire %q: %w", name, err)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	switch {
	case k.closed:
		return fmt.Errorf("leasehold: acquire %q: %w", name, ErrKeeperClosed)
	case k.kept[name] != nil || k.acquiring[name]:
		return fmt.Errorf("leasehold: acquire %q: %w", name, ErrAlreadyKept)
	case k.draining[name] != nil:
		return fmt.Errorf("leasehold: acquire %q: %w", name, ErrDraining)
	}
	k.acquiring[name] = true
	return nil
}

func (k *Keeper) unreserve(name string) {
	k.mu.Lock()
	delete(k.acquiring, name)
	k.mu.Unlock()
}

func (k *Keeper) contender(name string) *contender {
	return &contender{holdConfig: &k.hold, watcher: k.watcher, name: name, holder: k.holder, metadata: k.cfg.Metadata}
}

// TryAcquire makes one attempt at name. If another holder's term is live it
// returns a *HeldError (matching ErrHeld). If the outcome is unknown it gives
// back whatever the attempt may have been granted before returning the
// error.
func (k *Keeper) TryAcquire(ctx context.Context, name string) (*Lease, error) {
	if err := k.reserve(name); err != nil {
		return nil, err
	}
	defer k.hold.events.flush()
	c := k.contender(name)
	rec, sent, err := c.try(ctx)
	if err != nil {
		c.giveBackUnknown(ctx)
		k.unreserve(name)
		if errors.Is(err, store.ErrHeld) {
			return nil, &HeldError{Record: rec}
		}
		return nil, fmt.Errorf("leasehold: acquire %q: %w", name, err)
	}
	return k.add(ctx, c, rec, sent)
}

// Acquire waits until the Keeper holds name or ctx ends, as Lock.Acquire
// does. ctx bounds only the wait.
func (k *Keeper) Acquire(ctx context.Context, name string) (*Lease, error) {
	if err := k.reserve(name); err != nil {
		return nil, err
	}
	defer k.hold.events.flush()
	c := k.contender(name)
	rec, sent, err := c.acquire(ctx)
	if err != nil {
		k.unreserve(name)
		return nil, fmt.Errorf("leasehold: acquire %q: %w", name, err)
	}
	return k.add(ctx, c, rec, sent)
}

// add starts keeping a term granted by a request sent at sent.
func (k *Keeper) add(ctx context.Context, c *contender, rec store.Record, sent time.Time) (*Lease, error) {
	t := k.cfg.Timings
	kctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	kp := &kept{k: k, c: c, term: rec.Term, cancel: cancel, tr: granted(t, sent, rec.Remaining)}
	k.mu.Lock()
	delete(k.acquiring, c.name)
	if k.closed {
		k.mu.Unlock()
		cancel(ErrReleased)
		c.release(ctx, rec.Term)
		return nil, fmt.Errorf("leasehold: acquire %q: %w", c.name, ErrKeeperClosed)
	}
	k.kept[c.name] = kp
	// Queued under k.mu, so before anything the loop reports of the term.
	k.hold.emit(Event{Kind: EventAcquired, Name: c.name, Term: rec.Term, Record: rec, SafeUntil: kp.tr.safeUntil})
	k.mu.Unlock()
	k.poke()
	return &Lease{term: rec.Term, ctx: kctx, keep: kp}, nil
}

func (k *Keeper) poke() {
	select {
	case k.kick <- struct{}{}:
	default:
	}
}

// Close stops renewing and cancels the context of every lease the Keeper
// holds (cause ErrReleased), then waits for its goroutine. It does not
// release the leases in the store: call Release on each after its work has
// returned (drain before release), or let them expire. Idempotent.
func (k *Keeper) Close() error {
	k.mu.Lock()
	if k.closed {
		k.mu.Unlock()
		<-k.done
		return nil
	}
	k.closed = true
	k.mu.Unlock()
	close(k.stopc)
	<-k.done
	k.hold.events.flush()
	return nil
}

// end stops keeping kp with cause, and reports EventLost. The name stays
// draining until kp is released. Called with k.mu held, so that the events
// of a term are queued in order whichever goroutine reports them.
func (k *Keeper) end(kp *kept, cause error) {
	if k.kept[kp.term.Name] == kp {
		delete(k.kept, kp.term.Name)
		k.draining[kp.term.Name] = kp
	}
	kp.ended, kp.cause = true, cause
	kp.cancel(cause)
	k.hold.emit(Event{Kind: EventLost, Name: kp.term.Name, Term: kp.term, SafeUntil: kp.tr.safeUntil, Err: cause})
}

type batchResult struct {
	sent time.Time
	kept []*kept
	recs []store.Record
	errs []error
	err  error
	rtt  time.Duration
}

// renewAll renews terms in one batch, or one by one without BatchRenewer.
func (k *Keeper) renewAll(ctx context.Context, terms []store.Term) ([]store.Record, []error, error) {
	ttl := k.cfg.Timings.LeaseDuration
	if k.batch != nil {
		return k.batch.RenewMany(ctx, terms, ttl)
	}
	recs := make([]store.Record, len(terms))
	errs := make([]error, len(terms))
	sem := make(chan struct{}, keeperParallelism)
	var wg sync.WaitGroup
	for i, t := range terms {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			recs[i], errs[i] = k.hold.store.Renew(ctx, t, ttl)
		}()
	}
	wg.Wait()
	return recs, errs, nil
}

// loop owns the timers and the batch in flight: it renews every lease when
// the earliest is due, and ends each lease at its own safeUntil.
func (k *Keeper) loop() {
	defer close(k.done)
	t := k.cfg.Timings
	clock := k.cfg.Clock
	var renewTimer, deadlineTimer Timer
	defer func() {
		if renewTimer != nil {
			renewTimer.Stop()
		}
		if deadlineTimer != nil {
			deadlineTimer.Stop()
		}
	}()
	arm := func(tm *Timer, d time.Duration) <-chan time.Time {
		if *tm == nil {
			*tm = clock.NewTimer(d)
		} else {
			(*tm).Stop()
			(*tm).Reset(d)
		}
		return (*tm).C()
	}
	results := make(chan batchResult, 1)
	var inflight context.CancelFunc // non-nil while a batch is in flight

	for {
		// End every lease whose safeUntil has come, then find the next
		// deadline and the next renewal due.
		now := clock.Now()
		var nextDeadline, nextRenew time.Time
		k.mu.Lock()
		for _, kp := range k.kept {
			if !kp.tr.trusted(t, now) {
				k.end(kp, ErrSafeUntilPassed)
				continue
			}
			if cancelAt := kp.tr.cancelAt(t); nextDeadline.IsZero() || cancelAt.Before(nextDeadline) {
				nextDeadline = cancelAt
			}
			if nextRenew.IsZero() || kp.tr.nextRenew.Before(nextRenew) {
				nextRenew = kp.tr.nextRenew
			}
		}
		k.mu.Unlock()
		var deadlineC, renewC <-chan time.Time
		if !nextDeadline.IsZero() {
			deadlineC = arm(&deadlineTimer, nextDeadline.Sub(now))
		}
		if !nextRenew.IsZero() && inflight == nil {
			renewC = arm(&renewTimer, nextRenew.Sub(now))
		}

		select {
		case <-k.stopc:
			if inflight != nil {
				inflight()
				<-results
			}
			k.mu.Lock()
			for _, kp := range k.kept {
				k.end(kp, ErrReleased)
			}
			k.mu.Unlock()
			return
		case <-k.kick:
		case <-deadlineC:
		case <-renewC:
			k.mu.Lock()
			kept := make([]*kept, 0, len(k.kept))
			for _, kp := range k.kept {
				kept = append(kept, kp)
			}
			k.mu.Unlock()
			sort.Slice(kept, func(i, j int) bool { return kept[i].term.Name < kept[j].term.Name })
			terms := make([]store.Term, len(kept))
			for i, kp := range kept {
				terms[i] = kp.term
			}
			sent := clock.Now()
			rctx, cancel := context.WithTimeout(context.Background(), t.RetryPeriod)
			inflight = cancel
			go func() {
				recs, errs, err := k.renewAll(rctx, terms)
				if err == nil && (len(recs) != len(terms) || len(errs) != len(terms)) {
					err = fmt.Errorf("leasehold: batch renewal returned %d records and %d errors for %d terms", len(recs), len(errs), len(terms))
				}
				results <- batchResult{sent: sent, kept: kept, recs: recs, errs: errs, err: err, rtt: clock.Now().Sub(sent)}
			}()
		case r := <-results:
			inflight()
			inflight = nil
			k.apply(r)
		}
	}
}

// apply records a batch's answers, lease by lease.
func (k *Keeper) apply(r batchResult) {
	t := k.cfg.Timings
	k.mu.Lock()
	defer k.mu.Unlock()
	for i, kp := range r.kept {
		if kp.ended {
			continue // released or past its safeUntil while the batch flew
		}
		var err error
		if r.err != nil {
			err = r.err
		} else {
			err = r.errs[i]
		}
		switch {
		case err == nil:
			kp.tr.renewed(t, r.sent)
			k.hold.emit(Event{Kind: EventRenewed, Name: kp.term.Name, Term: kp.term, Record: r.recs[i], SafeUntil: kp.tr.safeUntil, Latency: r.rtt})
		case r.err == nil && (errors.Is(err, store.ErrNotHeld) || errors.Is(err, store.ErrInvalid)):
			k.hold.emit(Event{Kind: EventRenewFailed, Name: kp.term.Name, Term: kp.term, SafeUntil: kp.tr.safeUntil, Latency: r.rtt, Err: err})
			k.end(kp, ErrLeaseLost)
		default:
			// Outcome unknown: send again a retry period after this was sent.
			kp.tr.renewFailed(t, r.sent)
			k.hold.emit(Event{Kind: EventRenewFailed, Name: kp.term.Name, Term: kp.term, SafeUntil: kp.tr.safeUntil, Latency: r.rtt, Err: err})
		}
	}
}

// safeUntil is the local deadline until which this lease is trusted.
func (kp *kept) safeUntil() time.Time {
	kp.k.mu.Lock()
	defer kp.k.mu.Unlock()
	return kp.tr.safeUntil
}

// release stops keeping the lease and ends exactly its term in the store;
// the name may then start a new term.
func (kp *kept) release(ctx context.Context) error {
	k := kp.k
	defer k.hold.events.flush()
	k.mu.Lock()
	ended := kp.ended
	if !ended {
		k.end(kp, ErrReleased)
	}
	lost := errors.Is(kp.cause, ErrLeaseLost)
	k.mu.Unlock()
	if !ended {
		k.poke()
	}
	var err error
	if lost {
		err = store.ErrNotHeld
	} else {
		err = kp.c.release(ctx, kp.term)
	}
	// The work has returned and the term is given back: the name may start
	// a new term.
	k.mu.Lock()
	if k.draining[kp.term.Name] == kp {
		delete(k.draining, kp.term.Name)
	}
	k.mu.Unlock()
	return err
}
