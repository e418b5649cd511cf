// Package storetest is the conformance suite of the lease store contract.
// Every store's tests call Run with a tiny Harness, the in-memory store's
// included; a new store is done when the suite passes against its real server.
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, storetest.Harness{
//			New: func(t *testing.T) func() (store.Store, error) {
//				schema := freshSchema(t) // data only this subtest sees
//				return func() (store.Store, error) { return postgres.Open(ctx, dsn, postgres.Options{Schema: schema}) }
//			},
//			MinTTL: 100 * time.Millisecond,
//		})
//	}
package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/store"
)

// Harness is how the suite reaches a store.
type Harness struct {
	// New prepares fresh data for one subtest (a schema, a key prefix, a
	// backend: nothing another subtest sees) and returns a function that opens
	// a new handle on that data. Handles opened by one New share their data,
	// as processes sharing a server do. The suite closes every handle it
	// opens; New registers any cleanup of the data with t.Cleanup.
	New func(t *testing.T) func() (store.Store, error)
	// MinTTL is the smallest TTL the store accepts and honours; the suite
	// waits for a lease of this TTL to expire. Keep it small (a second at most).
	MinTTL time.Duration
	// Handles is how many handles race in the concurrency test (default 4).
	Handles int
	// Losses are the data losses the store's README speaks of, each with the
	// README's claim (see Loss and survival.go). None: the case is skipped.
	Losses []Loss
}

type suite struct {
	h    Harness
	open func() (store.Store, error)
	t    *testing.T
}

// Run runs the conformance suite, each case as a subtest with its own data.
func Run(t *testing.T, h Harness) {
	if h.New == nil || h.MinTTL <= 0 {
		t.Fatal("storetest: Harness needs New and a positive MinTTL")
	}
	if h.Handles <= 0 {
		h.Handles = 4
	}
	cases := []struct {
		name string
		fn   func(*suite)
	}{
		{"AcquireFree", testAcquireFree},
		{"HeldReturnsRecord", testHeldReturnsRecord},
		{"RaceOneWinnerPerTerm", testRaceOneWinner},
		{"TokenRisesAcrossHolders", testTokenRises},
		{"RenewKeepsTokenAndExtends", testRenewKeepsToken},
		{"StaleRenewNotHeld", testStaleRenew},
		{"StaleReleaseKeepsNewerTerm", testStaleRelease},
		{"SameHolderReacquireIsNewTerm", testSameHolderReacquire},
		{"TakeoverAfterExpiry", testTakeoverAfterExpiry},
		{"ExpiredTermNotRevived", testExpiredNotRevived},
		{"ReleaseFreesAtOnce", testReleaseFrees},
		{"NamesIndependent", testNamesIndependent},
		{"GetNotFound", testGetNotFound},
		{"Limits", testLimits},
		{"CancelledContext", testCancelledContext},
		{"CloseIdempotent", testCloseIdempotent},
		{"Watch", testWatch},
		{"WatchHonoursContext", testWatchHonoursContext},
		{"RenewMany", testRenewMany},
		{"List", testList},
		{"ForceRelease", testForceRelease},
		{"TokensSurviveLoss", testTokensSurviveLoss},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := &suite{h: h, open: h.New(t), t: t}
			c.fn(s)
		})
	}
}

// store opens a handle that is closed when the subtest ends.
func (s *suite) store() store.Store {
	s.t.Helper()
	st, err := s.open()
	if err != nil {
		s.t.Fatalf("open store: %v", err)
	}
	s.t.Cleanup(func() { st.Close() })
	return st
}

func (s *suite) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	s.t.Cleanup(cancel)
	return ctx
}

// longTTL is a TTL nothing in a test outlives.
func (s *suite) longTTL() time.Duration {
	if d := 60 * s.h.MinTTL; d > time.Minute {
		return d
	}
	return time.Minute
}

