package leasehold_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/faultstore"
	"github.com/leasehold/leasehold/store/memstore"
)

func fair(c *leasehold.Config) { c.Fair = true }

// turns records the order in which contenders took the lock.
type turns struct {
	mu    sync.Mutex
	order []string
}

func (o *turns) add(who string) {
	o.mu.Lock()
	o.order = append(o.order, who)
	o.mu.Unlock()
}

func (o *turns) get() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.order)
}

// inArrivalOrder is the check of the fair tests: got must be want.
func inArrivalOrder(got, want []string) error {
	if !slices.Equal(got, want) {
		return fmt.Errorf("turns in order %v, want arrival order %v", got, want)
	}
	return nil
}

// TestFairLockServesInArrivalOrder: waiters that queued one after another
// get the lock in that order, and the releaser, acquiring again at once,
// goes to the back of the queue instead of taking the next turn.
func TestFairLockServesInArrivalOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture()
		ctx := context.Background()
		a := newLock(t, f.faulty(), "node-a", fair)
		first, err := a.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var got turns
		var wg sync.WaitGroup
		take := func(l *leasehold.Lock, who string) {
			defer wg.Done()
			h, err := l.Acquire(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			got.add(who)
			time.Sleep(10 * time.Millisecond) // the guarded work, on the bubble's clock
			if err := h.Release(ctx); err != nil {
				t.Error(err)
			}
		}
		for _, who := range []string{"b", "c", "d"} {
			wg.Add(1)
			go take(newLock(t, f.faulty(), "node-"+who, fair), who)
			synctest.Wait() // each queues before the next arrives
		}
		if err := first.Release(ctx); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		take(a, "a") // at once after its release: behind b, c and d
		wg.Wait()
		if err := inArrivalOrder(got.get(), []string{"b", "c", "d", "a"}); err != nil {
			t.Fatal(err)
		}
		// Every place left the queue: a new waiter is first at once.
		n, err := memstore.Open(f.backend).Enqueue(ctx, "invoice-42", "probe", time.Second)
		if err != nil || n != 0 {
			t.Fatalf("after every waiter got its turn, a new place has %d ahead (err %v), want 0", n, err)
		}
	})
}

// TestFairOrderCheckCatchesAJump is the negative control of the order
// check: a TryAcquire does not queue, so right after a release it takes
// the lock ahead of the queued waiter, and the same check fails.
func TestFairOrderCheckCatchesAJump(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture()
		ctx := context.Background()
		a := newLock(t, f.faulty(), "node-a", fair)
		first, err := a.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var got turns
		done := make(chan struct{})
		bStore := f.faulty()
		go func() {
			defer close(done)
			h, err := newLock(t, bStore, "node-b", fair).Acquire(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			got.add("b")
			h.Release(ctx)
		}()
		synctest.Wait() // b is queued, waiting for the release
		// b's next Acquire reaches the store a second later on the
		// bubble's clock, which cannot move while this goroutine runs:
		// without it b, woken by the release on another thread, could
		// take its turn before TryAcquire (CI saw it once).
		bStore.Inject(faultstore.Fault{Latency: time.Second}, faultstore.OpAcquire)
		if err := first.Release(ctx); err != nil {
			t.Fatal(err)
		}
		jumped, err := a.TryAcquire(ctx) // before b's attempt reaches the store
		if err != nil {
			t.Fatalf("TryAcquire right after the release: %v; want it to jump the queue", err)
		}
		got.add("a")
		jumped.Release(ctx)
		<-done
		if err := inArrivalOrder(got.get(), []string{"b", "a"}); err == nil {
			t.Fatal("the order check accepted a TryAcquire that jumped the queue")
		}
	})
}

