package leasehold_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/faultstore"
	"github.com/leasehold/leasehold/store/memstore"
)

// Default timings: lease 15s, renew deadline 10s, renew every 5s, retry 2s.

// SAFETY rule 6: safeUntil = send time of the last successful request +
// renewDeadline, not its answer time; at safeUntil the work's context is
// cancelled whatever a renewal in flight may say.
func TestSafeUntilCountsFromSendTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture()
		st := f.faulty()
		rec := &recorder{}
		e := newElector(t, st, "node-a", rec, nil)
		// The first renewal (sent at 5s) is answered 1s late; after it the
		// store is cut off: every call hangs.
		st.Inject(faultstore.Fault{Latency: time.Second, Times: 1}, faultstore.OpRenew)
		rec.hook(func(ev leasehold.Event) {
			if ev.Kind == leasehold.EventRenewed {
				st.Partition()
			}
		})
		work, terms := worker(0)
		start := time.Now()
		stop, _ := running(e, work)
		time.Sleep(30 * time.Second)
		stop()

		got := terms()
		if len(got) != 1 {
			t.Fatalf("terms = %+v, want exactly one", got)
		}
		if d := got[0].started.Sub(start); d != 0 {
			t.Errorf("work started at +%v, want +0s", d)
		}
		renewed := rec.of(leasehold.EventRenewed)
		if len(renewed) != 1 || renewed[0].at.Sub(start) != 6*time.Second || renewed[0].SafeUntil.Sub(start) != 15*time.Second {
			t.Fatalf("renewals = %+v, want one answered at +6s with safeUntil +15s (sent at +5s, plus 10s)", renewed)
		}
		if d := got[0].stopped.Sub(start); d != 15*time.Second {
			t.Errorf("work context cancelled at +%v, want exactly +15s (renewal sent at +5s + renewDeadline 10s)", d)
		}
		if !errors.Is(got[0].cause, leasehold.ErrSafeUntilPassed) {
			t.Errorf("cause = %v, want ErrSafeUntilPassed", got[0].cause)
		}
	})
}

// Renewals that never succeed: the context is cancelled at acquire's send
// time + renewDeadline, while renewal attempts are still in flight.
func TestSafeUntilWhenEveryRenewalHangs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture()
		st := f.faulty()
		// StopOnLoss keeps it from re-acquiring, to read one term.
		e := newElector(t, st, "node-a", nil, func(c *leasehold.Config) { c.StopOnLoss = true })
		// Acquire takes 1.5s to answer; renewals hang.
		st.Inject(faultstore.Fault{Latency: 1500 * time.Millisecond, Times: 1}, faultstore.OpAcquire)
		st.Inject(faultstore.Fault{Mode: faultstore.Hang}, faultstore.OpRenew)
		work, terms := worker(0)
		start := time.Now()
		stop, _ := running(e, work)
		time.Sleep(30 * time.Second)
		stop()
		got := terms()
		if len(got) != 1 {
			t.Fatalf("terms = %+v, want one", got)
		}
		if d := got[0].started.Sub(start); d != 1500*time.Millisecond {
			t.Errorf("work started at +%v, want +1.5s", d)
		}
		if d := got[0].stopped.Sub(start); d != 10*time.Second {
			t.Errorf("work context cancelled at +%v, want exactly +10s (acquire sent at 0 + renewDeadline)", d)
		}
		// Renewals were attempted at 5s, then each retryPeriod (2s, each attempt
		// timing out after 2s): 5, 7, 9.
		if n := st.Calls(faultstore.OpRenew); n != 3 {
			t.Errorf("renew attempts = %d, want 3 (at 5s, 7s, 9s)", n)
		}
	})
}

// WindDown cancels the work's context that long before safeUntil.
func TestWindDownCancelsEarly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture()
		st := f.faulty()
		st.Inject(faultstore.Fault{Mode: faultstore.Hang}, faultstore.OpRenew)
		e := newElector(t, st, "node-a", nil, func(c *leasehold.Config) {
			c.Timings.WindDown = 3 * time.Second
			c.StopOnLoss = true
		})
		work, terms := worker(0)
		start := time.Now()
		err := e.Run(context.Background(), work)
		if !errors.Is(err, leasehold.ErrSafeUntilPassed) {
			t.Fatalf("Run = %v, want ErrSafeUntilPassed (StopOnLoss)", err)
		}
		if got := terms(); len(got) != 1 || got[0].stopped.Sub(start) != 7*time.Second {
			t.Fatalf("terms = %+v, want one cancelled at +7s (10s deadline - 3s wind-down)", got)
		}
	})
}

