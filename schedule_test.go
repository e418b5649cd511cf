package leasehold_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/faultstore"
	"github.com/leasehold/leasehold/store/memstore"
)

// jobRun is one run of a scheduled job, as the job saw it.
type jobRun struct {
	node    string
	period  time.Time
	token   int64
	started time.Time // virtual time, the test's one true clock
}

type runLog struct {
	mu   sync.Mutex
	runs []jobRun
}

func (l *runLog) job(node string, hold time.Duration) leasehold.JobFunc {
	return func(ctx context.Context, period time.Time, lease *leasehold.Lease) error {
		l.mu.Lock()
		l.runs = append(l.runs, jobRun{node: node, period: period, token: lease.Token(), started: time.Now()})
		l.mu.Unlock()
		if hold > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(hold):
			}
		}
		return nil
	}
}

func (l *runLog) all() []jobRun {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]jobRun(nil), l.runs...)
}

// twice returns the periods run more than once.
func twice(runs []jobRun) []string {
	seen := map[time.Time][]string{}
	var dup []string
	for _, r := range runs {
		seen[r.period] = append(seen[r.period], r.node)
		if len(seen[r.period]) == 2 {
			dup = append(dup, r.period.Format(time.TimeOnly))
		}
	}
	return dup
}

func newScheduler(t *testing.T, st store.Store, node string, skew time.Duration, sched leasehold.Schedule) *leasehold.Scheduler {
	t.Helper()
	sched.Now = func() time.Time { return time.Now().Add(skew) }
	s, err := leasehold.NewScheduler(st, "nightly", leasehold.Config{Identity: node, Clock: virtualClock{skew}}, sched)
	if err != nil {
		t.Fatalf("NewScheduler: %v", err)
	}
	return s
}

// forgetful is a store that forgets every record of a period's claim (Get
// says it was never granted): the scheduler's claim is then any grant of the
// period's name, the naive design a skewed clock defeats. The negative
// control of the at-most-once tests; it also shows why a store's loss of its
// records is a caveat of the guarantee.
type forgetful struct{ store.Store }

func (f forgetful) Get(ctx context.Context, name string) (store.Record, error) {
	if strings.Contains(name, "/period-") {
		return store.Record{}, store.ErrNotFound
	}
	return f.Store.Get(ctx, name)
}

// skewedNodes runs one scheduler per skew for d of virtual time and returns
// the runs.
func skewedNodes(t *testing.T, skews []time.Duration, d time.Duration, sched leasehold.Schedule, naive bool) []jobRun {
	f := newFixture()
	log := &runLog{}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var wg sync.WaitGroup
	for i, skew := range skews {
		node := fmt.Sprintf("node-%d", i)
		var st store.Store = f.faulty()
		if naive {
			st = forgetful{st}
		}
		s := newScheduler(t, st, node, skew, sched)
		wg.Go(func() {
			if err := s.Run(ctx, log.job(node, 0)); !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("%s: Run = %v", node, err)
			}
		})
	}
	wg.Wait()
	return log.all()
}

// Nodes whose wall clocks disagree by more than a period never run one
// period twice, with a fast job and either missed policy: the period's claim
// is the first grant of its lease name, whatever the clocks say. The naive
// claim (any grant of the name) runs periods twice with the same clocks.
func TestScheduleAtMostOncePerPeriodUnderSkew(t *testing.T) {
	skews := []time.Duration{0, 70 * time.Second, -130 * time.Second, 3 * time.Second}
	for _, missed := range []leasehold.Missed{leasehold.MissedSkip, leasehold.MissedRunOnce} {
		for _, naive := range []bool{false, true} {
			name := fmt.Sprintf("missed=%d/naive=%v", missed, naive)
			t.Run(name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					runs := skewedNodes(t, skews, 20*time.Minute, leasehold.Schedule{Every: time.Minute, Missed: missed, Grace: 50 * time.Second}, naive)
					dup := twice(runs)
					if naive {
						if len(dup) == 0 {
							t.Fatalf("negative control: the naive claim never ran a period twice in %d runs; the test cannot see a double run", len(runs))
						}
						return
					}
					if len(dup) > 0 {
						t.Fatalf("periods run twice: %v (runs %+v)", dup, runs)
					}
					if len(runs) < 15 {
						t.Fatalf("%d runs in 20 periods, want at least 15", len(runs))
					}
					for i := 1; i < len(runs); i++ {
						if runs[i].token <= runs[i-1].token {
							t.Fatalf("run %d token %d after %d: the run lease's tokens must rise", i, runs[i].token, runs[i-1].token)
						}
					}
				})
			})
		}
	}
}

