package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/faultstore"
)

// leasehold's own contenders, on any store. Each contender talks to the
// shared store handle through its own faultstore wrapper, which passes every
// call through untouched until crash partitions it: the holder's calls then
// hang, as if its process had died, and its term is left to expire.

// lhTimings are the timings leasehold uses for a lease of ttl: the library's
// defaults scaled to ttl (RenewDeadline 2/3, RenewInterval 1/3, RetryPeriod
// 2/15 of the lease).
func lhTimings(ttl time.Duration) leasehold.Timings {
	return leasehold.Timings{LeaseDuration: ttl}.WithDefaults()
}

// fairLibs are leasehold's Lock and Elector with Config.Fair (the store's
// first-come, first-served queue), on a store that has one; none otherwise.
func fairLibs(storeName string, st store.Store, defTTL time.Duration, note string) []*lib {
	if _, ok := store.AsQueuer(st); !ok {
		return nil
	}
	return fairLibsEach(storeName, defTTL, note, func(mk func(store.Store) *lib) *lib { return mk(st) })
}

// fairLibsEach are leasehold's fair Lock and Elector, each built by per
// from a function that makes the library on a given Store (perContender,
// for a Store per contender).
func fairLibsEach(storeName string, ttl time.Duration, note string, per func(mk func(store.Store) *lib) *lib) []*lib {
	note += "; fair queue (Config.Fair)"
	l := per(func(st store.Store) *lib { return lhLock1(storeName, st, ttl, note, true) })
	el := per(func(st store.Store) *lib { return lhElector1(storeName, st, ttl, note, true) })
	l.name += " (fair)"
	el.name += " (fair)"
	return []*lib{l, el}
}

// perContender makes each contender of the library mk builds use a Store of
// its own, which open opens, as separate processes have: one process's
// contenders could share what a Store knows (a session, the versions it has
// seen, a local wake-up on its own release) where separate processes
// cannot. shared is the Store the library's description is built on.
func perContender(shared store.Store, open func(ctx context.Context) (store.Store, error), mk func(st store.Store) *lib) *lib {
	l := mk(shared)
	l.config += "; a Store per contender"
	l.newContender = func(ctx context.Context, lockName string, s setup) (contender, error) {
		st, err := open(ctx)
		if err != nil {
			return nil, err
		}
		c, err := mk(st).newContender(ctx, lockName, s)
		if err != nil {
			closeStore(st)
			return nil, err
		}
		return &storeClosing{contender: c, st: st}, nil
	}
	return l
}

// storeClosing closes a contender's own Store with it.
type storeClosing struct {
	contender
	st store.Store
}

func (c *storeClosing) close() {
	c.contender.close()
	closeStore(c.st)
}

func closeStore(st store.Store) {
	if c, ok := st.(io.Closer); ok {
		c.Close()
	}
}

func lhLockLib(storeName string, st store.Store, defTTL time.Duration, note string) *lib {
	return lhLock1(storeName, st, defTTL, note, false)
}

func lhElectorLib(storeName string, st store.Store, defTTL time.Duration, note string) *lib {
	return lhElector1(storeName, st, defTTL, note, false)
}

func lhLock1(storeName string, st store.Store, defTTL time.Duration, note string, fair bool) *lib {
	return &lib{
		name: "leasehold", store: storeName, kind: "lock",
		config: fmt.Sprintf("Lock, %v lease (default timings scaled), %s", defTTL, note),
		newContender: func(ctx context.Context, lockName string, s setup) (contender, error) {
			if s.ttl == 0 {
				s.ttl = defTTL
			}
			return &lhLock{st: st, name: lockName, s: s, fair: fair}, nil
		},
	}
}

type lhLock struct {
	st   store.Store
	name string
	s    setup
	// try uses TryAcquire (one attempt, no watch) instead of Acquire: for
	// the cycles scenario only, to show what the waiting machinery costs.
	try bool
	// fair sets Config.Fair.
	fair bool

	// Without keepAlive (every scenario but failover, which partitions the
	// store of one acquisition) a contender keeps one Lock and one
	// faultstore for all its acquisitions, as an application keeps its Lock
	// (and as the etcd contenders keep their session): the Lock's yield
	// after a contended release lives in the Lock.
	lk  *leasehold.Lock
	fs  *faultstore.Store
	cur atomic.Pointer[lhHeld] // the acquisition the reused Lock's events mark
}