// A holder whose term was taken over while it was paused (the store's clock
// ran on past its expiry) stops at its next renewal, which is refused.
func TestTakenOverDuringPauseStops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture()
		e := newElector(t, f.faulty(), "node-a", nil, nil)
		work, terms := worker(0)
		start := time.Now()
		stop, _ := running(e, work)
		time.Sleep(time.Second)
		f.advanceStoreClock(20 * time.Second) // the store saw the lease expire
		rival, err := memstore.Open(f.backend).Acquire(context.Background(), "sweeper", "rival", 15*time.Second, "")
		if err != nil {
			t.Fatalf("rival takeover: %v", err)
		}
		time.Sleep(10 * time.Second)
		got := terms()
		if len(got) != 1 {
			t.Fatalf("terms = %+v, want one", got)
		}
		if d := got[0].stopped.Sub(start); d != 5*time.Second || !errors.Is(got[0].cause, leasehold.ErrLeaseLost) {
			t.Errorf("stopped at +%v with %v; want +5s (first renewal) and ErrLeaseLost", d, got[0].cause)
		}
		if rival.Token <= got[0].token {
			t.Errorf("rival token %d not above %d", rival.Token, got[0].token)
		}
		if st := e.Status(); st.Leading || !st.Contending {
			t.Errorf("status after loss = %+v, want not leading and contending again", st)
		}
		stop()
	})
}

// SAFETY rule 12: the lease is released only after the work has returned.
func TestReleaseOnlyAfterWorkReturns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture()
		st := f.faulty()
		rec := &recorder{}
		e := newElector(t, st, "node-a", rec, nil)
		work, terms := worker(3 * time.Second) // takes 3s to stop
		start := time.Now()
		stop, _ := running(e, work)
		time.Sleep(time.Second)
		if r := f.get(t, "sweeper"); !r.Live() {
			t.Fatalf("lease not held while leading: %+v", r)
		}
		if err := stop(); !errors.Is(err, context.Canceled) {
			t.Fatalf("Run = %v, want context.Canceled", err)
		}
		got := terms()
		if len(got) != 1 || got[0].stopped.Sub(start) != time.Second || got[0].returned.Sub(start) != 4*time.Second {
			t.Fatalf("terms = %+v, want cancelled at +1s, returned at +4s", got)
		}
		rel := rec.of(leasehold.EventReleased)
		if len(rel) != 1 || rel[0].Err != nil {
			t.Fatalf("releases = %+v, want one successful", rel)
		}
		if rel[0].at.Before(got[0].returned) {
			t.Errorf("released at +%v, before the work returned at +%v", rel[0].at.Sub(start), got[0].returned.Sub(start))
		}
		if st.Calls(faultstore.OpRelease) != 1 {
			t.Errorf("release calls = %d, want 1", st.Calls(faultstore.OpRelease))
		}
		if r := f.get(t, "sweeper"); r.Live() || r.Token != got[0].token {
			t.Errorf("after shutdown the record is %+v, want released with token %d kept", r, got[0].token)
		}
	})
}

