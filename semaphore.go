package leasehold

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold/store"
)

// MaxSlots is the most slots a Semaphore may have. Every attempt of a full
// semaphore asks each slot once, so a semaphore is meant for a few holders,
// not thousands.
const MaxSlots = 256

// Semaphore is a lease name with N slots: at most N holders at once, each in
// a term of its own with its own fencing token. It is safe for concurrent use;
// each acquisition is its own term, held through a *Lease exactly like a
// Lock's (the same safeUntil rule, KeepAlive and Release).
//
// Slot i is the ordinary lease named SlotName(name, i), granted with the
// store's compare-and-set like any lease, so a semaphore works on every store
// and a slot is never granted to two terms at once. A holder's token is its
// slot's token: it rises with every grant of that slot and never names two
// terms of it, but two slots have token sequences of their own. So fence per
// slot: the resource keys its fence on Lease.Name() (the slot's lease name),
// never on the semaphore's name, since N holders with N different tokens are
// all legitimate at once.
//
// Every process must use the same number of slots for a name: a process
// configured with more slots than the others uses lease names they never
// contend for, and more holders than intended may then run at once.
type Semaphore struct {
	name    string
	slots   []string // the slots' lease names
	cfg     Config
	hold    holdConfig
	base    string
	seq     atomic.Uint64
	watcher store.Watcher
}

// SlotName is the lease name of slot i of the semaphore name: name + ".slot-" + i.
func SlotName(name string, i int) string { return name + ".slot-" + strconv.Itoa(i) }

// NewSemaphore validates cfg and returns a Semaphore of slots slots (1 to
// MaxSlots) on the name in st. cfg is a Lock's: KeepAlive makes a holder renew
// its slot while it works.
func NewSemaphore(st store.Store, name string, slots int, cfg Config) (*Semaphore, error) {
	if st == nil {
		return nil, fmt.Errorf("%w: store is nil", ErrInvalidConfig)
	}
	if slots < 1 || slots > MaxSlots {
		return nil, fmt.Errorf("%w: semaphore %q: %d slots, want 1 to %d", ErrInvalidConfig, name, slots, MaxSlots)
	}
	if err := store.ValidateName(name); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	if err := store.ValidateName(SlotName(name, slots-1)); err != nil {
		return nil, fmt.Errorf("%w: semaphore %q: its slot lease names are too long: %v", ErrInvalidConfig, name, err)
	}
	if cfg.Fair {
		return nil, fmt.Errorf("%w: fair is for a Lock or an Elector; a Semaphore has no queue", ErrInvalidConfig)
	}
	base, err := cfg.prepare(st)
	if err != nil {
		return nil, err
	}
	s := &Semaphore{name: name, cfg: cfg, base: base, slots: make([]string, slots)}
	for i := range s.slots {
		s.slots[i] = SlotName(name, i)
	}
	s.hold = holdConfig{store: st, clock: cfg.Clock, timings: cfg.Timings, keepAlive: cfg.KeepAlive,
		maxHold: cfg.MaxHold, events: newEventQueue(cfg.OnEvent)}
	s.watcher, _ = st.(store.Watcher)
	return s, nil
}

// Name is the semaphore's name.
func (s *Semaphore) Name() string { return s.name }

// Slots is the number of slots.
func (s *Semaphore) Slots() int { return len(s.slots) }

// FullError says that every slot of a semaphore is held by another term:
// Semaphore.TryAcquire returns it. It matches ErrHeld and carries the
// holders' records, one per slot.
type FullError struct {
	Name    string
	Holders []store.Record
}

func (e *FullError) Error() string {
	return fmt.Sprintf("leasehold: semaphore %q full: all %d slots held", e.Name, len(e.Holders))
}

func (e *FullError) Unwrap() error { return store.ErrHeld }

// contenders returns one contender per slot, all for one new holder identity.
func (s *Semaphore) contenders() []*contender {
	holder := s.base + "." + strconv.FormatUint(s.seq.Add(1), 10)
	cs := make([]*contender, len(s.slots))
	for i, name := range s.slots {
		cs[i] = &contender{holdConfig: &s.hold, watcher: s.watcher, name: name, holder: holder, metadata: s.cfg.Metadata}
	}
	return cs
}

// round asks each slot once, from a random one, until one is granted. It
// returns the slot granted, or -1 with the records of the slots found held
// and the last error that was not ErrHeld (an unknown outcome).
func (s *Semaphore) round(ctx context.Context, cs []*contender) (slot int, rec store.Record, sent time.Time, held []store.Record, err error) {
	start := rand.IntN(len(cs))
	for i := range cs {
		k := (start + i) % len(cs)
		r, sentAt, e := cs[k].try(ctx)
		switch {
		case e == nil:
			return k, r, sentAt, nil, nil
		case errors.Is(e, store.ErrHeld):
			held = append(held, r)
		case errors.Is(e, store.ErrInvalid), errors.Is(e, store.ErrClosed):
			return -1, store.Record{}, time.Time{}, nil, e
		default:
			err = e
		}
		if ctx.Err() != nil {
			break
		}
	}
	return -1, store.Record{}, time.Time{}, held, err
}

// giveBack ends every term other than slot's that an acquire with an unknown
// outcome may have granted this holder.
func giveBack(ctx context.Context, cs []*contender, slot int) {
	for i, c := range cs {
		if i != slot {
			c.giveBackUnknown(ctx)
		}
	}
}

