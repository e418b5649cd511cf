package leasehold_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store/faultstore"
)

// MaxHold ends the work's context at the cap (measured from the acquire's
// send time), stops renewing, and releases only after the work has returned.
func TestMaxHoldCancelsThenReleasesAfterWork(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture()
		st := f.faulty()
		rec := &recorder{}
		e := newElector(t, st, "node-a", rec, func(c *leasehold.Config) {
			c.MaxHold = 32 * time.Second
			c.StopOnLoss = true
			c.Clock = virtualClock{}
		})
		work, terms := worker(3 * time.Second) // takes 3s to stop
		start := time.Now()
		errc := make(chan error, 1)
		go func() { errc <- e.Run(context.Background(), work) }()
		time.Sleep(33 * time.Second) // cancelled at +32s, still draining
		if r := f.get(t, "sweeper"); !r.Live() {
			t.Fatalf("term ended while the work still runs: %+v", r)
		}
		if n := len(rec.of(leasehold.EventReleased)); n != 0 {
			t.Fatalf("%d releases while the work runs", n)
		}
		if err := <-errc; !errors.Is(err, leasehold.ErrMaxHold) {
			t.Fatalf("Run = %v, want ErrMaxHold (StopOnLoss)", err)
		}
		got := terms()
		if len(got) != 1 || got[0].stopped.Sub(start) != 32*time.Second || !errors.Is(got[0].cause, leasehold.ErrMaxHold) {
			t.Fatalf("terms = %+v, want one cancelled at +32s with ErrMaxHold", got)
		}
		rel := rec.of(leasehold.EventReleased)
		if len(rel) != 1 || rel[0].Err != nil || rel[0].at.Before(got[0].returned) {
			t.Fatalf("releases = %+v, want one, after the work returned at +%v", rel, got[0].returned.Sub(start))
		}
		// Renewals sent at +5s .. +30s, none after the cap.
		for _, r := range rec.of(leasehold.EventRenewed) {
			if r.at.Sub(start) > 32*time.Second {
				t.Errorf("renewed at +%v, after the cap", r.at.Sub(start))
			}
		}
		if reason := leasehold.LossReason(got[0].cause); reason != "max-hold" {
			t.Errorf("LossReason = %q, want max-hold", reason)
		}
	})
}

// A stuck holder (work that ignores its context) loses the lease to a rival
// once its last renewal expires on the store's clock, and is never released
// while it runs. The negative control, without MaxHold, keeps the lease.
func TestMaxHoldStuckHolderExpires(t *testing.T) {
	for _, capped := range []bool{true, false} {
		t.Run(map[bool]string{true: "capped", false: "no-cap (negative control)"}[capped], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFixture()
				st := f.faulty()
				rec := &recorder{}
				e := newElector(t, st, "node-a", rec, func(c *leasehold.Config) {
					c.Clock = virtualClock{}
					if capped {
						c.MaxHold = 32 * time.Second
					}
				})
				unstick := make(chan struct{})
				stuck := func(ctx context.Context, l *leasehold.Lease) error { <-unstick; return nil }
				ctx, cancel := context.WithCancel(context.Background())
				errc := make(chan error, 1)
				start := time.Now()
				go func() { errc <- e.Run(ctx, stuck) }()
				synctest.Wait()
				rival, err := leasehold.NewLock(f.faulty(), "sweeper", leasehold.Config{Identity: "node-b"})
				if err != nil {
					t.Fatal(err)
				}
				actx, acancel := context.WithTimeout(context.Background(), 5*time.Minute)
				l, err := rival.Acquire(actx)
				acancel()
				if !capped {
					if err == nil {
						t.Fatalf("without MaxHold the rival acquired at +%v; the stuck holder should keep renewing", time.Since(start))
					}
				} else {
					if err != nil {
						t.Fatalf("rival Acquire: %v", err)
					}
					// Last renewal sent at +30s (the one at +35s is past the cap),
					// so the store's term expires at +45s.
					if at := time.Since(start); at != 45*time.Second {
						t.Errorf("rival acquired at +%v, want +45s (last renewal +30s plus the 15s lease)", at)
					}
					l.Release(context.Background())
				}
				if n := len(rec.of(leasehold.EventReleased)); n != 0 {
					t.Errorf("%d releases while the stuck work runs", n)
				}
				if capped && st.Calls(faultstore.OpRenew) != 6 {
					t.Errorf("renewals = %d, want 6 (+5s .. +30s)", st.Calls(faultstore.OpRenew))
				}
				close(unstick)
				cancel()
				<-errc
			})
		})
	}
}

// A Lock with KeepAlive and MaxHold: the lease's context ends at the cap.
func TestMaxHoldLock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture()
		l := newLock(t, f.faulty(), "node-a", func(c *leasehold.Config) {
			c.KeepAlive = true
			c.MaxHold = time.Minute
			c.Clock = virtualClock{}
		})
		start := time.Now()
		lease, err := l.Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		<-lease.Context().Done()
		if at := time.Since(start); at != time.Minute || !errors.Is(context.Cause(lease.Context()), leasehold.ErrMaxHold) {
			t.Fatalf("context ended at +%v with %v, want +1m0s with ErrMaxHold", at, context.Cause(lease.Context()))
		}
		if r := f.get(t, "invoice-42"); !r.Live() {
			t.Fatalf("the term ended before Release: %+v", r)
		}
		if err := lease.Release(context.Background()); err != nil {
			t.Fatalf("Release after the cap: %v", err)
		}
		if r := f.get(t, "invoice-42"); r.Live() {
			t.Fatalf("still held after Release: %+v", r)
		}
	})
}

func TestMaxHoldConfig(t *testing.T) {
	f := newFixture()
	_, err := leasehold.NewLock(f.faulty(), "x", leasehold.Config{Identity: "a", MaxHold: -time.Second})
	if !errors.Is(err, leasehold.ErrInvalidConfig) {
		t.Errorf("negative MaxHold: %v, want ErrInvalidConfig", err)
	}
	_, err = leasehold.NewKeeper(f.faulty(), leasehold.Config{Identity: "a", MaxHold: time.Second})
	if !errors.Is(err, leasehold.ErrInvalidConfig) {
		t.Errorf("Keeper with MaxHold: %v, want ErrInvalidConfig", err)
	}
}