// SAFETY rule 13: after a loss the node contends again, and leads again
// when the lease is free, with a higher token.
func TestLoserContendsAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture()
		a := newElector(t, f.faulty(), "node-a", nil, nil)
		b := newElector(t, f.faulty(), "node-b", nil, nil)
		workA, termsA := worker(0)
		workB, termsB := worker(0)
		start := time.Now()
		stopA, _ := running(a, workA)
		synctest.Wait()
		stopB, _ := running(b, workB)
		time.Sleep(time.Second)
		if !f.backend.ForceRelease("sweeper") { // an operator evicts node-a
			t.Fatal("force release found no live term")
		}
		time.Sleep(7 * time.Second) // node-b took over at +1s; node-a lost at +5s
		if err := stopB(); !errors.Is(err, context.Canceled) {
			t.Fatalf("b.Run = %v", err)
		}
		time.Sleep(time.Second)
		stopA()

		ga, gb := termsA(), termsB()
		if len(gb) != 1 || gb[0].started.Sub(start) != time.Second || gb[0].token != 2 {
			t.Fatalf("node-b terms = %+v, want token 2 from +1s (woken by the release)", gb)
		}
		if len(ga) != 2 {
			t.Fatalf("node-a terms = %+v, want two", ga)
		}
		if ga[0].token != 1 || ga[0].stopped.Sub(start) != 5*time.Second || !errors.Is(ga[0].cause, leasehold.ErrLeaseLost) {
			t.Errorf("node-a first term = %+v, want token 1 lost at +5s", ga[0])
		}
		if ga[1].token != 3 || ga[1].started.Sub(start) != 8*time.Second {
			t.Errorf("node-a second term = %+v, want token 3 from +8s (b's release)", ga[1])
		}
	})
}

// Candidates retry every retryPeriod plus at most jitter × retryPeriod.
func TestCandidateJitterInBounds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture()
		a := newElector(t, f.faulty(), "node-a", nil, nil)
		recB := &recorder{}
		b := newElector(t, f.faulty(), "node-b", recB, nil)
		workA, _ := worker(0)
		workB, _ := worker(0)
		stopA, _ := running(a, workA)
		synctest.Wait()
		stopB, _ := running(b, workB)
		time.Sleep(5 * time.Minute)
		stopB()
		stopA()
		attempts := recB.of(leasehold.EventAcquireAttempt)
		if len(attempts) < 100 {
			t.Fatalf("only %d attempts in 5 minutes", len(attempts))
		}
		// The second attempt follows the first at once: the candidate
		// subscribed to the store's watch after the first refusal and tries
		// again so as not to miss a release in between.
		if d := attempts[1].at.Sub(attempts[0].at); d != 0 {
			t.Errorf("second attempt %v after the first, want at once (after subscribing)", d)
		}
		lo, hi := time.Duration(1<<62), time.Duration(0)
		for i := 2; i < len(attempts); i++ {
			if !errors.Is(attempts[i].Err, store.ErrHeld) {
				t.Fatalf("attempt %d: %v, want ErrHeld", i, attempts[i].Err)
			}
			d := attempts[i].at.Sub(attempts[i-1].at)
			lo, hi = min(lo, d), max(hi, d)
		}
		if lo < 2*time.Second || hi > 2400*time.Millisecond {
			t.Errorf("retry waits in [%v, %v], want within [2s, 2.4s]", lo, hi)
		}
		if lo == hi {
			t.Errorf("every wait was %v: no jitter", lo)
		}
	})
}

// A follower wakes exactly when a crashed holder's lease expires on the
// store's clock, not at its next retry.
func TestFollowerWakesAtExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture()
		start := time.Now()
		crashed, err := memstore.Open(f.backend).Acquire(context.Background(), "sweeper", "crashed", 15*time.Second, "")
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(500 * time.Millisecond)
		b := newElector(t, f.faulty(), "node-b", nil, nil)
		work, terms := worker(0)
		stop, _ := running(b, work)
		time.Sleep(20 * time.Second)
		stop()
		got := terms()
		if len(got) != 1 || got[0].started.Sub(start) != 15*time.Second || got[0].token != crashed.Token+1 {
			t.Fatalf("terms = %+v, want one from exactly +15s with token %d", got, crashed.Token+1)
		}
	})
}

// A release wakes a waiting candidate at once through the store's watch.
func TestReleaseWakesCandidateAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture()
		a := newElector(t, f.faulty(), "node-a", nil, nil)
		b := newElector(t, f.faulty(), "node-b", nil, nil)
		workA, _ := worker(0)
		workB, termsB := worker(0)
		stopA, _ := running(a, workA)
		synctest.Wait()
		stopB, _ := running(b, workB)
		time.Sleep(3*time.Second + 300*time.Millisecond)
		released := time.Now()
		stopA()
		synctest.Wait()
		got := termsB
		stopB()
		if g := got(); len(g) != 1 || !g[0].started.Equal(released) || g[0].token != 2 {
			t.Fatalf("node-b terms = %+v, want token 2 starting at the release instant", g)
		}
	})
}