func (s *suite) acquire(st store.Store, name, holder string, ttl time.Duration) store.Record {
	s.t.Helper()
	rec, err := st.Acquire(s.ctx(), name, holder, ttl, "")
	if err != nil {
		s.t.Fatalf("Acquire(%q, %q): %v", name, holder, err)
	}
	if rec.Holder != holder || rec.Name != name || rec.Token < 1 {
		s.t.Fatalf("Acquire(%q, %q) = %+v: want that name and holder and a token >= 1", name, holder, rec)
	}
	return rec
}

// waitExpired polls Get until the record is no longer live.
func (s *suite) waitExpired(st store.Store, name string) {
	s.t.Helper()
	deadline := time.Now().Add(20*s.h.MinTTL + 10*time.Second)
	poll := s.h.MinTTL / 10
	for {
		rec, err := st.Get(s.ctx(), name)
		if err != nil {
			s.t.Fatalf("Get(%q) while waiting for expiry: %v", name, err)
		}
		if !rec.Live() {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("lease %q still live (%+v) long after its TTL", name, rec)
		}
		timer := time.NewTimer(poll)
		<-timer.C
	}
}

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

func testLimits(s *suite) {
	st := s.store()
	ttl := s.longTTL()
	longName := strings.Repeat("n", store.MaxNameLen)
	longHolder := strings.Repeat("h", store.MaxHolderLen)
	longMeta := strings.Repeat("m", store.MaxMetadataLen)
	rec, err := st.Acquire(s.ctx(), longName, longHolder, ttl, longMeta)
	if err != nil {
		s.t.Fatalf("Acquire at the limits (name %d, holder %d, metadata %d bytes): %v", len(longName), len(longHolder), len(longMeta), err)
	}
	g, err := st.Get(s.ctx(), longName)
	if err != nil || g.Term != rec.Term || g.Metadata != longMeta {
		s.t.Fatalf("Get at the limits = %+v, %v; want the term and metadata round-tripped", g.Term, err)
	}
	bad := []struct {
		what               string
		name, holder, meta string
		ttl                time.Duration
	}{
		{"empty name", "", "h", "", ttl},
		{"name too long", longName + "n", "h", "", ttl},
		{"name with a space", "a b", "h", "", ttl},
		{"name with a quote", "x'; DROP TABLE y", "h", "", ttl},
		{"name starting with /", "/x", "h", "", ttl},
		{"empty holder", "x", "", "", ttl},
		{"holder too long", "x", longHolder + "h", "", ttl},
		{"holder with a newline", "x", "a\nb", "", ttl},
		{"metadata too long", "x", "h", longMeta + "m", ttl},
		{"zero ttl", "x", "h", "", 0},
		{"negative ttl", "x", "h", "", -time.Second},
	}
	if l, ok := st.(store.Limiter); ok {
		// The declared minimum is what Acquire enforces: the core refuses
		// timings below it at construction, so the two must agree.
		lim := l.Limits()
		if lim.MinLeaseDuration <= 0 || lim.TimeResolution < 0 {
			s.t.Errorf("Limits() = %+v: want a positive MinLeaseDuration and a non-negative TimeResolution", lim)
		}
		if lim.MinLeaseDuration > 1 {
			bad = append(bad, struct {
				what               string
				name, holder, meta string
				ttl                time.Duration
			}{"ttl below the declared MinLeaseDuration", "x", "h", "", lim.MinLeaseDuration - 1})
		}
		if s.h.MinTTL < lim.MinLeaseDuration {
			s.t.Errorf("the harness's MinTTL %v is below the store's declared MinLeaseDuration %v", s.h.MinTTL, lim.MinLeaseDuration)
		}
	}
	for _, c := range bad {
		if _, err := st.Acquire(s.ctx(), c.name, c.holder, c.ttl, c.meta); !errors.Is(err, store.ErrInvalid) {
			s.t.Errorf("Acquire with %s: err = %v, want ErrInvalid", c.what, err)
		}
	}
	if _, err := st.Renew(s.ctx(), store.Term{Name: "x", Holder: "h", Token: 0}, ttl); !errors.Is(err, store.ErrInvalid) {
		s.t.Errorf("Renew with token 0: err = %v, want ErrInvalid", err)
	}
	if err := st.Release(s.ctx(), store.Term{Name: "", Holder: "h", Token: 1}); !errors.Is(err, store.ErrInvalid) {
		s.t.Errorf("Release with an empty name: err = %v, want ErrInvalid", err)
	}
	if _, err := st.Get(s.ctx(), "a b"); !errors.Is(err, store.ErrInvalid) {
		s.t.Errorf("Get of a bad name: err = %v, want ErrInvalid", err)
	}
	if _, err := st.Get(s.ctx(), "x"); !errors.Is(err, store.ErrNotFound) {
		s.t.Errorf("after refused calls, Get(x): err = %v, want ErrNotFound (nothing written)", err)
	}
}

