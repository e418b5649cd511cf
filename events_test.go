package leasehold

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/faultstore"
	"github.com/leasehold/leasehold/store/memstore"
)

// eventLog is an OnEvent that records every event and notices two calls
// running at once.
type eventLog struct {
	inflight   atomic.Int32
	overlapped atomic.Bool

	mu     sync.Mutex
	events []Event
}

func (l *eventLog) on(e Event) {
	if l.inflight.Add(1) != 1 {
		l.overlapped.Store(true)
	}
	// Give another call the chance to overlap this one, were one running.
	for range 3 {
		runtime.Gosched()
	}
	l.mu.Lock()
	l.events = append(l.events, e)
	l.mu.Unlock()
	l.inflight.Add(-1)
}

func (l *eventLog) all() []Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Event(nil), l.events...)
}

// checkTermOrder checks the order Event promises for each term (named by
// its token): EventAcquired first; then only EventRenewed and
// EventRenewFailed; then EventLost; then at most EventReleased; and nothing
// after that.
func checkTermOrder(events []Event) error {
	type state int
	const (
		none state = iota
		held
		lost
		released
	)
	terms := map[store.Term]state{}
	for i, e := range events {
		if e.Kind == EventAcquireAttempt || e.Kind == EventHolderObserved {
			continue // not yet a term
		}
		s := terms[e.Term]
		bad := func() error {
			kinds := make([]string, len(events))
			for j, e := range events {
				kinds[j] = fmt.Sprintf("%v %v", e.Kind, e.Term)
			}
			return fmt.Errorf("event %d (%v of %v) out of the term's order; events: %q", i, e.Kind, e.Term, kinds)
		}
		switch e.Kind {
		case EventAcquired:
			if s != none {
				return bad()
			}
			terms[e.Term] = held
		case EventRenewed, EventRenewFailed:
			if s != held {
				return bad()
			}
		case EventLost:
			if s != held {
				return bad()
			}
			terms[e.Term] = lost
		case EventReleased:
			// A release without a term: an attempt of unknown outcome given back.
			if s != lost && s != none {
				return bad()
			}
			terms[e.Term] = released
		}
	}
	return nil
}

// The checker itself: it must refuse each disorder it is meant to catch.
func TestCheckTermOrderRefusesDisorder(t *testing.T) {
	a := store.Term{Name: "x", Holder: "h", Token: 1}
	ev := func(k EventKind) Event { return Event{Kind: k, Name: "x", Term: a} }
	good := []Event{ev(EventAcquireAttempt), ev(EventAcquired), ev(EventRenewed), ev(EventRenewFailed), ev(EventLost), ev(EventReleased)}
	if err := checkTermOrder(good); err != nil {
		t.Fatalf("the order Event promises was refused: %v", err)
	}
	for name, bad := range map[string][]Event{
		"lost before acquired":    {ev(EventLost), ev(EventAcquired)},
		"renewed before acquired": {ev(EventRenewed), ev(EventAcquired), ev(EventLost)},
		"renewed after lost":      {ev(EventAcquired), ev(EventLost), ev(EventRenewed)},
		"released before lost":    {ev(EventAcquired), ev(EventReleased), ev(EventLost)},
		"acquired twice":          {ev(EventAcquired), ev(EventAcquired)},
		"anything after released": {ev(EventAcquired), ev(EventLost), ev(EventReleased), ev(EventLost)},
	} {
		if err := checkTermOrder(bad); err == nil {
			t.Errorf("%s: not refused", name)
		}
	}
}

// cancelOnGrant cancels a context the moment the store grants a term: the
// term then ends as it begins, the race in which an Elector once reported
// EventLost (from the term's loop) before EventAcquired (from Run).
type cancelOnGrant struct {
	store.Store
	cancel context.CancelFunc
}

func (s cancelOnGrant) Acquire(ctx context.Context, name, holder string, ttl time.Duration, metadata string) (store.Record, error) {
	rec, err := s.Store.Acquire(ctx, name, holder, ttl, metadata)
	if err == nil {
		s.cancel()
	}
	return rec, err
}