// SAFETY rule 11: an acquire whose answer was lost may have been granted; the
// node never acts on it, and its next grant is a new, higher term.
func TestLostAcquireReplyNeverLeads(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture()
		st := f.faulty()
		st.Inject(faultstore.Fault{Mode: faultstore.LoseReply, Times: 1}, faultstore.OpAcquire)
		rec := &recorder{}
		e := newElector(t, st, "node-a", rec, nil)
		work, terms := worker(0)
		stop, _ := running(e, work)
		time.Sleep(3 * time.Second)
		stop()
		attempts := rec.of(leasehold.EventAcquireAttempt)
		if len(attempts) < 2 || !errors.Is(attempts[0].Err, faultstore.ErrLostReply) || attempts[1].Err != nil || attempts[1].Term.Token != 2 {
			t.Fatalf("attempts = %+v, want a lost reply (token 1 granted unseen), then token 2", attempts)
		}
		for _, a := range rec.of(leasehold.EventAcquired) {
			if a.Term.Token != 2 {
				t.Errorf("acted on term %v", a.Term)
			}
		}
		if got := terms(); len(got) != 1 || got[0].token != 2 {
			t.Fatalf("terms = %+v, want only token 2", got)
		}
	})
}

// A node that stops while an acquire's outcome is unknown gives back the term
// it may have been granted.
func TestUnknownAcquireGivenBackOnStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture()
		st := f.faulty()
		st.Inject(faultstore.Fault{Mode: faultstore.LoseReply}, faultstore.OpAcquire)
		e := newElector(t, st, "node-a", nil, nil)
		work, terms := worker(0)
		stop, _ := running(e, work)
		time.Sleep(time.Second)
		if r := f.get(t, "sweeper"); !r.Live() {
			t.Fatalf("store = %+v, want the lost grant live", r)
		}
		stop()
		if r := f.get(t, "sweeper"); r.Live() {
			t.Fatalf("after stop the store = %+v, want the unknown grant released", r)
		}
		if len(terms()) != 0 {
			t.Fatal("work ran on an unknown grant")
		}
	})
}

// A grant answered after its own safe deadline is given back, not used.
func TestSlowGrantGivenBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture()
		st := f.faulty()
		// The request reaches the store, which answers 11s after it was sent.
		st.Inject(faultstore.Fault{Mode: faultstore.HangAfterWrite, Times: 1}, faultstore.OpAcquire)
		rec := &recorder{}
		e := newElector(t, st, "node-a", rec, func(c *leasehold.Config) { c.Timings.Jitter = 0.01 })
		work, terms := worker(0)
		start := time.Now()
		stop, _ := running(e, work)
		time.Sleep(9 * time.Second)
		if s := e.Status(); s.Leading {
			t.Fatalf("leading on a grant that never answered: %+v", s)
		}
		time.Sleep(5 * time.Second)
		stop()
		got := terms()
		if len(got) != 1 || got[0].token != 2 {
			t.Fatalf("terms = %+v, want one, with token 2", got)
		}
		// The first attempt timed out at +10s (renewDeadline); the next came a
		// retry period later.
		if d := got[0].started.Sub(start); d < 12*time.Second || d > 12100*time.Millisecond {
			t.Errorf("led from +%v, want about +12s", d)
		}
	})
}

// When the work returns on its own, Run releases and returns its error.
func TestWorkReturnEndsRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture()
		rec := &recorder{}
		e := newElector(t, f.faulty(), "node-a", rec, nil)
		done := errors.New("swept")
		err := e.Run(context.Background(), func(ctx context.Context, l *leasehold.Lease) error {
			time.Sleep(7 * time.Second)
			return done
		})
		if !errors.Is(err, done) {
			t.Fatalf("Run = %v, want the work's error", err)
		}
		if r := f.get(t, "sweeper"); r.Live() {
			t.Fatalf("lease still held after Run returned: %+v", r)
		}
		if n := len(rec.of(leasehold.EventRenewed)); n != 1 {
			t.Errorf("renewals = %d, want 1 (at +5s)", n)
		}
	})
}