// TestFairDeadWaiterPlaceExpires: a waiter that died in the queue holds up
// those behind it until its place expires (LeaseDuration after its last
// refresh on the store's clock), and no longer.
func TestFairDeadWaiterPlaceExpires(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture()
		ctx := context.Background()
		timings := leasehold.DefaultTimings()
		a := newLock(t, f.faulty(), "node-a", fair)
		held, err := a.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// The dead waiter: its place is written, then it is never refreshed.
		if _, err := memstore.Open(f.backend).Enqueue(ctx, "invoice-42", "dead", timings.LeaseDuration); err != nil {
			t.Fatal(err)
		}
		placed := time.Now()
		got := make(chan time.Time, 1)
		go func() {
			h, err := newLock(t, f.faulty(), "node-c", fair).Acquire(ctx)
			if err != nil {
				t.Error(err)
				close(got)
				return
			}
			got <- time.Now()
			h.Release(ctx)
		}()
		synctest.Wait()
		if err := held.Release(ctx); err != nil {
			t.Fatal(err)
		}
		at, ok := <-got
		if !ok {
			return
		}
		waited := at.Sub(placed)
		maxRetry := timings.RetryPeriod + time.Duration(timings.JitterFraction()*float64(timings.RetryPeriod))
		if waited < timings.LeaseDuration || waited > timings.LeaseDuration+maxRetry {
			t.Fatalf("the waiter behind a dead place acquired %v after that place was written; want between its expiry %v and one retry wait later (%v)",
				waited, timings.LeaseDuration, timings.LeaseDuration+maxRetry)
		}
	})
}

// TestFairElectorsLeadInArrivalOrder: candidates of a fair Elector lead in
// the order they queued, each after the previous leader's work returned.
func TestFairElectorsLeadInArrivalOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture()
		var got turns
		var wg sync.WaitGroup
		release := make(chan struct{})
		for _, who := range []string{"a", "b", "c"} {
			e := newElector(t, f.faulty(), "node-"+who, nil, fair)
			wg.Add(1)
			go func() {
				defer wg.Done()
				err := e.Run(context.Background(), func(ctx context.Context, l *leasehold.Lease) error {
					got.add(who)
					<-release
					return nil
				})
				if err != nil {
					t.Error(err)
				}
			}()
			synctest.Wait()
		}
		for range 3 {
			release <- struct{}{}
			synctest.Wait()
		}
		wg.Wait()
		if err := inArrivalOrder(got.get(), []string{"a", "b", "c"}); err != nil {
			t.Fatal(err)
		}
	})
}

// bare hides every optional capability of a store.
type bare struct{ store.Store }

func TestFairNeedsAQueue(t *testing.T) {
	for name, st := range map[string]store.Store{
		"store without Queuer":            bare{memstore.New()},
		"faultstore over a store without": faultstore.New(bare{memstore.New()}),
	} {
		_, err := leasehold.NewLock(st, "invoice-42", leasehold.Config{Identity: "node-a", Fair: true})
		if !errors.Is(err, leasehold.ErrInvalidConfig) {
			t.Errorf("%s: NewLock with Fair: %v, want ErrInvalidConfig", name, err)
		}
		_, err = leasehold.NewElector(st, "sweeper", leasehold.Config{Identity: "node-a", Fair: true})
		if !errors.Is(err, leasehold.ErrInvalidConfig) {
			t.Errorf("%s: NewElector with Fair: %v, want ErrInvalidConfig", name, err)
		}
	}
	// A wrapper does not hide the queue of the store it wraps.
	if _, err := leasehold.NewLock(faultstore.New(memstore.New()), "invoice-42", leasehold.Config{Identity: "node-a", Fair: true}); err != nil {
		t.Errorf("NewLock with Fair on a faultstore over memstore: %v", err)
	}
	if _, err := leasehold.NewSemaphore(memstore.New(), "pool", 2, leasehold.Config{Identity: "node-a", Fair: true}); !errors.Is(err, leasehold.ErrInvalidConfig) {
		t.Errorf("NewSemaphore with Fair: %v, want ErrInvalidConfig", err)
	}
}

// queueOnly is a store with a queue but no store.UnqueuedAcquirer (and no
// other optional capability): every fair acquisition writes a place.
type queueOnly struct {
	store.Store
	store.Queuer
}

func (f *fixture) queueOnly() *faultstore.Store {
	ms := memstore.Open(f.backend)
	return faultstore.New(queueOnly{ms, ms})
}

