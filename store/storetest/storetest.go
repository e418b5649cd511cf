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
	// FixedTTL says the store keeps a term for the ttl it was acquired
	// with and cannot lengthen it (ZooKeeper: a term lives in a session,
	// whose timeout the server fixes when the session opens). Renew then
	// extends a term by at most that ttl, and refuses a longer one with
	// ErrInvalid; RenewKeepsTokenAndExtends checks exactly that instead of a
	// renewal to a longer ttl. The core renews with the ttl it acquired with.
	FixedTTL bool
	// QueueTTL is the shortest place ttl the store's queue (store.Queuer)
	// honours, if above MinTTL. The queue cases wait for it to expire.
	QueueTTL time.Duration
	// QueueSessionBound says a queue place lives as long as the session of
	// the handle that wrote it, not ttl after its last refresh (ZooKeeper:
	// an ephemeral node). The dead-place case then closes that handle, as
	// a waiter's process that died would, and expects the place gone
	// within ttl.
	QueueSessionBound bool
	// LowestPlaceHolds says the store's queue is its lock recipe's, in which
	// the lowest contender holds: Enqueue counts the lowest as the holder,
	// a place that has not taken the lease yet included, not as a place
	// ahead (ZooKeeper; see store.Queuer). The queue cases then rank their
	// places behind a live term, where both ways of counting agree, and
	// check the recipe's count on a free lease apart.
	LowestPlaceHolds bool
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
		{"GrantLastsItsRemaining", testGrantLastsItsRemaining},
		{"RenewKeepsTokenAndExtends", testRenewKeepsToken},
		{"StaleRenewNotHeld", testStaleRenew},
		{"StaleReleaseKeepsNewerTerm", testStaleRelease},
		{"SameHolderReacquireIsNewTerm", testSameHolderReacquire},
		{"TakeoverAfterExpiry", testTakeoverAfterExpiry},
		{"ExpiredTermNotRevived", testExpiredNotRevived},
		{"ReleaseFreesAtOnce", testReleaseFrees},
		{"NamesIndependent", testNamesIndependent},
		{"GetNotFound", testGetNotFound},
		{"GetFoundAfterGrant", testGetFoundAfterGrant},
		{"Limits", testLimits},
		{"CancelledContext", testCancelledContext},
		{"CloseIdempotent", testCloseIdempotent},
		{"Watch", testWatch},
		{"WatchHonoursContext", testWatchHonoursContext},
		{"WatchGrants", testWatchGrants},
		{"RenewMany", testRenewMany},
		{"List", testList},
		{"ForceRelease", testForceRelease},
		{"TokensSurviveLoss", testTokensSurviveLoss},
		{"Transfer", testTransfer},
		{"Handover", testHandover},
		{"SemaphoreFillAndRefill", testSemaphoreFillAndRefill},
		{"SemaphoreRace", testSemaphoreRace},
		{"SemaphoreRaceControl", testSemaphoreRaceControl},
		{"QueueFIFO", testQueueFIFO},
		{"QueueDeadPlaceExpires", testQueueDeadPlaceExpires},
		{"QueueWatch", testQueueWatch},
		{"QueueInvalid", testQueueInvalid},
		{"QueueAcquireUnqueued", testQueueAcquireUnqueued},
		{"QueueUnqueuedNeverPassesAnEarlierPlace", testQueueUnqueuedNeverPassesAnEarlierPlace},
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
