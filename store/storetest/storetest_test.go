package storetest_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/memstore"
	"github.com/leasehold/leasehold/store/storetest"
)

// broken wraps the reference store with one deliberate bug, to prove that the
// suite catches it: a conformance suite that cannot fail proves nothing.
type broken struct {
	*memstore.Store
	bug string
}

func (b broken) Acquire(ctx context.Context, name, holder string, ttl time.Duration, md string) (store.Record, error) {
	rec, err := b.Store.Acquire(ctx, name, holder, ttl, md)
	switch b.bug {
	case "token-stuck":
		rec.Token = 1
	case "remaining-overstated":
		// Grants half the ttl and says nine tenths.
		if err == nil {
			b.Store.Release(ctx, rec.Term)
			rec, err = b.Store.Acquire(ctx, name, holder, ttl/2, md)
			rec.Remaining = ttl * 9 / 10
		}
	case "two-winners":
		if err != nil && rec.Holder != "" {
			return store.Record{Term: store.Term{Name: name, Holder: holder, Token: rec.Token}, Remaining: ttl}, nil
		}
	}
	return rec, err
}

func (b broken) Renew(ctx context.Context, t store.Term, ttl time.Duration) (store.Record, error) {
	if b.bug == "renew-ignores-term" {
		if live, err := b.Store.Get(ctx, t.Name); err == nil {
			t = live.Term
		}
	}
	return b.Store.Renew(ctx, t, ttl)
}

func (b broken) Release(ctx context.Context, t store.Term) error {
	if b.bug == "release-ignores-term" {
		if live, err := b.Store.Get(ctx, t.Name); err == nil && live.Holder != "" {
			t = live.Term
		}
	}
	return b.Store.Release(ctx, t)
}

func (b broken) Transfer(ctx context.Context, t store.Term, to string, ttl time.Duration, md string) (store.Record, error) {
	switch b.bug {
	case "transfer-ignores-term":
		if live, err := b.Store.Get(ctx, t.Name); err == nil && live.Holder != "" && live.Holder != to {
			t = live.Term
		}
	case "transfer-reserves-nothing":
		// Ends the term and reports a reservation it never wrote.
		if err := b.Store.Release(ctx, t); err != nil {
			return store.Record{}, err
		}
		return store.Record{Term: store.Term{Name: t.Name, Holder: to, Token: t.Token + 1}, Remaining: ttl, TTL: ttl, Metadata: md}, nil
	}
	return b.Store.Transfer(ctx, t, to, ttl, md)
}

func (b broken) Get(ctx context.Context, name string) (store.Record, error) {
	rec, err := b.Store.Get(ctx, name)
	if b.bug == "forgets-ended-names" && err == nil && !rec.Live() {
		return store.Record{}, store.ErrNotFound
	}
	return rec, err
}

// Watch, with bug "watch-misses-grants", passes on only the wake-ups after
// which the lease is free, as a watch that publishes releases only would,
// while the store still says it wakes on grants.
func (b broken) Watch(ctx context.Context, name string) (<-chan struct{}, error) {
	ch, err := b.Store.Watch(ctx, name)
	if err != nil || b.bug != "watch-misses-grants" {
		return ch, err
	}
	out := make(chan struct{}, 1)
	go func() {
		defer close(out)
		for range ch {
			if r, err := b.Store.Get(context.Background(), name); err == nil && r.Live() {
				continue
			}
			select {
			case out <- struct{}{}:
			default:
			}
		}
	}()
	return out, nil
}

// TestBrokenStoreHelper runs the suite against a broken store when asked to
// by TestSuiteCatchesBrokenStores; on its own it does nothing.
func TestBrokenStoreHelper(t *testing.T) {
	bug := os.Getenv("STORETEST_BUG")
	if bug == "" {
		t.Skip("run by TestSuiteCatchesBrokenStores")
	}
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T) func() (store.Store, error) {
			b := memstore.NewBackend(nil)
			return func() (store.Store, error) { return broken{memstore.Open(b), bug}, nil }
		},
		MinTTL: 20 * time.Millisecond,
	})
}

func TestSuiteCatchesBrokenStores(t *testing.T) {
	cases := map[string]string{
		"token-stuck":          "TokenRisesAcrossHolders",
		"two-winners":          "RaceOneWinnerPerTerm",
		"renew-ignores-term":   "StaleRenewNotHeld",
		"release-ignores-term": "StaleReleaseKeepsNewerTerm",
		"forgets-ended-names":  "GetFoundAfterGrant",
		// Negative controls of the hand-over cases.
		"transfer-ignores-term":     "Transfer",
		"transfer-reserves-nothing": "Transfer",
		"watch-misses-grants":       "WatchGrants",
		"remaining-overstated":      "GrantLastsItsRemaining",
	}
	// Each case is a process of its own that mostly waits on leases: all at
	// once (not t.Parallel, whose cap is GOMAXPROCS).
	var wg sync.WaitGroup
	defer wg.Wait()
	for bug, wantFailing := range cases {
		wg.Go(func() {
			t.Run(bug, func(t *testing.T) {
				// Only the case meant to catch the bug: the others may wait
				// out their timeouts on a broken store (token-stuck's
				// SemaphoreRace, 30 s).
				cmd := exec.Command(os.Args[0], "-test.run=^TestBrokenStoreHelper$/^"+wantFailing+"$", "-test.v")
				cmd.Env = append(os.Environ(), "STORETEST_BUG="+bug)
				out, err := cmd.CombinedOutput()
				if err == nil {
					t.Fatalf("the suite passed a store with bug %q:\n%s", bug, out)
				}
				if !strings.Contains(string(out), "--- FAIL: TestBrokenStoreHelper/"+wantFailing) {
					t.Fatalf("bug %q: want case %s to fail; output:\n%s", bug, wantFailing, out)
				}
			})
		})
	}
}
