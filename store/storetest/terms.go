package storetest

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/leasehold/leasehold/store"
)

func testAcquireFree(s *suite) {
	st := s.store()
	ttl := s.longTTL()
	rec, err := st.Acquire(s.ctx(), "job", "node-a", ttl, "addr=10.0.0.1:80")
	if err != nil {
		s.t.Fatalf("Acquire on a free lease: %v", err)
	}
	if rec.Holder != "node-a" || rec.Token < 1 || rec.Metadata != "addr=10.0.0.1:80" {
		s.t.Fatalf("Acquire = %+v, want holder node-a, token >= 1, the metadata", rec)
	}
	if !rec.Live() || rec.Remaining > ttl || rec.Remaining < ttl/2 {
		s.t.Fatalf("Acquire Remaining = %v, want live and about ttl %v", rec.Remaining, ttl)
	}
	got, err := st.Get(s.ctx(), "job")
	if err != nil {
		s.t.Fatalf("Get: %v", err)
	}
	if got.Term != rec.Term || got.Metadata != rec.Metadata || !got.Live() {
		s.t.Fatalf("Get = %+v, want the acquired term %+v", got, rec)
	}
}

func testHeldReturnsRecord(s *suite) {
	a, b := s.store(), s.store()
	held := s.acquire(a, "job", "node-a", s.longTTL())
	rec, err := b.Acquire(s.ctx(), "job", "node-b", s.longTTL(), "")
	if !errors.Is(err, store.ErrHeld) {
		s.t.Fatalf("second holder's Acquire: err = %v, want ErrHeld", err)
	}
	if rec.Term != held.Term || !rec.Live() {
		s.t.Fatalf("ErrHeld record = %+v, want the live term %+v", rec, held.Term)
	}
	got, err := a.Get(s.ctx(), "job")
	if err != nil || got.Term != held.Term {
		s.t.Fatalf("after a refused Acquire, Get = %+v, %v; want the first term unchanged", got, err)
	}
}

func testRaceOneWinner(s *suite) {
	handles := make([]store.Store, s.h.Handles)
	for i := range handles {
		handles[i] = s.store()
	}
	const perHandle = 4
	const rounds = 4
	ttl := s.longTTL()
	var last int64
	for round := 0; round < rounds; round++ {
		type result struct {
			rec store.Record
			err error
		}
		results := make(chan result, len(handles)*perHandle)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for h, st := range handles {
			for g := 0; g < perHandle; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					rec, err := st.Acquire(s.ctx(), "race", fmt.Sprintf("r%d-h%d-g%d", round, h, g), ttl, "")
					results <- result{rec, err}
				}()
			}
		}
		close(start)
		wg.Wait()
		close(results)
		var winners []store.Record
		for r := range results {
			switch {
			case r.err == nil:
				winners = append(winners, r.rec)
			case errors.Is(r.err, store.ErrHeld):
			default:
				s.t.Fatalf("round %d: Acquire: %v", round, r.err)
			}
		}
		if len(winners) != 1 {
			s.t.Fatalf("round %d: %d winners (%+v), want exactly 1", round, len(winners), winners)
		}
		w := winners[0]
		if w.Token <= last {
			s.t.Fatalf("round %d: token %d not above the previous round's %d", round, w.Token, last)
		}
		last = w.Token
		got, err := handles[0].Get(s.ctx(), "race")
		if err != nil || got.Term != w.Term {
			s.t.Fatalf("round %d: Get = %+v, %v; want the winner %+v", round, got, err, w.Term)
		}
		if err := handles[len(handles)-1].Release(s.ctx(), w.Term); err != nil {
			s.t.Fatalf("round %d: release winner: %v", round, err)
		}
	}
}

