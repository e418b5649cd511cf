package storetest

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store"
)

// testTransfer checks store.Transferer: one write ends exactly the live term
// and reserves the lease for the successor, whose own Acquire replaces the
// reservation, while everyone else is refused until it expires.
func testTransfer(s *suite) {
	st := s.store()
	tr, ok := st.(store.Transferer)
	if !ok {
		s.t.Skip("store has no Transferer capability; a hand-over releases and any waiter may win")
	}
	other := s.store()
	long := s.longTTL()
	a := s.acquire(st, "job", "node-a", long)

	// Bad input changes nothing.
	for _, bad := range []struct {
		t    store.Term
		to   string
		ttl  time.Duration
		what string
	}{
		{a.Term, "node-a", long, "successor is the holder"},
		{a.Term, "", long, "empty successor"},
		{a.Term, "node-b", 0, "zero ttl"},
		{store.Term{Name: "job", Holder: "node-a"}, "node-b", long, "token 0"},
	} {
		if _, err := tr.Transfer(s.ctx(), bad.t, bad.to, bad.ttl, ""); !errors.Is(err, store.ErrInvalid) {
			s.t.Errorf("Transfer with %s: err = %v, want ErrInvalid", bad.what, err)
		}
	}
	// A stale term (wrong token) changes nothing.
	stale := a.Term
	stale.Token++
	if _, err := tr.Transfer(s.ctx(), stale, "node-b", long, ""); !errors.Is(err, store.ErrNotHeld) {
		s.t.Fatalf("Transfer of a term that is not live: err = %v, want ErrNotHeld", err)
	}
	if g, err := st.Get(s.ctx(), "job"); err != nil || g.Term != a.Term || !g.Live() {
		s.t.Fatalf("after refused Transfers the record is %+v, %v; want %v unchanged", g, err, a.Term)
	}

	res, err := tr.Transfer(s.ctx(), a.Term, "node-b", long, "reserved")
	if err != nil {
		s.t.Fatalf("Transfer: %v", err)
	}
	if res.Holder != "node-b" || res.Token <= a.Token || res.Metadata != "reserved" || !res.Live() || res.Remaining > long {
		s.t.Fatalf("Transfer = %+v, want node-b's live reservation above token %d with its metadata", res, a.Token)
	}
	// The old term has ended.
	if _, err := st.Renew(s.ctx(), a.Term, long); !errors.Is(err, store.ErrNotHeld) {
		s.t.Errorf("Renew of the transferred term: err = %v, want ErrNotHeld", err)
	}
	if err := st.Release(s.ctx(), a.Term); !errors.Is(err, store.ErrNotHeld) {
		s.t.Errorf("Release of the transferred term: err = %v, want ErrNotHeld", err)
	}
	// Nobody else, the old holder included, gets the reservation.
	for _, h := range []string{"node-c", "node-a"} {
		rec, err := other.Acquire(s.ctx(), "job", h, long, "")
		if !errors.Is(err, store.ErrHeld) || rec.Term != res.Term {
			s.t.Fatalf("%s's Acquire during the reservation = %+v, %v; want ErrHeld with %v", h, rec, err, res.Term)
		}
	}
	// The successor's Acquire replaces it with a term of its own.
	b := s.acquire(other, "job", "node-b", long)
	if b.Token <= res.Token {
		s.t.Fatalf("successor's term %v is not above the reservation %v", b.Term, res.Term)
	}
	if err := st.Release(s.ctx(), res.Term); !errors.Is(err, store.ErrNotHeld) {
		s.t.Errorf("Release of the replaced reservation: err = %v, want ErrNotHeld", err)
	}

	// A reservation nobody takes expires on the store's clock, and then
	// anyone may acquire, with a higher token.
	r2, err := tr.Transfer(s.ctx(), b.Term, "node-ghost", s.h.MinTTL, "")
	if err != nil {
		s.t.Fatalf("Transfer to a successor that never comes: %v", err)
	}
	s.waitExpired(st, "job")
	c := s.acquire(st, "job", "node-c", long) // the handle that saw it expire (Kubernetes judges per handle)
	if c.Token <= r2.Token {
		s.t.Fatalf("term after the expired reservation %v is not above it %v", c.Term, r2.Term)
	}
}