// A node that starts late in a period runs it at once with MissedRunOnce,
// and waits for the next period with MissedSkip.
func TestScheduleMissedPolicy(t *testing.T) {
	for _, c := range []struct {
		missed     leasehold.Missed
		wantPeriod time.Duration // from the start of the period the node started in
		wantAt     time.Duration // from the node's start
	}{
		{leasehold.MissedRunOnce, 0, 0},
		{leasehold.MissedSkip, time.Minute, 30 * time.Second},
	} {
		t.Run(fmt.Sprint(c.missed), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				now := time.Now()
				p0 := now.Truncate(time.Minute)
				// Start 30s into a period.
				time.Sleep(p0.Add(90 * time.Second).Sub(now))
				p0 = p0.Add(time.Minute)
				start := time.Now()
				f := newFixture()
				log := &runLog{}
				s := newScheduler(t, f.faulty(), "node-a", 0, leasehold.Schedule{Every: time.Minute, Missed: c.missed})
				ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
				defer cancel()
				s.Run(ctx, log.job("node-a", 0))
				runs := log.all()
				if len(runs) == 0 || !runs[0].period.Equal(p0.Add(c.wantPeriod)) || runs[0].started.Sub(start) != c.wantAt {
					t.Fatalf("runs = %+v, want the first for period %v at +%v", runs, p0.Add(c.wantPeriod), c.wantAt)
				}
			})
		})
	}
}

// The job's context ends at MaxHold (default: the period), and the lease is
// released only after the job returned; MinHold keeps a fast job's lease
// until MinHold after the grant.
func TestScheduleHolds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture()
		time.Sleep(time.Now().Truncate(time.Minute).Add(time.Minute).Sub(time.Now()))
		start := time.Now()
		var ended time.Time
		var cause error
		slow := func(ctx context.Context, p time.Time, l *leasehold.Lease) error {
			<-ctx.Done()
			if ended.IsZero() {
				ended, cause = time.Now(), context.Cause(ctx)
			}
			time.Sleep(2 * time.Second) // drains for 2s
			if r := f.get(t, "nightly"); !r.Live() {
				t.Errorf("the run's lease ended while the job runs: %+v", r)
			}
			return nil
		}
		s := newScheduler(t, f.faulty(), "node-a", 0, leasehold.Schedule{Every: time.Minute})
		ctx, cancel := context.WithTimeout(context.Background(), 70*time.Second)
		defer cancel()
		s.Run(ctx, slow)
		if ended.Sub(start) != time.Minute || !errors.Is(cause, leasehold.ErrMaxHold) {
			t.Fatalf("job context ended at +%v (%v), want +1m0s with ErrMaxHold (MaxHold defaults to Every)", ended.Sub(start), cause)
		}

		// MinHold: a job that returns at once keeps the lease for 20s.
		g := newFixture()
		s = newScheduler(t, g.faulty(), "node-a", 0, leasehold.Schedule{Every: time.Minute, MinHold: 20 * time.Second})
		time.Sleep(time.Now().Truncate(time.Minute).Add(time.Minute).Sub(time.Now()))
		ctx, cancel = context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			s.Run(ctx, func(context.Context, time.Time, *leasehold.Lease) error { return nil })
		}()
		time.Sleep(19 * time.Second)
		if r := g.get(t, "nightly"); !r.Live() {
			t.Fatalf("released before MinHold: %+v", r)
		}
		time.Sleep(2 * time.Second)
		if r := g.get(t, "nightly"); r.Live() {
			t.Fatalf("still held after MinHold: %+v", r)
		}
		if r := g.get(t, "nightly"); r.Token != 1 {
			t.Fatalf("record %+v, want token 1", r)
		}
		cancel()
		<-done
	})
}