func testTokenRises(s *suite) {
	a, b := s.store(), s.store()
	ttl := s.longTTL()
	t1 := s.acquire(a, "job", "node-a", ttl)
	if err := a.Release(s.ctx(), t1.Term); err != nil {
		s.t.Fatalf("Release: %v", err)
	}
	rec, err := b.Get(s.ctx(), "job")
	if err != nil {
		s.t.Fatalf("Get after release: %v", err)
	}
	if rec.Live() || rec.Token != t1.Token {
		s.t.Fatalf("Get after release = %+v: want not live, with the last token %d kept", rec, t1.Token)
	}
	t2 := s.acquire(b, "job", "node-b", ttl)
	if t2.Token <= t1.Token {
		s.t.Fatalf("token after release and a new holder = %d, want > %d", t2.Token, t1.Token)
	}
	if err := b.Release(s.ctx(), t2.Term); err != nil {
		s.t.Fatalf("Release: %v", err)
	}
	t3 := s.acquire(a, "job", "node-a", ttl)
	if t3.Token <= t2.Token {
		s.t.Fatalf("token on the old holder's return = %d, want > %d", t3.Token, t2.Token)
	}
}

func testRenewKeepsToken(s *suite) {
	st := s.store()
	short := 5 * s.h.MinTTL
	rec, err := st.Acquire(s.ctx(), "job", "node-a", short, "meta")
	if err != nil {
		s.t.Fatalf("Acquire: %v", err)
	}
	if s.h.FixedTTL {
		renewFixedTTL(s, st, rec, short)
		return
	}
	long := s.longTTL()
	r, err := st.Renew(s.ctx(), rec.Term, long)
	if err != nil {
		s.t.Fatalf("Renew of the live term: %v", err)
	}
	if r.Term != rec.Term || r.Metadata != "meta" {
		s.t.Fatalf("Renew = %+v, want the same term %+v and metadata kept", r, rec.Term)
	}
	if r.Remaining <= short || r.Remaining > long {
		s.t.Fatalf("Renew Remaining = %v, want extended to about %v", r.Remaining, long)
	}
	g, err := st.Get(s.ctx(), "job")
	if err != nil || g.Term != rec.Term || g.Remaining <= short {
		s.t.Fatalf("Get after Renew = %+v, %v; want the same term, extended", g, err)
	}
}

// renewFixedTTL is RenewKeepsTokenAndExtends for a store whose terms keep
// the ttl they were acquired with (Harness.FixedTTL): once some of the term
// has passed, a renewal with that ttl extends it again; a longer ttl is
// refused with ErrInvalid and changes nothing.
func renewFixedTTL(s *suite, st store.Store, rec store.Record, ttl time.Duration) {
	// Let a fifth of the term pass, by the store's own account.
	deadline := time.Now().Add(ttl + 10*time.Second)
	var g store.Record
	for {
		var err error
		g, err = st.Get(s.ctx(), "job")
		if err != nil || g.Term != rec.Term || !g.Live() {
			s.t.Fatalf("Get while the term runs = %+v, %v; want the term %+v live", g, err, rec.Term)
		}
		if g.Remaining < ttl*4/5 {
			break
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("Get still says %v remain of a %v term long after it was acquired", g.Remaining, ttl)
		}
		timer := time.NewTimer(s.h.MinTTL / 10)
		<-timer.C
	}
	r, err := st.Renew(s.ctx(), rec.Term, ttl)
	if err != nil {
		s.t.Fatalf("Renew of the live term: %v", err)
	}
	if r.Term != rec.Term || r.Metadata != "meta" {
		s.t.Fatalf("Renew = %+v, want the same term %+v and metadata kept", r, rec.Term)
	}
	if r.Remaining <= g.Remaining || r.Remaining > ttl {
		s.t.Fatalf("Renew Remaining = %v, want extended from %v to about %v", r.Remaining, g.Remaining, ttl)
	}
	if _, err := st.Renew(s.ctx(), rec.Term, s.longTTL()); !errors.Is(err, store.ErrInvalid) {
		s.t.Fatalf("Renew with a ttl longer than the term was acquired with: err = %v, want ErrInvalid (Harness.FixedTTL)", err)
	}
	after, err := st.Get(s.ctx(), "job")
	if err != nil || after.Term != rec.Term || !after.Live() || after.Remaining > ttl {
		s.t.Fatalf("Get after a refused longer renewal = %+v, %v; want the term %+v live, for at most %v", after, err, rec.Term, ttl)
	}
}