// StopOnLoss makes Run return the loss's cause.
func TestStopOnLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture()
		e := newElector(t, f.faulty(), "node-a", nil, func(c *leasehold.Config) { c.StopOnLoss = true })
		work, _ := worker(0)
		_, done := running(e, work)
		time.Sleep(time.Second)
		f.backend.ForceRelease("sweeper")
		if err := <-done; !errors.Is(err, leasehold.ErrLeaseLost) {
			t.Fatalf("Run = %v, want ErrLeaseLost", err)
		}
	})
}

// SAFETY rule 10: two processes configured with one identity are distinct
// holders, and never lead at once.
func TestSameConfiguredIdentityNeverBothLead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture()
		a := newElector(t, f.faulty(), "node", nil, nil)
		b := newElector(t, f.faulty(), "node", nil, nil)
		if a.Identity() == b.Identity() {
			t.Fatalf("both got identity %q", a.Identity())
		}
		workA, _ := worker(0)
		workB, _ := worker(0)
		stopA, _ := running(a, workA)
		stopB, _ := running(b, workB)
		for i := 0; i < 60; i++ {
			time.Sleep(time.Second)
			if a.Status().Leading && b.Status().Leading {
				t.Fatalf("both lead at +%ds", i+1)
			}
		}
		if !a.Status().Leading && !b.Status().Leading {
			t.Fatal("neither leads")
		}
		stopA()
		stopB()
	})
}

func TestRunTwiceRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture()
		e := newElector(t, f.faulty(), "node-a", nil, nil)
		work, _ := worker(0)
		stop, _ := running(e, work)
		synctest.Wait()
		if err := e.Run(context.Background(), work); !errors.Is(err, leasehold.ErrAlreadyRunning) {
			t.Fatalf("second Run = %v, want ErrAlreadyRunning", err)
		}
		stop()
	})
}

func TestHolderReportsHolderAndMetadata(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture()
		a := newElector(t, f.faulty(), "node-a", nil, func(c *leasehold.Config) { c.Metadata = "http://10.0.0.7:8080" })
		b := newElector(t, f.faulty(), "node-b", nil, nil)
		work, _ := worker(0)
		stop, _ := running(a, work)
		synctest.Wait()
		rec, err := b.Holder(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if rec.Holder != a.Identity() || rec.Metadata != "http://10.0.0.7:8080" || !rec.Live() {
			t.Fatalf("Holder() = %+v, want %s with its metadata", rec, a.Identity())
		}
		stop()
	})
}

// brokenWatch is a store whose watch breaks as soon as it is made.
type brokenWatch struct {
	*memstore.Store
	mu      sync.Mutex
	watches int
}

func (b *brokenWatch) Watch(ctx context.Context, name string) (<-chan struct{}, error) {
	b.mu.Lock()
	b.watches++
	b.mu.Unlock()
	ch := make(chan struct{})
	close(ch)
	return ch, nil
}

// A watch that keeps breaking makes the candidate poll, not spin.
func TestBrokenWatchDoesNotSpin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture()
		a := newElector(t, f.faulty(), "node-a", nil, nil)
		workA, _ := worker(0)
		stopA, _ := running(a, workA)
		synctest.Wait()
		bw := &brokenWatch{Store: memstore.Open(f.backend)}
		recB := &recorder{}
		b := newElector(t, bw, "node-b", recB, nil)
		workB, _ := worker(0)
		stopB, _ := running(b, workB)
		time.Sleep(time.Minute)
		stopB()
		stopA()
		// One poll per retry period (2-2.4s) plus one immediate retry after
		// each subscription: at most about 2 × 60s/2s attempts.
		if n := len(recB.of(leasehold.EventAcquireAttempt)); n > 62 || n < 25 {
			t.Errorf("%d acquire attempts in a minute, want about one or two per retry period", n)
		}
		if bw.watches > 31 {
			t.Errorf("%d watches in a minute, want at most one per retry period", bw.watches)
		}
	})
}