func testCancelledContext(s *suite) {
	st := s.store()
	held := s.acquire(st, "job", "node-a", s.longTTL())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	calls := map[string]func() error{
		"Acquire": func() error { _, err := st.Acquire(ctx, "other", "node-a", s.longTTL(), ""); return err },
		"Renew":   func() error { _, err := st.Renew(ctx, held.Term, s.longTTL()); return err },
		"Release": func() error { return st.Release(ctx, held.Term) },
		"Get":     func() error { _, err := st.Get(ctx, "job"); return err },
	}
	for name, call := range calls {
		done := make(chan error, 1)
		go func() { done <- call() }()
		timer := time.NewTimer(10 * time.Second)
		select {
		case err := <-done:
			if err == nil {
				s.t.Errorf("%s with a cancelled context returned nil, want an error", name)
			}
		case <-timer.C:
			s.t.Fatalf("%s with a cancelled context did not return", name)
		}
		timer.Stop()
	}
}

func testCloseIdempotent(s *suite) {
	st, err := s.open()
	if err != nil {
		s.t.Fatalf("open: %v", err)
	}
	other := s.store()
	held := s.acquire(st, "job", "node-a", s.longTTL())
	if err := st.Close(); err != nil {
		s.t.Fatalf("Close: %v", err)
	}
	if err := st.Close(); err != nil {
		s.t.Fatalf("second Close: %v", err)
	}
	if _, err := st.Get(s.ctx(), "job"); !errors.Is(err, store.ErrClosed) {
		s.t.Fatalf("Get after Close: err = %v, want ErrClosed", err)
	}
	if _, err := st.Acquire(s.ctx(), "job2", "node-a", s.longTTL(), ""); !errors.Is(err, store.ErrClosed) {
		s.t.Fatalf("Acquire after Close: err = %v, want ErrClosed", err)
	}
	g, err := other.Get(s.ctx(), "job")
	if err != nil || g.Term != held.Term || !g.Live() {
		s.t.Fatalf("Close released the lease or broke other handles: Get = %+v, %v", g, err)
	}
}

func testWatch(s *suite) {
	a, b := s.store(), s.store()
	w, ok := b.(store.Watcher)
	if !ok {
		s.t.Skip("store has no Watcher capability; waiters poll")
	}
	ttl := s.longTTL()
	held := s.acquire(a, "job", "node-a", ttl)
	ctx, cancel := context.WithCancel(s.ctx())
	ch, err := w.Watch(ctx, "job")
	if err != nil {
		s.t.Fatalf("Watch: %v", err)
	}
	drain(ch)
	if err := a.Release(s.ctx(), held.Term); err != nil {
		s.t.Fatalf("Release: %v", err)
	}
	expectWake(s.t, ch, "release")
	// A grant may wake watchers too, but need not: a waiter has nothing to
	// do while the lease is held, and waking every waiter on every grant
	// doubles the herd under contention.
	cancel()
	timer := time.NewTimer(10 * time.Second)
	defer timer.Stop()
	for {
		select {
		case _, open := <-ch:
			if !open {
				return
			}
		case <-timer.C:
			s.t.Fatal("watch channel not closed after its context ended")
		}
	}
}