func testStaleRenew(s *suite) {
	a, b := s.store(), s.store()
	ttl := s.longTTL()
	old := s.acquire(a, "job", "node-a", ttl)
	if err := a.Release(s.ctx(), old.Term); err != nil {
		s.t.Fatalf("Release: %v", err)
	}
	cur := s.acquire(b, "job", "node-b", ttl)
	stale := []store.Term{
		old.Term, // a whole older term
		{Name: "job", Holder: "node-a", Token: cur.Token},     // right token, wrong holder
		{Name: "job", Holder: "node-b", Token: cur.Token - 1}, // right holder, old token
		{Name: "job", Holder: "node-b", Token: cur.Token + 1}, // a token not yet granted
	}
	for _, t := range stale {
		if _, err := a.Renew(s.ctx(), t, ttl); !errors.Is(err, store.ErrNotHeld) {
			s.t.Fatalf("Renew(%v) while %v is live: err = %v, want ErrNotHeld", t, cur.Term, err)
		}
	}
	g, err := b.Get(s.ctx(), "job")
	if err != nil || g.Term != cur.Term || !g.Live() {
		s.t.Fatalf("after stale renewals Get = %+v, %v; want %+v live", g, err, cur.Term)
	}
}

func testStaleRelease(s *suite) {
	a, b := s.store(), s.store()
	ttl := s.longTTL()
	old := s.acquire(a, "job", "node-a", ttl)
	if err := a.Release(s.ctx(), old.Term); err != nil {
		s.t.Fatalf("Release: %v", err)
	}
	cur := s.acquire(b, "job", "node-b", ttl)
	if err := a.Release(s.ctx(), old.Term); !errors.Is(err, store.ErrNotHeld) {
		s.t.Fatalf("late Release of an old term: err = %v, want ErrNotHeld", err)
	}
	if err := a.Release(s.ctx(), store.Term{Name: "job", Holder: "node-a", Token: cur.Token}); !errors.Is(err, store.ErrNotHeld) {
		s.t.Fatalf("Release with the live token but another holder: err = %v, want ErrNotHeld", err)
	}
	g, err := b.Get(s.ctx(), "job")
	if err != nil || g.Term != cur.Term || !g.Live() {
		s.t.Fatalf("after a stale release Get = %+v, %v; want the newer term %+v still live", g, err, cur.Term)
	}
	if _, err := b.Acquire(s.ctx(), "job", "node-c", ttl, ""); !errors.Is(err, store.ErrHeld) {
		s.t.Fatalf("Acquire by a third holder after a stale release: err = %v, want ErrHeld", err)
	}
}

func testSameHolderReacquire(s *suite) {
	st := s.store()
	ttl := s.longTTL()
	first := s.acquire(st, "job", "node-a", ttl)
	second := s.acquire(st, "job", "node-a", ttl)
	if second.Token <= first.Token {
		s.t.Fatalf("re-acquire by the same holder: token %d, want > %d (a new term)", second.Token, first.Token)
	}
	if _, err := st.Renew(s.ctx(), first.Term, ttl); !errors.Is(err, store.ErrNotHeld) {
		s.t.Fatalf("Renew of the replaced term: err = %v, want ErrNotHeld", err)
	}
	if err := st.Release(s.ctx(), first.Term); !errors.Is(err, store.ErrNotHeld) {
		s.t.Fatalf("late Release of the replaced term: err = %v, want ErrNotHeld", err)
	}
	if _, err := st.Renew(s.ctx(), second.Term, ttl); err != nil {
		s.t.Fatalf("Renew of the new term (after a late release of the old one): %v", err)
	}
}

func testTakeoverAfterExpiry(s *suite) {
	a, b := s.store(), s.store()
	old := s.acquire(a, "job", "node-a", s.h.MinTTL)
	s.waitExpired(b, "job")
	cur := s.acquire(b, "job", "node-b", s.longTTL())
	if cur.Token <= old.Token {
		s.t.Fatalf("takeover token %d, want > %d", cur.Token, old.Token)
	}
	if _, err := a.Renew(s.ctx(), old.Term, s.longTTL()); !errors.Is(err, store.ErrNotHeld) {
		s.t.Fatalf("old holder's Renew after takeover: err = %v, want ErrNotHeld", err)
	}
	if err := a.Release(s.ctx(), old.Term); !errors.Is(err, store.ErrNotHeld) {
		s.t.Fatalf("old holder's Release after takeover: err = %v, want ErrNotHeld", err)
	}
	g, err := b.Get(s.ctx(), "job")
	if err != nil || g.Term != cur.Term || !g.Live() {
		s.t.Fatalf("Get = %+v, %v; want the new term %+v", g, err, cur.Term)
	}
}

