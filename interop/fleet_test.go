package interop_test

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/faultproxy"
	"github.com/leasehold/leasehold/interop/fleet"
	"github.com/leasehold/leasehold/store"
)

// The mixed-fleet tests (fleet_*_test.go) run leasehold nodes beside peers
// on one lease, each participant through its own fault proxy, with faults
// on the proxies, and check exclusion and fairness (package fleet). Each
// check has a negative control that a real run must catch.

// fleetRun is how long one mixed-fleet run lasts, and fleetControlRun the
// longest a negative control's run lasts (it ends once caught).
const (
	fleetRun        = 20 * time.Second
	fleetControlRun = 12 * time.Second
)

// controlRun is a negative control's run: it ends once an overlap involving
// who is seen. Its faults are partitions, mostly of the leader of the
// moment, long enough to end its term: the bad participant must lose a term
// to a fault to be caught.
func controlRun(faults *fleet.Faults, who string, ttl time.Duration) fleet.Options {
	faults.Kinds, faults.OnLeader = []string{fleet.FaultPartition}, 0.8
	faults.Every, faults.Min, faults.Max = ttl/2, ttl, 2*ttl
	return fleet.Options{Duration: 3 * fleetControlRun, Faults: faults, Until: fleet.Involving(who)}
}

// newProxy starts a fault proxy to target for one participant.
func newProxy(t *testing.T, target string) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.New(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// holdFor returns a hold-time draw in [lo, hi).
func holdFor(seed uint64, lo, hi time.Duration) func() time.Duration {
	rng := rand.New(rand.NewPCG(seed, 3))
	return func() time.Duration { return lo + time.Duration(rng.Int64N(int64(hi-lo))) }
}

// hideWatch hides the store's watch: the node then polls.
type hideWatch struct{ store.Store }

// requireFleet checks a mixed-fleet run: no member failed, no overlap, both
// roles led and handed over to each other, faults were injected, and every
// waiting leasehold node got in within maxWait peer terms (maxWait < 0: the
// figure is reported, not bounded).
func requireFleet(t *testing.T, res fleet.Result, minFaults, maxWait int) {
	t.Helper()
	t.Logf("fleet run:\n%s\n%s", res.Summary(), res.WaitDetail())
	if res.Err != nil {
		t.Errorf("a member failed: %v", res.Err)
	}
	for _, o := range res.Overlaps {
		t.Errorf("exclusion: %v\n%s", o, res.OverlapDetail(o))
	}
	if len(res.Overlaps) > 0 || testing.Verbose() {
		t.Logf("timeline:\n%s", res.Rec.Format(res.Terms))
	}
	for _, o := range res.AsActed {
		t.Logf("note: trusting the peer until its own loss signal (past its own deadline): %v", o)
	}
	if lh, peer, toLH, toPeer, ok := interplay(res); !ok {
		t.Errorf("too little happened: %d leasehold terms, %d peer terms, %d hand-overs peer->leasehold, %d leasehold->peer", lh, peer, toLH, toPeer)
	}
	if res.FaultCount < minFaults {
		t.Errorf("%d faults injected, want at least %d", res.FaultCount, minFaults)
	}
	requireFairness(t, res, maxWait)
}

// requireFairness: every waiting leasehold node got in within maxWait peer
// terms (maxWait < 0: not bounded).
func requireFairness(t *testing.T, res fleet.Result, maxWait int) {
	t.Helper()
	if m := res.MaxWait(); maxWait >= 0 && m > maxWait {
		t.Errorf("fairness: a waiting leasehold node waited through %d peer terms, want at most %d (per wait: %v)\n%s", m, maxWait, res.Fairness, res.WaitDetail())
	}
}

// interplay counts a run's terms by role and its hand-overs between roles;
// ok when both roles led twice and handed over to each other.
func interplay(res fleet.Result) (lh, peer, toLH, toPeer int, ok bool) {
	for i, tm := range res.Terms {
		if tm.Role == fleet.Leasehold {
			lh++
		} else {
			peer++
		}
		if i > 0 && res.Terms[i-1].Role != tm.Role {
			if tm.Role == fleet.Leasehold {
				toLH++
			} else {
				toPeer++
			}
		}
	}
	return lh, peer, toLH, toPeer, lh >= 2 && peer >= 2 && toLH >= 1 && toPeer >= 1
}

// requireCaught checks a negative control: the run found an overlap that
// involves who.
func requireCaught(t *testing.T, res fleet.Result, who string) {
	t.Helper()
	t.Logf("negative control run:\n%s", res.Summary())
	for _, o := range res.Overlaps {
		if strings.HasPrefix(o.A.Who, who) || strings.HasPrefix(o.B.Who, who) {
			t.Logf("caught: %v\n%s", o, res.OverlapDetail(o))
			return
		}
	}
	t.Errorf("negative control not caught: no overlap involving %s in %d terms\n%s", who, len(res.Terms), res.Rec.Format(res.Terms))
}