// TryAcquire asks each slot once. If every slot is held by another live term
// it returns a *FullError (matching ErrHeld). If no slot was granted and some
// outcome is unknown, it gives back whatever those attempts may have granted
// and returns the error.
func (s *Semaphore) TryAcquire(ctx context.Context) (*Lease, error) {
	defer s.hold.events.flush()
	cs := s.contenders()
	slot, rec, sent, held, err := s.round(ctx, cs)
	if slot >= 0 {
		l := s.lease(ctx, cs[slot], rec, sent)
		giveBack(ctx, cs, slot)
		return l, nil
	}
	giveBack(ctx, cs, -1)
	if err == nil {
		return nil, &FullError{Name: s.name, Holders: held}
	}
	return nil, fmt.Errorf("leasehold: acquire a slot of %q: %w", s.name, err)
}

// Acquire waits until it holds a slot or ctx ends. It wakes when the store
// announces a change of any slot (if it can), when the first holder's term
// expires, and polls every RetryPeriod otherwise. ctx bounds only the wait:
// the returned Lease has its own context.
func (s *Semaphore) Acquire(ctx context.Context) (*Lease, error) {
	defer s.hold.events.flush()
	cs := s.contenders()
	var w *slotWatch
	var noWatchUntil time.Time // after a watch broke, poll until then
	defer func() { w.stop() }()
	for {
		if err := ctx.Err(); err != nil {
			giveBack(ctx, cs, -1)
			return nil, fmt.Errorf("leasehold: acquire a slot of %q: %w", s.name, err)
		}
		slot, rec, sent, held, err := s.round(ctx, cs)
		if slot >= 0 {
			l := s.lease(ctx, cs[slot], rec, sent)
			giveBack(ctx, cs, slot)
			return l, nil
		}
		if errors.Is(err, store.ErrInvalid) || errors.Is(err, store.ErrClosed) {
			giveBack(ctx, cs, -1)
			return nil, fmt.Errorf("leasehold: acquire a slot of %q: %w", s.name, err)
		}
		full := err == nil
		if full && w == nil && s.watcher != nil && !s.hold.clock.Now().Before(noWatchUntil) {
			// As a Lock does: watch only once there is something to wait
			// for, then try again at once.
			if nw, werr := watchSlots(ctx, cs); werr == nil {
				w = nw
				continue
			}
			noWatchUntil = s.hold.clock.Now().Add(cs[0].retryWait())
		}
		wait := cs[0].retryWait()
		// Only definite "held" answers may cut the wait short (see contender.acquire).
		var wake <-chan struct{}
		var broken <-chan struct{}
		if full {
			for _, r := range held {
				if r.Remaining > 0 && r.Remaining < wait {
					wait = r.Remaining // the first holder's expiry, on the store's clock
				}
			}
			if w != nil {
				wake, broken = w.wake, w.broken
			}
		}
		timer := s.hold.clock.NewTimer(wait)
	waiting:
		for {
			select {
			case <-ctx.Done():
			case <-timer.C():
			case <-wake:
			case <-broken:
				// A slot's watch broke: finish this wait by the timer, and
				// watch again no sooner than a retry period from now.
				w.stop()
				w, wake, broken = nil, nil, nil
				noWatchUntil = s.hold.clock.Now().Add(cs[0].retryWait())
				continue waiting
			}
			break
		}
		timer.Stop()
	}
}

func (s *Semaphore) lease(ctx context.Context, c *contender, rec store.Record, sent time.Time) *Lease {
	h := startHolding(context.WithoutCancel(ctx), &s.hold, rec, sent, false)
	return &Lease{term: rec.Term, ctx: h.ctx, keep: lockKeeping{h: h, c: c}}
}

// slotWatch merges the watches of every slot: wake receives (coalesced) when
// any slot may have changed, broken is closed when any slot's watch broke.
// Its goroutines are owned by stop, which ends and waits for them.
type slotWatch struct {
	wake   chan struct{}
	broken chan struct{}
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// watchSlots subscribes to every slot at once, each subscription bounded by
// a retry period (contender.subscribe), so a store whose Watch hangs delays a
// waiter by one retry period, not one per slot.
func watchSlots(ctx context.Context, cs []*contender) (*slotWatch, error) {
	wctx, cancel := context.WithCancel(ctx)
	w := &slotWatch{wake: make(chan struct{}, 1), broken: make(chan struct{}), cancel: cancel}
	type sub struct {
		ch   <-chan struct{}
		stop context.CancelFunc
		err  error
	}
	subs := make([]sub, len(cs))
	var subscribing sync.WaitGroup
	for i, c := range cs {
		subscribing.Add(1)
		go func() {
			defer subscribing.Done()
			ch, stop, err := c.subscribe(wctx)
			subs[i] = sub{ch, stop, err}
		}()
	}
	subscribing.Wait()
	var err error
	for _, s := range subs {
		if s.err != nil {
			err = s.err
		}
	}
	if err != nil {
		for _, s := range subs {
			if s.stop != nil {
				s.stop()
			}
		}
		cancel()
		return nil, err
	}
	var breakOnce sync.Once
	for _, s := range subs {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			defer s.stop()
			for {
				select {
				case <-wctx.Done():
					return
				case _, ok := <-s.ch:
					if !ok {
						breakOnce.Do(func() { close(w.broken) })
						return
					}
					select {
					case w.wake <- struct{}{}:
					default:
					}
				}
			}
		}()
	}
	return w, nil
}

// stop ends the watches and waits for their goroutines. A nil slotWatch is
// allowed.
func (w *slotWatch) stop() {
	if w == nil {
		return
	}
	w.cancel()
	w.wg.Wait()
}