// Events come one at a time and in each term's order, even when a term ends
// the instant it begins, and Run returns only once OnEvent has had them all.
func TestEventsOfAnElectorInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := memstore.New()
		for i := range 200 {
			log := &eventLog{}
			ctx, cancel := context.WithCancel(context.Background())
			e, err := NewElector(cancelOnGrant{st, cancel}, "job", Config{Identity: "a", OnEvent: log.on})
			if err != nil {
				t.Fatal(err)
			}
			err = e.Run(ctx, func(ctx context.Context, _ *Lease) error { <-ctx.Done(); return nil })
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("run %d: Run = %v, want context.Canceled", i, err)
			}
			got := log.all()
			if err := checkTermOrder(got); err != nil {
				t.Fatalf("run %d: %v", i, err)
			}
			if log.overlapped.Load() {
				t.Fatalf("run %d: OnEvent ran twice at once", i)
			}
			kinds := make([]EventKind, len(got))
			for j, e := range got {
				kinds[j] = e.Kind
			}
			want := []EventKind{EventAcquireAttempt, EventAcquired, EventLost, EventReleased}
			if fmt.Sprint(kinds) != fmt.Sprint(want) {
				t.Fatalf("run %d: events %v when Run returned, want %v", i, kinds, want)
			}
		}
	})
}

// A Keeper closed while leases are being added: every term's events in
// order, never two OnEvent calls at once.
func TestEventsOfAKeeperInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		terms := 0
		for round := range 20 {
			log := &eventLog{}
			k, err := NewKeeper(memstore.New(), Config{Identity: "a", OnEvent: log.on})
			if err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			keep := func(i int) {
				wg.Go(func() {
					if l, err := k.TryAcquire(context.Background(), fmt.Sprintf("shard/%d", i)); err == nil {
						defer l.Release(context.Background())
						<-l.Context().Done()
					}
				})
			}
			// Ten leases held, then ten more acquired while the Keeper closes.
			for i := range 10 {
				keep(i)
			}
			synctest.Wait()
			for i := range 10 {
				keep(10 + i)
			}
			k.Close()
			wg.Wait()
			k.hold.events.flush()
			got := log.all()
			if err := checkTermOrder(got); err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
			if log.overlapped.Load() {
				t.Fatalf("round %d: OnEvent ran twice at once", round)
			}
			for _, e := range got {
				if e.Kind == EventAcquired {
					terms++
				}
			}
		}
		if terms < 200 {
			t.Fatalf("%d terms over 20 rounds, want at least the 10 held before each Close", terms)
		}
		t.Logf("%d terms over 20 rounds", terms)
	})
}

