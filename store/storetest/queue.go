package storetest

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/leasehold/leasehold/store"
)

// queuer returns a handle's store.Queuer, or skips the subtest.
func (s *suite) queuer() store.Queuer {
	s.t.Helper()
	q, ok := store.AsQueuer(s.store())
	if !ok {
		s.t.Skip("store has no Queuer capability: a fair Lock or Elector is refused on it")
	}
	return q
}

// holdForQueue, for a store whose lowest place holds (Harness.
// LowestPlaceHolds), takes name with a term of a holder that never queues,
// so that the places queued after it rank behind a term, as on every
// store; elsewhere it does nothing.
func (s *suite) holdForQueue(name string) {
	s.t.Helper()
	if s.h.LowestPlaceHolds {
		s.acquire(s.store(), name, "queue-holder", s.longTTL())
	}
}

// enqueue calls Enqueue and fails the test on error.
func (s *suite) enqueue(q store.Queuer, name, holder string, ttl time.Duration) int {
	s.t.Helper()
	n, err := q.Enqueue(s.ctx(), name, holder, ttl)
	if err != nil {
		s.t.Fatalf("Enqueue(%q, %q): %v", name, holder, err)
	}
	return n
}

// checkTotalOrder is the check of testQueueFIFO: the places ahead of k
// waiters that raced to queue are exactly 0..k-1, each once.
func checkTotalOrder(ahead map[string]int) error {
	seen := make([]string, len(ahead))
	for who, n := range ahead {
		if n < 0 || n >= len(ahead) || seen[n] != "" {
			return fmt.Errorf("places ahead %v: want each of 0..%d exactly once", ahead, len(ahead)-1)
		}
		seen[n] = who
	}
	return nil
}

// testQueueFIFO: waiters that race to queue on several handles get one
// place each in a total order; a refresh keeps a place; a later waiter
// queues behind all of them; and when a place leaves, every place behind it
// moves up by one, in the same order: first come, first served.
func testQueueFIFO(s *suite) {
	s.queuer()
	ttl := s.longTTL()
	s.holdForQueue("job")
	k := s.h.Handles
	qs := make([]store.Queuer, k)
	for i := range qs {
		qs[i], _ = store.AsQueuer(s.store())
	}
	ahead := map[string]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i, q := range qs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			who := fmt.Sprintf("node-%d", i)
			n, err := q.Enqueue(s.ctx(), "job", who, ttl)
			if err != nil {
				s.t.Errorf("Enqueue(%q): %v", who, err)
				return
			}
			mu.Lock()
			ahead[who] = n
			mu.Unlock()
		}()
	}
	wg.Wait()
	if s.t.Failed() {
		return
	}
	if err := checkTotalOrder(ahead); err != nil {
		s.t.Fatal(err)
	}
	// The negative control of the check: two waiters told they are first.
	if checkTotalOrder(map[string]int{"x": 0, "y": 0}) == nil {
		s.t.Fatal("checkTotalOrder accepted two waiters first")
	}
	for who, n := range ahead {
		if again := s.enqueue(qs[0], "job", who, ttl); again != n {
			s.t.Fatalf("refreshing %s's place moved it from %d to %d ahead", who, n, again)
		}
	}
	if n := s.enqueue(qs[0], "job", "late", ttl); n != k {
		s.t.Fatalf("a waiter that came after %d others has %d ahead, want %d", k, n, k)
	}
	if n := s.enqueue(qs[0], "other-job", "late", ttl); n != 0 {
		s.t.Fatalf("the only waiter on another name has %d ahead, want 0", n)
	}
	if s.h.LowestPlaceHolds {
		// On a free lease the lowest place holds: the waiter behind it is
		// first, and the one after that has one ahead.
		for i, who := range []string{"later", "last"} {
			if n := s.enqueue(qs[0], "other-job", who, ttl); n != i {
				s.t.Fatalf("on a free lease whose lowest place holds, %s has %d ahead, want %d", who, n, i)
			}
		}
	}
	order := make([]string, k)
	for who, n := range ahead {
		order[n] = who
	}
	// The first leaves (it took the lease); then one from the middle (it
	// gave up). The rest move up and keep their order.
	leave := []string{order[0]}
	if k > 2 {
		leave = append(leave, order[k/2])
	}
	for _, who := range leave {
		if err := qs[1].Dequeue(s.ctx(), "job", who); err != nil {
			s.t.Fatalf("Dequeue(%q): %v", who, err)
		}
		order = slices.DeleteFunc(order, func(o string) bool { return o == who })
	}
	for i, who := range append(order, "late") {
		if n := s.enqueue(qs[2%k], "job", who, ttl); n != i {
			s.t.Fatalf("after %v left, %s has %d ahead, want %d (order %v)", leave, who, n, i, order)
		}
	}
	// Dequeue is idempotent.
	if err := qs[0].Dequeue(s.ctx(), "job", leave[0]); err != nil {
		s.t.Fatalf("Dequeue of a place already gone: %v, want nil", err)
	}
	if err := qs[0].Dequeue(s.ctx(), "never-queued", "node-0"); err != nil {
		s.t.Fatalf("Dequeue on a name never queued: %v, want nil", err)
	}
}