func (c *lhLock) acquire(ctx context.Context) (held, error) {
	reuse := !c.s.keepAlive
	if reuse && c.lk != nil {
		h := &lhHeld{fs: c.fs}
		c.cur.Store(h)
		return c.finish(ctx, c.lk, h)
	}
	fs := faultstore.New(c.st)
	h := &lhHeld{fs: fs}
	c.cur.Store(h)
	lk, err := leasehold.NewLock(fs, c.name, leasehold.Config{
		Identity:  c.s.identity,
		Timings:   lhTimings(c.s.ttl),
		KeepAlive: c.s.keepAlive,
		Fair:      c.fair,
		OnEvent: func(e leasehold.Event) {
			if e.Kind == leasehold.EventRenewed || e.Kind == leasehold.EventAcquired {
				if h := c.cur.Load(); h != nil {
					h.clock.mark()
				}
			}
		},
	})
	if err != nil {
		return nil, err
	}
	if reuse {
		c.lk, c.fs = lk, fs
	}
	return c.finish(ctx, lk, h)
}

func (c *lhLock) finish(ctx context.Context, lk *leasehold.Lock, h *lhHeld) (held, error) {
	var err error
	var hd *leasehold.Lease
	if c.try {
		hd, err = lk.TryAcquire(ctx)
	} else {
		hd, err = lk.Acquire(ctx)
	}
	if err != nil {
		return nil, err
	}
	h.h = hd
	return h, nil
}

func (c *lhLock) close() {}

// lhTryLib is leasehold's Lock through TryAcquire, run in the cycles
// scenario only (an uncontended TryAcquire always succeeds).
func lhTryLib(storeName string, st store.Store, defTTL time.Duration) *lib {
	return &lib{
		name: "leasehold (TryAcquire)", store: storeName, kind: "try",
		config: fmt.Sprintf("Lock.TryAcquire: one attempt, no watch; %v lease; cycles scenario only", defTTL),
		newContender: func(ctx context.Context, lockName string, s setup) (contender, error) {
			if s.ttl == 0 {
				s.ttl = defTTL
			}
			return &lhLock{st: st, name: lockName, s: s, try: true}, nil
		},
	}
}

type lhHeld struct {
	fs    *faultstore.Store
	h     *leasehold.Lease
	clock renewClock
}

func (h *lhHeld) release(ctx context.Context) error { return h.h.Release(ctx) }
func (h *lhHeld) crash()                            { h.fs.Partition() }
func (h *lhHeld) lastRenewal() time.Time            { return h.clock.get() }

func lhElector1(storeName string, st store.Store, defTTL time.Duration, note string, fair bool) *lib {
	return &lib{
		name: "leasehold elector", store: storeName, kind: "elector",
		config: fmt.Sprintf("Elector, %v lease (default timings scaled), %s", defTTL, note),
		newContender: func(ctx context.Context, lockName string, s setup) (contender, error) {
			if s.ttl == 0 {
				s.ttl = defTTL
			}
			return &lhElector{st: st, name: lockName, s: s, fair: fair}, nil
		},
	}
}

type lhElector struct {
	st   store.Store
	name string
	s    setup
	fair bool // Config.Fair
}

func (c *lhElector) acquire(ctx context.Context) (held, error) {
	fs := faultstore.New(c.st)
	h := &lhLeader{fs: fs, stop: make(chan struct{}), done: make(chan error, 1)}
	e, err := leasehold.NewElector(fs, c.name, leasehold.Config{
		Identity:   c.s.identity,
		Timings:    lhTimings(c.s.ttl),
		StopOnLoss: true,
		Fair:       c.fair,
		OnEvent: func(e leasehold.Event) {
			if e.Kind == leasehold.EventRenewed || e.Kind == leasehold.EventAcquired {
				h.clock.mark()
			}
		},
	})
	if err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	leading := make(chan struct{})
	go func() {
		h.done <- e.Run(runCtx, func(ctx context.Context, l *leasehold.Lease) error {
			close(leading)
			select {
			case <-h.stop:
			case <-ctx.Done():
			}
			return nil
		})
	}()
	select {
	case <-leading:
		return h, nil
	case err := <-h.done:
		cancel()
		if err == nil {
			err = errors.New("elector returned before leading")
		}
		return nil, err
	case <-ctx.Done():
		cancel()
		<-h.done
		return nil, ctx.Err()
	}
}

func (c *lhElector) close() {}

type lhLeader struct {
	fs     *faultstore.Store
	stop   chan struct{}
	done   chan error
	cancel context.CancelFunc
	clock  renewClock
}

// release makes the work return: Run then releases the lease and returns.
func (h *lhLeader) release(ctx context.Context) error {
	close(h.stop)
	defer h.cancel()
	select {
	case err := <-h.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (h *lhLeader) crash() {
	h.fs.Partition()
	// The partitioned elector stops at its safeUntil and its release hangs
	// until its own bound; cancel it in the background to end its goroutine.
	go func() {
		h.cancel()
		<-h.done
	}()
}

func (h *lhLeader) lastRenewal() time.Time { return h.clock.get() }