// An OnEvent that blocks never holds up the lease: the term's context is
// still cancelled exactly at safeUntil. The negative control hands the same
// blocking function the events synchronously, from the goroutine that keeps
// the lease (as events were delivered before they were queued): that
// goroutine then stalls, and the context is not cancelled at all while the
// function blocks.
func TestBlockedOnEventDoesNotDelayCancel(t *testing.T) {
	for _, c := range []struct {
		name string
		sync bool // negative control
	}{{"queued", false}, {"synchronous (negative control)", true}} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				st := faultstore.New(memstore.New())
				unblock := make(chan struct{})
				var blocked atomic.Int32
				block := func(e Event) {
					if e.Kind == EventRenewed {
						blocked.Add(1)
						<-unblock
					}
				}
				cfg := Config{Identity: "a"}
				if !c.sync {
					cfg.OnEvent = block
				}
				e, err := NewElector(st, "job", cfg)
				if err != nil {
					t.Fatal(err)
				}
				if c.sync {
					e.hold.observe = func(ev Event) { e.observe(ev); block(ev) }
				}
				start := time.Now()
				cancelled := make(chan time.Time, 1)
				ctx, stop := context.WithCancel(context.Background())
				done := make(chan error, 1)
				go func() {
					done <- e.Run(ctx, func(ctx context.Context, _ *Lease) error {
						<-ctx.Done()
						cancelled <- time.Now()
						return nil
					})
				}()
				// The renewal sent at +5s succeeds; then the store hangs.
				time.Sleep(6 * time.Second)
				st.Partition()
				time.Sleep(54 * time.Second)
				synctest.Wait()
				if n := blocked.Load(); n != 1 {
					t.Fatalf("OnEvent blocked %d times, want once (on the first renewal)", n)
				}
				select {
				case at := <-cancelled:
					if c.sync {
						t.Fatalf("negative control: the context was cancelled at +%v although the lease's goroutine was blocked in OnEvent; the test cannot tell a blocking delivery from a queued one", at.Sub(start))
					}
					if d := at.Sub(start); d != 15*time.Second {
						t.Fatalf("context cancelled at +%v, want exactly +15s (renewal sent at +5s + renewDeadline)", d)
					}
				default:
					if !c.sync {
						t.Fatalf("context not cancelled by +60s: a blocked OnEvent held up the lease")
					}
				}
				close(unblock)
				stop()
				<-done
			})
		})
	}
}

// The queue's flush gives events itself while no goroutine is giving them:
// with adders and flushers racing, fn still runs one call at a time, each
// adder's events come in its order, and a flush returns only once every
// event added before it was given.
func TestEventQueueFlushRaces(t *testing.T) {
	const adders, each = 8, 500
	var running atomic.Int32
	var overlapped atomic.Bool
	last := make([]int, adders) // written by fn only, one call at a time
	var disorder atomic.Bool
	q := newEventQueue(func(e Event) {
		if running.Add(1) != 1 {
			overlapped.Store(true)
		}
		a, i := int(e.Latency), int(e.Term.Token)
		if i != last[a]+1 {
			disorder.Store(true)
		}
		last[a] = i
		running.Add(-1)
	})
	var wg sync.WaitGroup
	var early atomic.Bool
	for a := range adders {
		wg.Go(func() {
			for i := 1; i <= each; i++ {
				q.add(Event{Latency: time.Duration(a), Term: store.Term{Token: int64(i)}})
				if i%3 == 0 {
					q.flush()
					if last[a] != i { // all of a's events were given: no fn call writes last[a] now
						early.Store(true)
					}
				}
			}
		})
	}
	wg.Wait()
	q.flush()
	if overlapped.Load() {
		t.Fatal("fn ran twice at once")
	}
	if disorder.Load() {
		t.Fatal("an adder's events came out of order")
	}
	if early.Load() {
		t.Fatal("a flush returned before its caller's events were given")
	}
	for a := range adders {
		if last[a] != each {
			t.Fatalf("adder %d: last event given %d, want %d", a, last[a], each)
		}
	}
}