// TestFairGrantDoesNotWaitForTheQueue: a fair Lock's Acquire and a fair
// Elector's work start as soon as the store grants the term; the place
// leaves the queue meanwhile (here in one second, the store's latency for
// Dequeue alone), and the term is released only after the place has left,
// so a waiter woken by the release never finds the old holder's place
// ahead of it. The store has no store.UnqueuedAcquirer, so the grant comes
// through the queue even though nobody else waits. The control: a Lock
// whose Acquire is slowed the same way, which the same clock measures at
// one second.
func TestFairGrantDoesNotWaitForTheQueue(t *testing.T) {
	const slow = time.Second
	for _, kind := range []string{"Lock", "Elector", "control"} {
		t.Run(kind, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFixture()
				fs := f.queueOnly()
				op := faultstore.OpDequeue
				if kind == "control" {
					op = faultstore.OpAcquire
				}
				fs.Inject(faultstore.Fault{Latency: slow}, op)
				ctx := context.Background()
				start := time.Now()
				var granted, released time.Time
				switch kind {
				case "Lock", "control":
					l, err := leasehold.NewLock(fs, "invoice-42", leasehold.Config{Identity: "node-a", Fair: true})
					if err != nil {
						t.Fatal(err)
					}
					h, err := l.Acquire(ctx)
					if err != nil {
						t.Fatal(err)
					}
					granted = time.Now()
					if err := h.Release(ctx); err != nil {
						t.Fatal(err)
					}
					released = time.Now()
				case "Elector":
					e := newElector(t, fs, "node-a", nil, fair)
					err := e.Run(ctx, func(ctx context.Context, l *leasehold.Lease) error {
						granted = time.Now()
						return nil
					})
					if err != nil {
						t.Fatal(err)
					}
					released = time.Now()
				}
				if kind == "control" {
					if granted.Sub(start) != slow {
						t.Fatalf("control: a grant slowed by %v took %v", slow, granted.Sub(start))
					}
					return
				}
				if d := granted.Sub(start); d != 0 {
					t.Errorf("the term started %v after Acquire was called: it waited for the place to leave the queue", d)
				}
				if d := released.Sub(start); d < slow {
					t.Errorf("the term was released %v after Acquire was called, before its place left the queue (%v)", d, slow)
				}
				if n, err := memstore.Open(f.backend).Enqueue(ctx, "invoice-42", "probe", time.Second); err != nil || n != 0 {
					t.Errorf("after the release a new place has %d ahead (err %v), want 0", n, err)
				}
			})
		})
	}
}

// fairCycle runs one fair acquisition of kind ("Lock" or "Elector") on st
// and releases it.
func fairCycle(t *testing.T, st store.Store, kind string) {
	t.Helper()
	ctx := context.Background()
	switch kind {
	case "Lock":
		h, err := newLock(t, st, "node-a", fair).Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
	case "Elector":
		err := newElector(t, st, "node-a", nil, fair).Run(ctx, func(ctx context.Context, l *leasehold.Lease) error { return nil })
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestFairUncontendedWritesNoPlace: on a store with
// store.UnqueuedAcquirer, a fair acquisition of a lease that is free with
// nobody queued is one Acquire request, as without Fair: no place is
// written or removed. The control: the same cycle on a store without it
// writes and removes a place, and the same check fails.
func TestFairUncontendedWritesNoPlace(t *testing.T) {
	for _, kind := range []string{"Lock", "Elector", "control"} {
		t.Run(kind, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFixture()
				fs, control := f.faulty(), kind == "control"
				if control {
					fs, kind = f.queueOnly(), "Lock"
				}
				fairCycle(t, fs, kind)
				enq, deq, acq := fs.Calls(faultstore.OpEnqueue), fs.Calls(faultstore.OpDequeue), fs.Calls(faultstore.OpAcquire)
				wrote := enq != 0 || deq != 0
				if control {
					if !wrote {
						t.Fatalf("control: a store without UnqueuedAcquirer had %d Enqueue and %d Dequeue calls; the check cannot fail", enq, deq)
					}
					return
				}
				if wrote || acq != 1 {
					t.Fatalf("an uncontended fair %s cycle made %d Enqueue, %d Dequeue and %d Acquire calls, want 0, 0 and 1", kind, enq, deq, acq)
				}
			})
		})
	}
}