// testQueueDeadPlaceExpires: a place that is not refreshed expires after
// its ttl on the store's clock, and the waiter behind it becomes first; a
// place refreshed within its ttl stays.
func testQueueDeadPlaceExpires(s *suite) {
	q := s.queuer()
	ttl := s.h.MinTTL
	if s.h.QueueTTL > ttl {
		ttl = s.h.QueueTTL
	}
	deadQ := q
	var deadStore store.Store
	if s.h.QueueSessionBound {
		deadStore = s.store()
		deadQ, _ = store.AsQueuer(deadStore)
	}
	// The dead place cannot expire before sent + ttl: the store's clock
	// read it after it was sent. (Timed from when it was sent, not from
	// when the calls returned: on a loaded machine a store whose Enqueue
	// is a few round trips may return long after it wrote the place.)
	s.holdForQueue("job")
	sent := time.Now()
	s.enqueue(deadQ, "job", "dead", ttl)
	if n := s.enqueue(q, "job", "alive", s.longTTL()); n != 1 {
		s.t.Fatalf("the waiter behind a live place has %d ahead, want 1", n)
	}
	if deadStore != nil {
		// The dead waiter's process ends: its session, and so its place, with it.
		deadStore.Close()
	}
	deadline := time.Now().Add(20*ttl + 10*time.Second)
	start := time.Now()
	for {
		n := s.enqueue(q, "job", "alive", s.longTTL())
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("a place with ttl %v still ahead %v later", ttl, time.Since(start))
		}
		timer := time.NewTimer(ttl / 10)
		<-timer.C
	}
	if waited := time.Since(sent); waited < ttl-ttl/10 && !s.h.QueueSessionBound {
		// A tenth of slack for the store's resolution (milliseconds) and
		// for its clock's rate against this one.
		s.t.Fatalf("a place with ttl %v expired %v after it was sent", ttl, waited)
	}
	// A place refreshed within its ttl does not expire.
	if s.h.QueueSessionBound {
		return // a place lives as long as its session, refreshed or not
	}
	s.enqueue(q, "job", "kept", ttl)
	for range 4 {
		timer := time.NewTimer(ttl / 3)
		<-timer.C
		if n := s.enqueue(q, "job", "kept", ttl); n != 1 {
			s.t.Fatalf("a place refreshed every ttl/3 has %d ahead, want 1 (behind alive)", n)
		}
	}
}

// testQueueWatch: a store that is a Watcher wakes the watchers of a name
// when a place of its queue leaves, at least on the handle through which
// the place behind it queued, so the next waiter moves up at once.
func testQueueWatch(s *suite) {
	q := s.queuer()
	st := s.store() // the waiter's handle: it queues and watches through it
	w, ok := st.(store.Watcher)
	if !ok {
		s.t.Skip("store has no Watcher capability; fair waiters poll the queue")
	}
	wq, _ := store.AsQueuer(st)
	ttl := s.longTTL()
	s.enqueue(q, "job", "first", ttl)
	s.enqueue(wq, "job", "second", ttl)
	ch, err := w.Watch(s.ctx(), "job")
	if err != nil {
		s.t.Fatalf("Watch: %v", err)
	}
	drain(ch)
	if err := q.Dequeue(s.ctx(), "job", "first"); err != nil {
		s.t.Fatalf("Dequeue: %v", err)
	}
	expectWake(s.t, ch, "the place ahead left the queue")
}