// testHandover runs the core's hand-over (leasehold.Handover and three
// Electors) on the store: the holder's work is asked to stop, its term ends
// after the work returned, and a later term takes over, well within a lease
// duration. On a store.Transferer the named successor is the one, and the
// other waiting node does not take the lease; without one, any waiter may.
func testHandover(s *suite) {
	lease := 6 * time.Second
	if d := 20 * s.h.MinTTL; d > lease {
		lease = d
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*lease)
	defer cancel()
	type term struct {
		who       string
		token     int64
		cause     error
		stopped   time.Time
		returned  time.Time
		startedAt time.Time
	}
	var mu sync.Mutex
	var terms []term
	work := func(who string) leasehold.WorkFunc {
		return func(wctx context.Context, l *leasehold.Lease) error {
			started := time.Now()
			<-wctx.Done()
			stopped := time.Now()
			time.Sleep(50 * time.Millisecond) // work that takes a moment to drain
			mu.Lock()
			terms = append(terms, term{who: who, token: l.Token(), cause: context.Cause(wctx), stopped: stopped, returned: time.Now(), startedAt: started})
			mu.Unlock()
			return nil
		}
	}
	elector := func(id string) *leasehold.Elector {
		e, err := leasehold.NewElector(s.store(), "job", leasehold.Config{Identity: id, Timings: leasehold.Timings{LeaseDuration: lease}})
		if err != nil {
			s.t.Fatalf("NewElector: %v", err)
		}
		return e
	}
	a, b, c := elector("node-a"), elector("node-b"), elector("node-c")
	var wg sync.WaitGroup
	runCtx, stopAll := context.WithCancel(ctx)
	defer func() { stopAll(); wg.Wait() }()
	start := func(e *leasehold.Elector, who string) {
		wg.Add(1)
		go func() { defer wg.Done(); e.Run(runCtx, work(who)) }()
	}
	start(a, "a")
	st := s.store()
	first := s.pollRecord(st, "job", lease, func(r store.Record) bool { return r.Live() })
	if first.Holder != a.Identity() {
		s.t.Fatalf("the first node did not lead: %+v", first)
	}
	start(b, "b")
	start(c, "c")
	// Let both standbys see the holder (and subscribe to its watch).
	s.pollStatus(lease, func() bool { return b.Status().Contending && c.Status().Contending })

	asked := time.Now()
	res, err := leasehold.Handover(ctx, st, "job", leasehold.HandoverOptions{To: b.Identity(), PreferFor: lease / 2, Timeout: lease})
	if err != nil {
		s.t.Fatalf("Handover: %v", err)
	}
	_, transfers := st.(store.Transferer)
	if transfers && (!res.TookOver || res.Next.Holder != b.Identity()) {
		s.t.Fatalf("Handover = %+v: on a Transferer the named successor %s must take over", res, b.Identity())
	}
	if res.TookOverAfter >= lease || res.Ended >= lease {
		s.t.Errorf("Handover = %+v: took a lease duration (%v) or more", res, lease)
	}
	after := s.pollRecord(st, "job", lease, func(r store.Record) bool { return r.Live() && !leasehold.IsReservation(r) })
	if after.Holder == a.Identity() || after.Token <= first.Token {
		s.t.Fatalf("after the hand-over %+v holds the lease; want another node with a token above %d", after.Term, first.Token)
	}
	if transfers {
		// Hold on past the reservation: node-c must not take it over.
		timer := time.NewTimer(lease / 2) // the other standby's only chance to misbehave
		<-timer.C
		if g, err := st.Get(s.ctx(), "job"); err != nil || g.Term != after.Term {
			s.t.Fatalf("after the preference window %+v, %v holds the lease; want %v still", g.Term, err, after.Term)
		}
	}
	stopAll()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	var ta *term
	for i := range terms {
		if terms[i].who == "a" && terms[i].token == first.Token {
			ta = &terms[i]
		}
		if terms[i].who == "c" && transfers {
			s.t.Errorf("node-c led although node-b was named: %+v", terms[i])
		}
	}
	if ta == nil || !errors.Is(ta.cause, leasehold.ErrHandedOver) {
		s.t.Fatalf("node-a's term: %+v, want it ended with ErrHandedOver", ta)
	}
	if ta.stopped.Before(asked) {
		s.t.Errorf("node-a stopped before the request")
	}
	for _, tm := range terms {
		if tm.token > first.Token && tm.startedAt.Before(ta.returned) {
			s.t.Errorf("term %d of %s started before node-a's work returned", tm.token, tm.who)
		}
	}
}

// pollRecord polls Get until ok holds, for at most limit.
func (s *suite) pollRecord(st store.Store, name string, limit time.Duration, ok func(store.Record) bool) store.Record {
	s.t.Helper()
	deadline := time.Now().Add(limit)
	for {
		rec, err := st.Get(s.ctx(), name)
		if err == nil && ok(rec) {
			return rec
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("Get(%q) = %+v, %v: the awaited state did not come within %v", name, rec, err, limit)
		}
		timer := time.NewTimer(20 * time.Millisecond)
		<-timer.C
	}
}

// pollStatus polls ok every few milliseconds, for at most limit.
func (s *suite) pollStatus(limit time.Duration, ok func() bool) {
	s.t.Helper()
	deadline := time.Now().Add(limit)
	for !ok() {
		if time.Now().After(deadline) {
			s.t.Fatalf("the awaited state did not come within %v", limit)
		}
		timer := time.NewTimer(10 * time.Millisecond)
		<-timer.C
	}
}
