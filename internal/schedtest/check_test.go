// The check, in a test file: its forgetful store (the negative control)
// embeds store.Store, which only test code may do.

package schedtest

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store"
)

// Run is one run of the job, as the job saw it.
type Run struct {
	Node    string
	Period  time.Time
	Token   int64
	Started time.Time // the test process's own clock: one clock for all nodes
}

// Options of one check.
type Options struct {
	// Open opens a new handle on the store under test (one per node, as
	// separate processes would have).
	Open func(t *testing.T) store.Store
	// Skews are the nodes' wall-clock offsets, one node each.
	Skews []time.Duration
	// Every is the period; Periods how many periods the check runs.
	Every   time.Duration
	Periods int
	// Timings of the nodes' leases.
	Timings leasehold.Timings
	// Forget makes every node's store forget the records of period claims
	// (Get answers ErrNotFound): the negative control, under which the
	// scheduler's claim is any grant of a period's name.
	Forget bool
	// NoNegativeControl, if set, says why the negative control cannot show
	// a double run on this store; Check then skips it, loudly.
	NoNegativeControl string
}

// forgetful forgets the records of period claims.
type forgetful struct{ store.Store }

func (f forgetful) Get(ctx context.Context, name string) (store.Record, error) {
	if strings.Contains(name, "/period-") {
		return store.Record{}, store.ErrNotFound
	}
	return f.Store.Get(ctx, name)
}

// Schedule runs the nodes of o on the job name and returns every run, in the
// order they started.
func Schedule(t *testing.T, name string, o Options) []Run {
	t.Helper()
	var (
		mu   sync.Mutex
		runs []Run
	)
	// Start at a period boundary, so that every node sees Periods periods.
	now := time.Now()
	start := now.Truncate(o.Every).Add(o.Every)
	ctx, cancel := context.WithDeadline(context.Background(), start.Add(time.Duration(o.Periods)*o.Every))
	defer cancel()
	var wg sync.WaitGroup
	for i, skew := range o.Skews {
		node := fmt.Sprintf("node-%d", i)
		st := o.Open(t)
		if o.Forget {
			st = forgetful{st}
		}
		s, err := leasehold.NewScheduler(st, name, leasehold.Config{Identity: node, Timings: o.Timings},
			leasehold.Schedule{Every: o.Every, Missed: leasehold.MissedRunOnce,
				Now: func() time.Time { return time.Now().Add(skew) }})
		if err != nil {
			t.Fatalf("NewScheduler: %v", err)
		}
		job := func(ctx context.Context, p time.Time, l *leasehold.Lease) error {
			mu.Lock()
			runs = append(runs, Run{Node: node, Period: p, Token: l.Token(), Started: time.Now()})
			mu.Unlock()
			return nil
		}
		wg.Go(func() {
			// Nodes begin together at the boundary.
			select {
			case <-time.After(time.Until(start)):
			case <-ctx.Done():
			}
			if err := s.Run(ctx, job); !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("%s: Run = %v", node, err)
			}
		})
	}
	wg.Wait()
	sort.Slice(runs, func(i, j int) bool { return runs[i].Started.Before(runs[j].Started) })
	return runs
}

// Twice returns the periods that ran more than once, with their runs.
func Twice(runs []Run) map[time.Time][]Run {
	by := map[time.Time][]Run{}
	for _, r := range runs {
		by[r.Period] = append(by[r.Period], r)
	}
	for p, rs := range by {
		if len(rs) < 2 {
			delete(by, p)
		}
	}
	return by
}

// Check runs the schedule of o and fails t if a period ran twice, if fewer
// than Periods-2 periods ran, or if the run lease's tokens did not rise from
// run to run. Beside it, it runs the negative control (Forget) and fails t if
// no period ran twice there: the check must be able to see a double run.
func Check(t *testing.T, o Options) {
	t.Helper()
	// The two runs at once: each waits out its periods in real time. (Not
	// t.Parallel, whose cap of -parallel, GOMAXPROCS, the stores' tests
	// already share.)
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { checkOnce(t, o) })
	wg.Go(func() { checkNegativeControl(t, o) })
}

func checkOnce(t *testing.T, o Options) {
	t.Run("at-most-once", func(t *testing.T) {
		o := o
		o.Forget = false
		runs := Schedule(t, "sched-"+fmt.Sprint(time.Now().UnixNano()), o)
		if dup := Twice(runs); len(dup) > 0 {
			t.Fatalf("periods run twice: %v", dup)
		}
		if len(runs) < o.Periods-2 {
			t.Fatalf("%d runs in %d periods, want at least %d: %+v", len(runs), o.Periods, o.Periods-2, runs)
		}
		for i := 1; i < len(runs); i++ {
			if runs[i].Token <= runs[i-1].Token {
				t.Fatalf("run %d has token %d after %d: the run lease's tokens must rise (%+v)", i, runs[i].Token, runs[i-1].Token, runs)
			}
		}
		t.Logf("%d runs over %d periods of the common clock by %d nodes with skews %v: no period name ran twice", len(runs), o.Periods, len(o.Skews), o.Skews)
	})
}

func checkNegativeControl(t *testing.T, o Options) {
	t.Run("negative-control", func(t *testing.T) {
		if o.NoNegativeControl != "" {
			t.Skipf("SKIPPED: no negative control on this store: %s", o.NoNegativeControl)
		}
		o := o
		o.Forget = true
		runs := Schedule(t, "sched-nc-"+fmt.Sprint(time.Now().UnixNano()), o)
		dup := Twice(runs)
		if len(dup) == 0 {
			t.Fatalf("with period claims forgotten no period ran twice in %d runs: this check cannot see a double run", len(runs))
		}
		t.Logf("negative control: %d periods ran twice (of %d runs) when the store forgot the claims", len(dup), len(runs))
	})
}