// A Watch call returns, and its channel closes, soon after its context ends,
// whether the context ended before the call or while it was subscribed: the
// caller bounds a subscription by its context (and gives up on one that
// hangs after a retry period), and a store that ignores the context would
// leak a subscription for every give-up.
func testWatchHonoursContext(s *suite) {
	w, ok := s.store().(store.Watcher)
	if !ok {
		s.t.Skip("store has no Watcher capability; waiters poll")
	}
	s.acquire(s.store(), "job", "node-a", s.longTTL())
	closedWithin := func(ch <-chan struct{}, d time.Duration) bool {
		timer := time.NewTimer(d)
		defer timer.Stop()
		for {
			select {
			case _, open := <-ch:
				if !open {
					return true
				}
			case <-timer.C:
				return false
			}
		}
	}
	// Already cancelled: an error, or a channel that is closed at once.
	ctx, cancel := context.WithCancel(s.ctx())
	cancel()
	done := make(chan struct{})
	var ch <-chan struct{}
	var err error
	go func() { ch, err = w.Watch(ctx, "job"); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		s.t.Fatal("Watch with a cancelled context did not return within 10s")
	}
	if err == nil && !closedWithin(ch, 10*time.Second) {
		s.t.Fatal("Watch with a cancelled context returned an open channel that was not closed within 10s")
	}
	// A deadline that passes while subscribed: the channel closes.
	dctx, dcancel := context.WithTimeout(s.ctx(), 200*time.Millisecond)
	defer dcancel()
	ch, err = w.Watch(dctx, "job")
	if err != nil {
		if dctx.Err() == nil {
			s.t.Fatalf("Watch: %v", err)
		}
		return // the deadline passed during the subscription itself
	}
	if !closedWithin(ch, 10*time.Second) {
		s.t.Fatal("watch channel still open 10s after its context's deadline passed")
	}
}

// drain empties a coalesced watch channel after a short settle, so that a
// wake from an earlier change is not mistaken for the next one.
func drain(ch <-chan struct{}) {
	timer := time.NewTimer(50 * time.Millisecond)
	defer timer.Stop()
	for {
		select {
		case <-ch:
		case <-timer.C:
			return
		}
	}
}

func expectWake(t *testing.T, ch <-chan struct{}, after string) {
	t.Helper()
	timer := time.NewTimer(10 * time.Second)
	defer timer.Stop()
	select {
	case _, open := <-ch:
		if !open {
			t.Fatalf("watch channel closed instead of waking after %s", after)
		}
	case <-timer.C:
		t.Fatalf("watch did not wake within 10s after %s", after)
	}
}

func testRenewMany(s *suite) {
	st := s.store()
	br, ok := st.(store.BatchRenewer)
	if !ok {
		s.t.Skip("store has no BatchRenewer capability; terms are renewed one by one")
	}
	ttl := s.longTTL()
	var terms []store.Term
	for i := 0; i < 20; i++ {
		terms = append(terms, s.acquire(st, fmt.Sprintf("shard/%d", i), "node-a", ttl).Term)
	}
	// Make some stale: released, replaced by another holder, a wrong token.
	if err := st.Release(s.ctx(), terms[3]); err != nil {
		s.t.Fatal(err)
	}
	if err := st.Release(s.ctx(), terms[5]); err != nil {
		s.t.Fatal(err)
	}
	s.acquire(st, "shard/5", "node-b", ttl)
	terms[7].Token++
	recs, errs, err := br.RenewMany(s.ctx(), terms, 2*ttl)
	if err != nil {
		s.t.Fatalf("RenewMany: %v", err)
	}
	if len(recs) != len(terms) || len(errs) != len(terms) {
		s.t.Fatalf("RenewMany returned %d records and %d errors for %d terms", len(recs), len(errs), len(terms))
	}
	for i, t := range terms {
		stale := i == 3 || i == 5 || i == 7
		switch {
		case stale && !errors.Is(errs[i], store.ErrNotHeld):
			s.t.Errorf("term %v: err = %v, want ErrNotHeld", t, errs[i])
		case !stale && errs[i] != nil:
			s.t.Errorf("term %v: err = %v, want renewed", t, errs[i])
		case !stale && (recs[i].Term != t || recs[i].Remaining <= ttl):
			s.t.Errorf("term %v: record %+v, want the same term extended past %v", t, recs[i], ttl)
		}
	}
	g, err := st.Get(s.ctx(), "shard/5")
	if err != nil || g.Holder != "node-b" {
		s.t.Fatalf("a stale term in a batch touched the newer term: %+v, %v", g, err)
	}
}