// A Lock's Acquire and Release return only once OnEvent has had the
// events they reported: the term's EventAcquired and, for a term without
// KeepAlive (ended by Release on its caller's goroutine), EventLost and
// EventReleased, which are queued without a goroutine and given by the
// flush (with that flush left out, neither comes before Release returns).
func TestLockGivesEventsBeforeReturning(t *testing.T) {
	for _, keepAlive := range []bool{false, true} {
		t.Run(fmt.Sprint("keepalive=", keepAlive), func(t *testing.T) {
			log := &eventLog{}
			lk, err := NewLock(memstore.New(), "job", Config{Identity: "a", KeepAlive: keepAlive, OnEvent: log.on})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			for i := range 3 {
				l, err := lk.Acquire(ctx)
				if err != nil {
					t.Fatal(err)
				}
				got := log.all()
				if n := len(got); n != 4*i+2 || got[n-2].Kind != EventAcquireAttempt || got[n-1].Kind != EventAcquired {
					t.Fatalf("cycle %d: after Acquire returned OnEvent had %v, want it to end with acquire-attempt, acquired", i, kinds(got))
				}
				if err := l.Release(ctx); err != nil {
					t.Fatal(err)
				}
				got = log.all()
				if n := len(got); n != 4*i+4 || got[n-2].Kind != EventLost || got[n-1].Kind != EventReleased {
					t.Fatalf("cycle %d: after Release returned OnEvent had %v, want it to end with lost, released", i, kinds(got))
				}
			}
			if err := checkTermOrder(log.all()); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func kinds(es []Event) []EventKind {
	out := make([]EventKind, len(es))
	for i, e := range es {
		out[i] = e.Kind
	}
	return out
}

// An uncontended Lock cycle (no KeepAlive) starts no goroutine to give its
// events: Acquire's flush gives the granted attempt's EventAcquireAttempt
// and EventAcquired, Release's flush EventLost and EventReleased, each on
// its caller's goroutine. A goroutine per event cost a loaded 2-core
// machine about a tenth of a Redis cycle's client CPU (BenchmarkCycleCPU in
// store/redis). A refused attempt is still given at once (Acquire then
// waits), which TestLockGivesEventsBeforeReturning's neighbours cover.
func TestLockCycleGivesEventsOnItsCaller(t *testing.T) {
	var mu sync.Mutex
	offCaller := map[EventKind]int{}
	onEvent := func(e Event) {
		buf := make([]byte, 8<<10)
		stack := string(buf[:runtime.Stack(buf, false)])
		if !strings.Contains(stack, "(*Lock).Acquire") && !strings.Contains(stack, "(*Lock).TryAcquire") && !strings.Contains(stack, "(*Lease).Release") {
			mu.Lock()
			offCaller[e.Kind]++
			mu.Unlock()
		}
	}
	lk, err := NewLock(memstore.New(), "job", Config{Identity: "a", OnEvent: onEvent})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const cycles = 1000
	for i := range cycles {
		acquire := lk.Acquire
		if i%2 == 1 {
			acquire = lk.TryAcquire
		}
		l, err := acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(offCaller) > 0 {
		t.Fatalf("over %d cycles, events given on another goroutine than Acquire's or Release's: %v", cycles, offCaller)
	}
}

// TestOutcomeOf: every reader of events classifies answers alike, wrapped
// errors included; only OutcomeUnknown is a store error, and a queued
// answer is no contact (it may have been answered unsent).
func TestOutcomeOf(t *testing.T) {
	cases := []struct {
		err      error
		want     Outcome
		definite bool
		answered bool
	}{
		{nil, OutcomeApplied, true, true},
		{store.ErrHeld, OutcomeHeld, true, true},
		{fmt.Errorf("acquire %q: %w", "job", store.ErrHeld), OutcomeHeld, true, true},
		{fmt.Errorf("fair: %w", store.ErrQueued), OutcomeQueued, true, false},
		{fmt.Errorf("renew: %w", store.ErrNotHeld), OutcomeNotHeld, true, true},
		{context.DeadlineExceeded, OutcomeUnknown, false, false},
		{errors.New("connection reset by peer"), OutcomeUnknown, false, false},
		{store.ErrInvalid, OutcomeUnknown, false, false},
	}
	for _, c := range cases {
		o := OutcomeOf(c.err)
		if o != c.want || o.Definite() != c.definite || o.Answered() != c.answered {
			t.Errorf("OutcomeOf(%v) = %v (definite %v, answered %v); want %v (definite %v, answered %v)",
				c.err, o, o.Definite(), o.Answered(), c.want, c.definite, c.answered)
		}
	}
	var zero Outcome
	if zero.Definite() || zero.Answered() || zero.String() != "invalid" {
		t.Errorf("the zero Outcome: definite %v, answered %v, %q; want neither, \"invalid\"", zero.Definite(), zero.Answered(), zero)
	}
	for o, name := range outcomeNames {
		if o.String() != name {
			t.Errorf("%d.String() = %q, want %q", o, o.String(), name)
		}
	}
}