// TestFairContendedLockQueuesAtOnce: once a fair Lock has found its lease
// held, its next Acquire within LeaseDuration goes straight to the queue
// (a place written, one Acquire request), rather than first asking for the
// lease on the queue's being empty; a LeaseDuration later it asks that way
// again (no place written). The first half's control is the second half.
func TestFairContendedLockQueuesAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture()
		ctx := context.Background()
		fsA := f.faulty()
		a := newLock(t, fsA, "node-a", fair)
		held, err := newLock(t, f.faulty(), "node-b", fair).Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			h, err := a.Acquire(ctx) // found held: a waits in the queue
			if err == nil {
				err = h.Release(ctx)
			}
			done <- err
		}()
		synctest.Wait()
		if err := held.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		cycle := func() (enqueues, acquires int) {
			e0, a0 := fsA.Calls(faultstore.OpEnqueue), fsA.Calls(faultstore.OpAcquire)
			h, err := a.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := h.Release(ctx); err != nil {
				t.Fatal(err)
			}
			return fsA.Calls(faultstore.OpEnqueue) - e0, fsA.Calls(faultstore.OpAcquire) - a0
		}
		if e, n := cycle(); e != 1 || n != 1 {
			t.Errorf("right after a contended acquisition: %d Enqueue and %d Acquire calls, want 1 and 1 (queued at once)", e, n)
		}
		time.Sleep(leasehold.Timings{}.WithDefaults().LeaseDuration)
		if e, n := cycle(); e != 0 || n != 1 {
			t.Errorf("a LeaseDuration later: %d Enqueue and %d Acquire calls, want 0 and 1 (taken with the queue empty)", e, n)
		}
	})
}

// TestFairWaiterIsNoStoreError: a fair candidate told store.ErrQueued
// (others wait ahead of it; here answered unsent, as by a store that cannot
// check the queue in the grant's step) waits in the queue, and its Status
// shows no store error however long it waits: ErrQueued is an answer, not a
// failure. Before, it stayed LastError while the candidate waited, and
// `leasehold run`'s health called a third fair replica unable to reach its
// store one lease after it queued.
func TestFairWaiterIsNoStoreError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var queued atomic.Int32
		var electors []*leasehold.Elector
		for _, who := range []string{"a", "b", "c"} {
			e := newElector(t, f.queueOnly(), "node-"+who, &recorder{}, func(c *leasehold.Config) {
				c.Fair = true
				next := c.OnEvent
				c.OnEvent = func(ev leasehold.Event) {
					if ev.Kind == leasehold.EventAcquireAttempt && errors.Is(ev.Err, store.ErrQueued) {
						queued.Add(1)
					}
					next(ev)
				}
			})
			electors = append(electors, e)
			go e.Run(ctx, func(ctx context.Context, l *leasehold.Lease) error {
				<-ctx.Done()
				return nil
			})
			synctest.Wait()
		}
		time.Sleep(5 * leasehold.DefaultTimings().LeaseDuration)
		synctest.Wait()
		if queued.Load() == 0 {
			t.Fatal("no candidate was told ErrQueued: the test shows nothing")
		}
		if !electors[0].Status().Leading {
			t.Fatalf("node-a does not lead: %+v", electors[0].Status())
		}
		for i, e := range electors[1:] {
			if st := e.Status(); st.LastError != nil {
				t.Errorf("waiting candidate %d: LastError %v, want none", i+1, st.LastError)
			}
		}
	})
}

// metadataQueue is memstore with store.MetadataQueuer: it notes the
// metadata each Enqueue was called with.
type metadataQueue struct {
	*memstore.Store
	mu  sync.Mutex
	got []string
}

func (m *metadataQueue) EnqueueWithMetadata(ctx context.Context, name, holder string, ttl time.Duration, metadata string) (int, error) {
	m.mu.Lock()
	m.got = append(m.got, metadata)
	m.mu.Unlock()
	return m.Store.Enqueue(ctx, name, holder, ttl)
}