func testList(s *suite) {
	st := s.store()
	l, ok := st.(store.Lister)
	if !ok {
		s.t.Skip("store has no Lister capability")
	}
	ttl := s.longTTL()
	b := s.acquire(st, "list/b", "node-b", ttl)
	a := s.acquire(st, "list/a", "node-a", ttl)
	c := s.acquire(st, "list/c", "node-c", ttl)
	if err := st.Release(s.ctx(), c.Term); err != nil {
		s.t.Fatal(err)
	}
	recs, err := l.List(s.ctx())
	if err != nil {
		s.t.Fatalf("List: %v", err)
	}
	var names []string
	byName := map[string]store.Record{}
	for _, r := range recs {
		names = append(names, r.Name)
		byName[r.Name] = r
	}
	for i := 1; i < len(names); i++ {
		if names[i-1] >= names[i] {
			s.t.Fatalf("List names %v are not in order", names)
		}
	}
	if r := byName["list/a"]; r.Term != a.Term || !r.Live() {
		s.t.Errorf("List has list/a as %+v, want %+v live", r, a.Term)
	}
	if r := byName["list/b"]; r.Term != b.Term || !r.Live() {
		s.t.Errorf("List has list/b as %+v, want %+v live", r, b.Term)
	}
	if r, ok := byName["list/c"]; ok && (r.Live() || r.Token != c.Token) {
		s.t.Errorf("List has released list/c as %+v, want not live with token %d", r, c.Token)
	}
}

func testForceRelease(s *suite) {
	st := s.store()
	fr, ok := st.(store.ForceReleaser)
	if !ok {
		s.t.Skip("store has no ForceReleaser capability")
	}
	ttl := s.longTTL()
	if _, err := fr.ForceRelease(s.ctx(), "never-granted"); !errors.Is(err, store.ErrNotFound) {
		s.t.Errorf("ForceRelease of a name never granted: err = %v, want ErrNotFound", err)
	}
	held := s.acquire(st, "job", "node-a", ttl)
	old, err := fr.ForceRelease(s.ctx(), "job")
	if err != nil {
		s.t.Fatalf("ForceRelease: %v", err)
	}
	if old.Term != held.Term {
		s.t.Errorf("ForceRelease returned %+v, want the evicted term %+v", old, held.Term)
	}
	if _, err := st.Renew(s.ctx(), held.Term, ttl); !errors.Is(err, store.ErrNotHeld) {
		s.t.Errorf("evicted holder's Renew: err = %v, want ErrNotHeld", err)
	}
	if _, err := fr.ForceRelease(s.ctx(), "job"); !errors.Is(err, store.ErrNotHeld) {
		s.t.Errorf("ForceRelease with no live term: err = %v, want ErrNotHeld", err)
	}
	next := s.acquire(st, "job", "node-b", ttl)
	if next.Token <= held.Token {
		s.t.Errorf("token after a forced release = %d, want > %d", next.Token, held.Token)
	}
}