// A candidate whose watch subscription hangs, is slow, or subscribes but
// never wakes still tries again every retry period: it takes over a released
// lease within about two retry periods (2-2.4s each), not never.
func TestWatchFaultsDoNotStallCandidate(t *testing.T) {
	for _, c := range []struct {
		name  string
		fault faultstore.Fault
	}{
		{"hanging subscription", faultstore.Fault{Mode: faultstore.Hang}},
		{"slow subscription", faultstore.Fault{Latency: time.Hour}},
		{"stalled stream", faultstore.Fault{Mode: faultstore.Mute}},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFixture()
				a := newElector(t, f.faulty(), "node-a", nil, nil)
				fsB := f.faulty()
				fsB.Inject(c.fault, faultstore.OpWatch)
				b := newElector(t, fsB, "node-b", nil, nil)
				workA, _ := worker(0)
				workB, termsB := worker(0)
				stopA, _ := running(a, workA)
				synctest.Wait()
				stopB, _ := running(b, workB)
				time.Sleep(3 * time.Second)
				released := time.Now()
				stopA()
				time.Sleep(5 * time.Second)
				got := termsB
				stopB()
				g := got()
				if len(g) != 1 {
					t.Fatalf("node-b led %d terms within 5s of the release, want 1", len(g))
				}
				if d := g[0].started.Sub(released); d > 4800*time.Millisecond {
					t.Errorf("node-b took over %v after the release, want within two retry periods", d)
				}
				if fsB.Calls(faultstore.OpWatch) == 0 {
					t.Error("node-b never subscribed: the fault was not exercised")
				}
			})
		})
	}
}

// NoJitter turns jitter off: every retry wait is exactly the retry period.
func TestNoJitterWaitsExactlyRetryPeriod(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture()
		a := newElector(t, f.faulty(), "node-a", nil, nil)
		recB := &recorder{}
		b := newElector(t, f.faulty(), "node-b", recB, func(c *leasehold.Config) { c.Timings.Jitter = leasehold.NoJitter })
		workA, _ := worker(0)
		workB, _ := worker(0)
		stopA, _ := running(a, workA)
		synctest.Wait()
		stopB, _ := running(b, workB)
		time.Sleep(time.Minute)
		stopB()
		stopA()
		attempts := recB.of(leasehold.EventAcquireAttempt)
		if len(attempts) < 20 {
			t.Fatalf("only %d attempts in a minute", len(attempts))
		}
		for i := 2; i < len(attempts); i++ {
			if d := attempts[i].at.Sub(attempts[i-1].at); d != 2*time.Second {
				t.Fatalf("wait %d was %v, want exactly 2s", i, d)
			}
		}
	})
}

// The lease an Elector hands its work is released by the Elector once the
// work returns (drain before release): Release from inside the work is
// refused, and changes nothing.
func TestElectorLeaseReleaseRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture()
		e := newElector(t, f.faulty(), "node-a", nil, nil)
		var (
			relErr, again, ctxErr error
			sameCtx               bool
			term                  store.Term
			during                store.Record
		)
		err := e.Run(context.Background(), func(ctx context.Context, l *leasehold.Lease) error {
			term = l.Term()
			sameCtx = l.Context() == ctx
			relErr = l.Release(ctx)
			again = l.Release(ctx)
			ctxErr = ctx.Err()
			during, _ = memstore.Open(f.backend).Get(ctx, "sweeper")
			return nil
		})
		if err != nil {
			t.Fatalf("Run = %v, want nil (the work returned while leading)", err)
		}
		if !errors.Is(relErr, leasehold.ErrElectorOwned) || !errors.Is(again, leasehold.ErrElectorOwned) {
			t.Fatalf("Release inside the work = %v, then %v; want ErrElectorOwned both times", relErr, again)
		}
		if !sameCtx || ctxErr != nil {
			t.Fatalf("lease context is the work's: %v; after the refused Release its error is %v, want nil", sameCtx, ctxErr)
		}
		if !during.Live() || during.Term != term {
			t.Fatalf("store record after the refused Release = %+v, want term %v still live", during, term)
		}
		if after := f.get(t, "sweeper"); after.Live() {
			t.Fatalf("store record after Run = %+v, want released by the Elector", after)
		}
	})
}