// testQueueInvalid: bad arguments get ErrInvalid.
func testQueueInvalid(s *suite) {
	q := s.queuer()
	for _, c := range []struct {
		what, name, holder string
		ttl                time.Duration
	}{
		{"empty name", "", "node-a", time.Minute},
		{"bad name", "/job", "node-a", time.Minute},
		{"empty holder", "job", "", time.Minute},
		{"zero ttl", "job", "node-a", 0},
	} {
		if _, err := q.Enqueue(s.ctx(), c.name, c.holder, c.ttl); !errors.Is(err, store.ErrInvalid) {
			s.t.Errorf("Enqueue with %s: %v, want ErrInvalid", c.what, err)
		}
		if c.ttl == 0 {
			continue
		}
		if err := q.Dequeue(s.ctx(), c.name, c.holder); !errors.Is(err, store.ErrInvalid) {
			s.t.Errorf("Dequeue with %s: %v, want ErrInvalid", c.what, err)
		}
	}
}

// testQueueAcquireUnqueued: a store with store.UnqueuedAcquirer grants a
// lease that is free and has nobody queued as Acquire does; answers
// ErrHeld, with the live term, while another holds it; refuses with
// ErrQueued while a place is queued (written through another handle),
// granting and changing nothing: Get shows what it showed before the call;
// grants again, with a higher token, once the place has left; and refuses
// a name never granted that has a place queued.
// A handle that answers ErrQueued even with nobody queued (it cannot check
// the queue, which the contract allows) is skipped once shown to have
// granted nothing.
func testQueueAcquireUnqueued(s *suite) {
	q := s.queuer()
	u, ok := s.store().(store.UnqueuedAcquirer)
	if !ok {
		s.t.Skip("store has no UnqueuedAcquirer capability: every fair acquisition writes a place")
	}
	ctx, ttl := s.ctx(), s.longTTL()
	first, err := u.AcquireUnqueued(ctx, "job", "node-a", ttl, "meta")
	if errors.Is(err, store.ErrQueued) {
		if rec, gerr := s.store().Get(ctx, "job"); !errors.Is(gerr, store.ErrNotFound) {
			s.t.Fatalf("AcquireUnqueued answered %v, and then Get found %+v, %v; want nothing granted (ErrNotFound)", err, rec, gerr)
		}
		s.t.Skipf("this handle answers ErrQueued with nobody queued (the contract allows it of a store that cannot check the queue): %v", err)
	}
	if err != nil {
		s.t.Fatalf("AcquireUnqueued of a free lease with nobody queued: %v", err)
	}
	if first.Holder != "node-a" || first.Token <= 0 || first.Metadata != "meta" {
		s.t.Fatalf("AcquireUnqueued granted %+v, want node-a's term with metadata %q and a token above 0", first, "meta")
	}
	held, err := u.AcquireUnqueued(ctx, "job", "node-b", ttl, "")
	if !errors.Is(err, store.ErrHeld) || held.Holder != "node-a" || held.Token != first.Token {
		s.t.Fatalf("AcquireUnqueued of a held lease: %+v, %v; want ErrHeld with node-a's term (token %d)", held, err, first.Token)
	}
	if err := s.store().Release(ctx, first.Term); err != nil {
		s.t.Fatalf("Release: %v", err)
	}
	s.enqueue(q, "job", "waiter", ttl)
	before, err := s.store().Get(ctx, "job")
	if err != nil {
		s.t.Fatalf("Get: %v", err)
	}
	if rec, err := u.AcquireUnqueued(ctx, "job", "node-b", ttl, ""); !errors.Is(err, store.ErrQueued) {
		s.t.Fatalf("AcquireUnqueued with a place queued: %+v, %v; want ErrQueued", rec, err)
	}
	after, err := s.store().Get(ctx, "job")
	if err != nil {
		s.t.Fatalf("Get: %v", err)
	}
	if after.Holder != before.Holder || after.Token != before.Token || after.Live() != before.Live() {
		s.t.Fatalf("after AcquireUnqueued was refused with a place queued, Get shows %+v; want it as before the call, %+v (free on most stores; etcd shows its lowest place as the holder)", after, before)
	}
	if err := q.Dequeue(ctx, "job", "waiter"); err != nil {
		s.t.Fatalf("Dequeue: %v", err)
	}
	next, err := u.AcquireUnqueued(ctx, "job", "node-b", ttl, "")
	if err != nil {
		s.t.Fatalf("AcquireUnqueued once the place left: %v", err)
	}
	if next.Holder != "node-b" || next.Token <= first.Token {
		s.t.Fatalf("AcquireUnqueued once the place left granted %+v; want node-b's term with a token above %d", next, first.Token)
	}
	// A name never granted, with a place queued: the grant that would
	// create the lease is refused too (SQL stores insert a new name's row
	// by another statement than the one that updates it).
	s.enqueue(q, "fresh", "waiter", ttl)
	if rec, err := u.AcquireUnqueued(ctx, "fresh", "node-b", ttl, ""); !errors.Is(err, store.ErrQueued) {
		s.t.Fatalf("AcquireUnqueued of a name never granted, with a place queued: %+v, %v; want ErrQueued", rec, err)
	}
	if rec, err := s.store().Get(ctx, "fresh"); err == nil && rec.Holder == "node-b" {
		s.t.Fatalf("after AcquireUnqueued of a new name was refused, Get shows %+v: granted to node-b", rec)
	} else if err != nil && !errors.Is(err, store.ErrNotFound) {
		s.t.Fatalf("Get: %v", err)
	}
}