func testExpiredNotRevived(s *suite) {
	a, b := s.store(), s.store()
	old := s.acquire(a, "job", "node-a", s.h.MinTTL)
	s.waitExpired(b, "job")
	if _, err := a.Renew(s.ctx(), old.Term, s.longTTL()); !errors.Is(err, store.ErrNotHeld) {
		s.t.Fatalf("Renew of an expired term nobody took: err = %v, want ErrNotHeld", err)
	}
	cur := s.acquire(b, "job", "node-b", s.longTTL())
	if cur.Token <= old.Token {
		s.t.Fatalf("token after expiry = %d, want > %d", cur.Token, old.Token)
	}
}

func testReleaseFrees(s *suite) {
	a, b := s.store(), s.store()
	ttl := s.longTTL()
	held := s.acquire(a, "job", "node-a", ttl)
	if err := a.Release(s.ctx(), held.Term); err != nil {
		s.t.Fatalf("Release: %v", err)
	}
	if err := a.Release(s.ctx(), held.Term); !errors.Is(err, store.ErrNotHeld) {
		s.t.Fatalf("second Release of the same term: err = %v, want ErrNotHeld", err)
	}
	if _, err := a.Renew(s.ctx(), held.Term, ttl); !errors.Is(err, store.ErrNotHeld) {
		s.t.Fatalf("Renew after Release: err = %v, want ErrNotHeld", err)
	}
	next := s.acquire(b, "job", "node-b", ttl)
	if next.Token <= held.Token {
		s.t.Fatalf("token after release = %d, want > %d", next.Token, held.Token)
	}
}

func testNamesIndependent(s *suite) {
	a, b := s.store(), s.store()
	ttl := s.longTTL()
	x := s.acquire(a, "shard/1", "node-a", ttl)
	y := s.acquire(b, "shard/2", "node-b", ttl)
	if err := a.Release(s.ctx(), x.Term); err != nil {
		s.t.Fatalf("Release: %v", err)
	}
	g, err := b.Get(s.ctx(), "shard/2")
	if err != nil || g.Term != y.Term || !g.Live() {
		s.t.Fatalf("releasing shard/1 touched shard/2: Get = %+v, %v", g, err)
	}
	if _, err := b.Acquire(s.ctx(), "shard/2", "node-c", ttl, ""); !errors.Is(err, store.ErrHeld) {
		s.t.Fatalf("Acquire shard/2 by another: err = %v, want ErrHeld", err)
	}
}

func testGetNotFound(s *suite) {
	st := s.store()
	if _, err := st.Get(s.ctx(), "never-granted"); !errors.Is(err, store.ErrNotFound) {
		s.t.Fatalf("Get of a name never granted: err = %v, want ErrNotFound", err)
	}
}

// A grant's Remaining is a promise the core relies on: the term is live for
// at least that long, counted from when the Acquire was sent. (A store may
// grant less than ttl, as etcd does on a pooled lease; the core shortens the
// term by the shortfall.) A Get answered before sent + Remaining finds the
// term live.
func testGrantLastsItsRemaining(s *suite) {
	st := s.store()
	ttl := max(s.h.MinTTL, time.Second)
	for try := 0; try < 3; try++ {
		name := fmt.Sprintf("job-%d", try)
		sent := time.Now()
		rec := s.acquire(st, name, "node-a", ttl)
		if rec.Remaining > ttl || rec.Remaining <= 0 {
			s.t.Fatalf("Acquire Remaining = %v, want in (0, ttl %v]", rec.Remaining, ttl)
		}
		time.Sleep(time.Until(sent.Add(rec.Remaining * 3 / 4)))
		got, err := st.Get(s.ctx(), name)
		if !time.Now().Before(sent.Add(rec.Remaining)) {
			continue // answered too late to say (a loaded machine): try again
		}
		if err != nil || got.Term != rec.Term || !got.Live() {
			s.t.Fatalf("Get %v after sending the Acquire (Remaining %v) = %+v, %v: want the term still live", time.Since(sent), rec.Remaining, got, err)
		}
		return
	}
	s.t.Skip("every Get was answered after the grant's Remaining had passed: the machine is too slow to tell")
}
