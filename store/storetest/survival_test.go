package storetest_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/memstore"
	"github.com/leasehold/leasehold/store/storetest"
)

// forgetful is the reference store on a backend that a Loss can replace with
// an empty one, as a Redis FLUSHALL empties the server under every client:
// each call goes to the backend current at the time.
type forgetful struct {
	cur    *atomic.Pointer[memstore.Backend]
	closed atomic.Bool
}

func (f *forgetful) s() store.Store {
	st := memstore.Open(f.cur.Load())
	if f.closed.Load() {
		st.Close()
	}
	return st
}

func (f *forgetful) Acquire(ctx context.Context, name, holder string, ttl time.Duration, md string) (store.Record, error) {
	return f.s().Acquire(ctx, name, holder, ttl, md)
}
func (f *forgetful) Renew(ctx context.Context, t store.Term, ttl time.Duration) (store.Record, error) {
	return f.s().Renew(ctx, t, ttl)
}
func (f *forgetful) Release(ctx context.Context, t store.Term) error { return f.s().Release(ctx, t) }
func (f *forgetful) Get(ctx context.Context, name string) (store.Record, error) {
	return f.s().Get(ctx, name)
}
func (f *forgetful) Close() error {
	f.closed.Store(true)
	return nil
}

// forgetfulHarness offers one Loss, which empties the backend, with the
// given claim.
func forgetfulHarness(survives bool) storetest.Harness {
	return storetest.Harness{
		New: func(t *testing.T) func() (store.Store, error) {
			cur := new(atomic.Pointer[memstore.Backend])
			cur.Store(memstore.NewBackend(nil))
			return func() (store.Store, error) { return &forgetful{cur: cur}, nil }
		},
		MinTTL: 20 * time.Millisecond,
		Losses: []storetest.Loss{{
			Name: "backend emptied",
			Lose: func(t *testing.T, open func() (store.Store, error), name string) error {
				st, err := open()
				if err != nil {
					t.Fatal(err)
				}
				st.(*forgetful).cur.Store(memstore.NewBackend(nil))
				return nil
			},
			Survives: survives,
		}},
	}
}

// TestSurvivalHelper runs the suite against the forgetful store when asked
// to by TestSurvivalCatchesForgetfulStores; on its own it does nothing.
func TestSurvivalHelper(t *testing.T) {
	switch os.Getenv("STORETEST_SURVIVAL") {
	case "":
		t.Skip("run by TestSurvivalCatchesForgetfulStores")
	case "claims-survival":
		storetest.Run(t, forgetfulHarness(true))
	case "claims-detection":
		storetest.Run(t, forgetfulHarness(false))
	}
}

// TestSurvivalCatchesForgetfulStores is the negative control of the
// TokensSurviveLoss case: a store that starts its tokens again after a loss
// fails it, whether its README claims the tokens survive (a new handle is
// granted token 1) or only that a handle that saw them detects the regress
// (this one does not: it grants token 1 again too).
func TestSurvivalCatchesForgetfulStores(t *testing.T) {
	for mode, want := range map[string]string{
		"claims-survival":  "did not survive the loss",
		"claims-detection": "the handle that saw token",
	} {
		t.Run(mode, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestSurvivalHelper$", "-test.v")
			cmd.Env = append(os.Environ(), "STORETEST_SURVIVAL="+mode)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("the suite passed a store that forgets its tokens, claiming survives=%v:\n%s", mode == "claims-survival", out)
			}
			if !strings.Contains(string(out), "--- FAIL: TestSurvivalHelper/TokensSurviveLoss/backend_emptied") || !strings.Contains(string(out), want) {
				t.Fatalf("want TokensSurviveLoss/backend_emptied to fail with %q; output:\n%s", want, out)
			}
			// Every other case passes: only the survival check catches this store.
			if n := strings.Count(string(out), "--- FAIL:"); n != 3 {
				t.Fatalf("want exactly the survival case (and its parents) to fail, got %d failures:\n%s", n, out)
			}
		})
	}
}

// TestSurvivalPassesAStoreThatKeepsItsData is the positive control: a loss
// that loses nothing, claimed survived, passes.
func TestSurvivalPassesAStoreThatKeepsItsData(t *testing.T) {
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T) func() (store.Store, error) {
			b := memstore.NewBackend(nil)
			return func() (store.Store, error) { return memstore.Open(b), nil }
		},
		MinTTL: 20 * time.Millisecond,
		Losses: []storetest.Loss{{
			Name:     "nothing lost",
			Lose:     func(*testing.T, func() (store.Store, error), string) error { return nil },
			Survives: true,
		}},
	})
}