// A claim whose answer was lost is never run and never tried again: the
// claim may have been granted. A claim granted later than RenewDeadline after
// its check is not run either.
func TestScheduleUncertainClaimNotRun(t *testing.T) {
	for _, mode := range []faultstore.Fault{
		{Mode: faultstore.LoseReply, Times: 1},
		{Mode: faultstore.Pass, Latency: 11 * time.Second, Times: 1},
	} {
		t.Run(fmt.Sprint(mode.Mode), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFixture()
				st := f.faulty()
				st.Inject(mode, faultstore.OpAcquire)
				time.Sleep(time.Now().Truncate(time.Minute).Add(time.Minute).Sub(time.Now()))
				p := time.Now().UTC()
				var skipped []error
				log := &runLog{}
				s := newScheduler(t, st, "node-a", 0, leasehold.Schedule{Every: time.Minute, Missed: leasehold.MissedRunOnce,
					OnSkip: func(period time.Time, err error) { skipped = append(skipped, err) }})
				ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
				defer cancel()
				s.Run(ctx, log.job("node-a", 0))
				runs := log.all()
				if len(skipped) != 1 || !errors.Is(skipped[0], leasehold.ErrPeriodUncertain) {
					t.Fatalf("skipped = %v, want one ErrPeriodUncertain", skipped)
				}
				if len(runs) != 1 || !runs[0].period.Equal(p.Add(time.Minute)) {
					t.Fatalf("runs = %+v, want only the next period's", runs)
				}
				if st.Calls(faultstore.OpAcquire) != 3 {
					// the lost claim, the next period's claim and its run lease
					t.Errorf("acquires = %d, want 3", st.Calls(faultstore.OpAcquire))
				}
			})
		})
	}
}

// A run still holding the lease when the next period starts (MaxHold above
// the period, a job that ignores its context) makes the next period's claimer
// wait, and give up when its period ends: runs never overlap.
func TestSchedulePeriodOver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture()
		time.Sleep(time.Now().Truncate(time.Minute).Add(time.Minute).Sub(time.Now()))
		log := &runLog{}
		var skipped []error
		sched := leasehold.Schedule{Every: time.Minute, OnSkip: func(p time.Time, err error) { skipped = append(skipped, err) }}
		a, err := leasehold.NewScheduler(f.faulty(), "nightly", leasehold.Config{Identity: "a", MaxHold: 5 * time.Minute, Clock: virtualClock{}}, sched)
		if err != nil {
			t.Fatal(err)
		}
		b := newScheduler(t, f.faulty(), "node-b", 0, sched)
		ctx, cancel := context.WithTimeout(context.Background(), 170*time.Second)
		defer cancel()
		var wg sync.WaitGroup
		wg.Go(func() {
			a.Run(ctx, func(c context.Context, p time.Time, l *leasehold.Lease) error {
				log.job("a", 0)(c, p, l)
				time.Sleep(150 * time.Second) // ignores its context
				return nil
			})
		})
		synctest.Wait()
		wg.Go(func() { b.Run(ctx, log.job("b", 0)) })
		wg.Wait()
		runs := log.all()
		if len(runs) != 2 || runs[0].node != "a" || runs[1].node != "b" || runs[1].started.Sub(runs[0].started) != 150*time.Second {
			t.Fatalf("runs = %+v, want a's, then b's (the third period) 150s later, when a returned", runs)
		}
		var over int
		for _, e := range skipped {
			if errors.Is(e, leasehold.ErrPeriodOver) {
				over++
			}
		}
		if over != 1 {
			t.Fatalf("skipped = %v, want one ErrPeriodOver (b's first period)", skipped)
		}
	})
}

func TestScheduleConfig(t *testing.T) {
	st := memstore.New()
	for _, c := range []struct {
		name  string
		sched leasehold.Schedule
		cfg   leasehold.Config
	}{
		{"zero every", leasehold.Schedule{}, leasehold.Config{}},
		{"fractional every", leasehold.Schedule{Every: 1500 * time.Millisecond}, leasehold.Config{}},
		{"bad policy", leasehold.Schedule{Every: time.Minute, Missed: 7}, leasehold.Config{}},
		{"grace above every", leasehold.Schedule{Every: time.Minute, Grace: 2 * time.Minute}, leasehold.Config{}},
		{"minHold above maxHold", leasehold.Schedule{Every: time.Minute, MinHold: 2 * time.Minute}, leasehold.Config{}},
		{"minHold above given maxHold", leasehold.Schedule{Every: time.Minute, MinHold: 30 * time.Second}, leasehold.Config{MaxHold: 20 * time.Second}},
	} {
		c.cfg.Identity = "a"
		if _, err := leasehold.NewScheduler(st, "nightly", c.cfg, c.sched); !errors.Is(err, leasehold.ErrInvalidConfig) {
			t.Errorf("%s: %v, want ErrInvalidConfig", c.name, err)
		}
	}
}