// testQueueUnqueuedNeverPassesAnEarlierPlace: the bound the contract
// (store.UnqueuedAcquirer) sets even for a store whose queue is apart from
// its leases: AcquireUnqueued may pass a place written while it runs, but
// never grants while a place whose Enqueue returned before the call is
// still there. Each round, through two handles: a place is written while
// the lease is asked for, each call on its own goroutine, and a grant is
// checked against the Enqueue's return (on this process's clock); then,
// the place written, the ask is refused (ErrQueued); the place is removed
// while the lease is asked for again; then, the place gone, the ask is
// granted. Every grant is released.
func testQueueUnqueuedNeverPassesAnEarlierPlace(s *suite) {
	waiter := s.queuer()
	st := s.store()
	taker, ok := st.(store.UnqueuedAcquirer)
	if !ok {
		s.t.Skip("store has no UnqueuedAcquirer capability: every fair acquisition writes a place")
	}
	ctx, ttl := s.ctx(), s.longTTL()
	ask := func() (store.Record, time.Time, time.Time, error) {
		called := time.Now()
		rec, err := taker.AcquireUnqueued(ctx, "job", "t", ttl, "")
		returned := time.Now()
		if err == nil {
			if rerr := st.Release(ctx, rec.Term); rerr != nil {
				s.t.Fatalf("Release: %v", rerr)
			}
		} else if !errors.Is(err, store.ErrQueued) {
			s.t.Fatalf("AcquireUnqueued: %v", err)
		}
		return rec, called, returned, err
	}
	if _, _, _, err := ask(); err != nil {
		if err := waiter.Dequeue(ctx, "job", "w"); err != nil {
			s.t.Fatal(err)
		}
		s.t.Skipf("this handle answers ErrQueued with nobody queued (the contract allows it of a store that cannot check the queue): %v", err)
	}
	// alongside runs call on a goroutine of its own while the lease is
	// asked for, and returns when both have; queued is when call returned.
	alongside := func(call func() error) (rec store.Record, called, returned, queued time.Time, err error) {
		done := make(chan error, 1)
		go func() {
			err := call()
			queued = time.Now()
			done <- err
		}()
		rec, called, returned, err = ask()
		if cerr := <-done; cerr != nil {
			s.t.Fatal(cerr)
		}
		return rec, called, returned, queued, err
	}
	const rounds = 50
	passed := 0
	for round := range rounds {
		rec, called, returned, queued, err := alongside(func() error {
			_, err := waiter.Enqueue(ctx, "job", "w", ttl)
			return err
		})
		if err == nil {
			passed++
			if queued.Before(called) {
				s.t.Fatalf("round %d: AcquireUnqueued called %v after the place's Enqueue returned, and granted (token %d, returned %v later)", round, called.Sub(queued), rec.Token, returned.Sub(called))
			}
		}
		if rec, _, _, err := ask(); err == nil {
			s.t.Fatalf("round %d: with the place written, AcquireUnqueued granted %+v; want ErrQueued", round, rec)
		}
		alongside(func() error { return waiter.Dequeue(ctx, "job", "w") })
		if _, _, _, err := ask(); err != nil {
			s.t.Fatalf("round %d: with the place gone, AcquireUnqueued: %v; want a grant", round, err)
		}
	}
	s.t.Logf("%d of %d asks made while a place was being written were granted", passed, rounds)
}