// TestFairPlaceCarriesMetadata: a fair waiter writes its place through
// store.MetadataQueuer when the store has it (ZooKeeper, whose place
// becomes the term with no write), with the Lock's metadata, also through
// a faultstore wrapped around it. The control: over a store wrapped so
// that the capability is hidden, the waiter queues with Enqueue and the
// metadata is not seen.
func TestFairPlaceCarriesMetadata(t *testing.T) {
	for _, kind := range []string{"store", "faultstore", "control"} {
		t.Run(kind, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := context.Background()
				ms := memstore.New()
				mq := &metadataQueue{Store: ms}
				var st store.Store = mq
				switch kind {
				case "faultstore":
					st = faultstore.New(mq)
				case "control":
					st = queueOnly{mq, mq}
				}
				held, err := newLock(t, ms, "node-b", fair).Acquire(ctx)
				if err != nil {
					t.Fatal(err)
				}
				a, err := leasehold.NewLock(st, "invoice-42", leasehold.Config{Identity: "node-a", Fair: true, Metadata: "host-a"})
				if err != nil {
					t.Fatal(err)
				}
				done := make(chan error, 1)
				go func() {
					h, err := a.Acquire(ctx)
					if err == nil {
						err = h.Release(ctx)
					}
					done <- err
				}()
				synctest.Wait()
				mq.mu.Lock()
				got := slices.Clone(mq.got)
				mq.mu.Unlock()
				if err := held.Release(ctx); err != nil {
					t.Fatal(err)
				}
				if err := <-done; err != nil {
					t.Fatal(err)
				}
				seen := len(got) > 0 && !slices.ContainsFunc(got, func(m string) bool { return m != "host-a" })
				if want := kind != "control"; seen != want {
					t.Fatalf("places written with metadata %q; want the Lock's metadata seen: %v", got, want)
				}
			})
		})
	}
}

// TestFairWaiterWhoseAcquiresFailYieldsItsTurn: a fair waiter first in the
// queue whose acquires fail (the store answers its queue but not its
// acquire: here every acquire of that node's handle fails; in a real
// fleet, a process too slow to trust its grants) must not keep its turn
// for ever, or the waiters behind it, who do not try while a place is
// ahead, never lead either. It goes to the back after each failed try, so
// the next waiter leads within a few retry periods of the lease falling
// free. The same when its one acquire was granted and the answer lost: it
// gives back the term it may hold before it goes to the back (without
// that, the next waiter leads only once that term expired: control by
// hand). The control is the same run with the node's acquires answered:
// it keeps its turn and leads first.
func TestFairWaiterWhoseAcquiresFailYieldsItsTurn(t *testing.T) {
	for _, tc := range []struct {
		name   string
		broken bool
		fault  faultstore.Fault
	}{
		{"broken=true", true, faultstore.Fault{Mode: faultstore.Fail}},
		// Its first acquire is granted and the answer lost: the term it
		// may hold is given back as it goes to the back, or c would wait
		// for that term to expire, a lease duration.
		{"lost-reply", true, faultstore.Fault{Mode: faultstore.LoseReply, Times: 1}},
		{"broken=false", false, faultstore.Fault{}},
	} {
		broken := tc.broken
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFixture()
				timings := leasehold.DefaultTimings()
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				var got turns
				var wg sync.WaitGroup
				release := make(chan struct{})
				var secondAt atomic.Int64 // when the second leader's work began, Unix ns
				elect := func(st store.Store, who string) {
					e := newElector(t, st, "node-"+who, nil, fair)
					wg.Add(1)
					go func() {
						defer wg.Done()
						e.Run(ctx, func(ctx context.Context, l *leasehold.Lease) error {
							got.add(who)
							if len(got.get()) == 2 {
								secondAt.Store(time.Now().UnixNano())
							}
							select {
							case <-release:
							case <-ctx.Done():
							}
							return nil
						})
					}()
					synctest.Wait()
				}
				elect(f.faulty(), "a") // leads
				bStore := f.faulty()
				if broken && tc.fault.Times == 0 {
					bStore.Inject(tc.fault, faultstore.OpAcquire)
				}
				elect(bStore, "b") // first in the queue
				elect(f.faulty(), "c")
				if tc.fault.Times > 0 {
					// b's next acquire is its try once the lease is free.
					bStore.Inject(tc.fault, faultstore.OpAcquire)
				}
				release <- struct{}{} // a's work returns: the lease falls free
				freed := time.Now()
				time.Sleep(10 * timings.LeaseDuration)
				synctest.Wait()
				order := got.get()
				want := []string{"a", "b"}
				if broken {
					want = []string{"a", "c"}
				}
				if !slices.Equal(order, want) {
					t.Fatalf("%v after the lease fell free, leaders in order %v, want %v", time.Since(freed), order, want)
				}
				maxRetry := timings.RetryPeriod + time.Duration(timings.JitterFraction()*float64(timings.RetryPeriod))
				if took := time.Unix(0, secondAt.Load()).Sub(freed); took > 2*maxRetry {
					t.Fatalf("the second leader began %v after the lease fell free, want within two retry waits (%v)", took, 2*maxRetry)
				}
				cancel()
				close(release)
				wg.Wait()
			})
		})
	}
}
