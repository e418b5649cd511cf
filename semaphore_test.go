package leasehold_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/faultstore"
	"github.com/leasehold/leasehold/store/memstore"
)

func newSemaphore(t *testing.T, st store.Store, identity string, slots int, mod func(*leasehold.Config)) *leasehold.Semaphore {
	t.Helper()
	cfg := leasehold.Config{Identity: identity}
	if mod != nil {
		mod(&cfg)
	}
	s, err := leasehold.NewSemaphore(st, "workers", slots, cfg)
	if err != nil {
		t.Fatalf("NewSemaphore: %v", err)
	}
	return s
}

// Two slots: two holders in slots of their own, a third is refused with every
// holder named, then wakes at the instant one releases and gets that slot with
// a higher token.
func TestSemaphoreAtMostNAndWakesOnRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture()
		ctx := context.Background()
		a := newSemaphore(t, f.faulty(), "node-a", 2, nil)
		b := newSemaphore(t, f.faulty(), "node-b", 2, nil)
		c := newSemaphore(t, f.faulty(), "node-c", 2, nil)
		la, err := a.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		lb, err := b.TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if la.Name() == lb.Name() {
			t.Fatalf("two holders in one slot %q", la.Name())
		}
		for _, l := range []*leasehold.Lease{la, lb} {
			if l.Name() != leasehold.SlotName("workers", 0) && l.Name() != leasehold.SlotName("workers", 1) {
				t.Fatalf("lease name %q is not a slot of workers", l.Name())
			}
		}
		_, err = c.TryAcquire(ctx)
		var full *leasehold.FullError
		if !errors.Is(err, leasehold.ErrHeld) || !errors.As(err, &full) || len(full.Holders) != 2 {
			t.Fatalf("TryAcquire of a full semaphore: %v, want a FullError naming both holders", err)
		}
		got := make(chan *leasehold.Lease, 1)
		go func() {
			l, err := c.Acquire(ctx)
			if err != nil {
				t.Error(err)
			}
			got <- l
		}()
		time.Sleep(1700 * time.Millisecond)
		synctest.Wait()
		select {
		case <-got:
			t.Fatal("a third holder got a slot of a full semaphore")
		default:
		}
		released := time.Now()
		if err := lb.Release(ctx); err != nil {
			t.Fatal(err)
		}
		lc := <-got
		if !time.Now().Equal(released) || lc.Name() != lb.Name() || lc.Token() != lb.Token()+1 {
			t.Fatalf("woke %v after the release in slot %q with token %d; want at once in %q with token %d",
				time.Since(released), lc.Name(), lc.Token(), lb.Name(), lb.Token()+1)
		}
		if la.Context().Err() != nil || lc.Context().Err() != nil {
			t.Fatal("a holder's context ended")
		}
		la.Release(ctx)
		lc.Release(ctx)
	})
}

// A holder that never releases (a crash): the waiter gets its slot at the
// instant the store's lease expires, with a higher token; the crashed holder
// stopped trusting its term at sent + RenewDeadline, before that.
func TestSemaphoreSafeUntilAndTakeoverAtExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture()
		ctx := context.Background()
		tm := func(c *leasehold.Config) { c.Timings.LeaseDuration = 3 * time.Second }
		a := newSemaphore(t, f.faulty(), "node-a", 1, tm)
		b := newSemaphore(t, f.faulty(), "node-b", 1, tm)
		start := time.Now()
		la, err := a.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if d := la.SafeUntil().Sub(start); d != 2*time.Second {
			t.Fatalf("safeUntil = +%v, want +2s (2/3 of a 3s lease, as a Lock)", d)
		}
		lb, err := b.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d != 3*time.Second {
			t.Fatalf("took over at +%v, want +3s (the store's expiry)", d)
		}
		if !errors.Is(context.Cause(la.Context()), leasehold.ErrSafeUntilPassed) {
			t.Fatalf("crashed holder's context: %v, want ended with ErrSafeUntilPassed before the takeover", context.Cause(la.Context()))
		}
		if lb.Name() != la.Name() || lb.Token() <= la.Token() {
			t.Fatalf("takeover %v after %v: want the same slot and a higher token", lb.Term(), la.Term())
		}
		if err := la.Release(ctx); !errors.Is(err, leasehold.ErrNotHeld) {
			t.Fatalf("release of the replaced term: %v, want ErrNotHeld", err)
		}
		lb.Release(ctx)
	})
}

// An acquire whose reply was lost may have granted a slot: the semaphore gives
// it back once it holds another, so one caller never keeps two slots.
func TestSemaphoreGivesBackUnknownGrant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture()
		ctx := context.Background()
		st := f.faulty()
		s := newSemaphore(t, st, "node-a", 2, nil)
		st.Inject(faultstore.Fault{Mode: faultstore.LoseReply, Times: 1}, faultstore.OpAcquire)
		l, err := s.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		live := 0
		for i := 0; i < 2; i++ {
			if rec := f.get(t, leasehold.SlotName("workers", i)); rec.Live() {
				live++
				if rec.Term != l.Term() {
					t.Fatalf("slot %d live with %v, want only the returned term %v", i, rec.Term, l.Term())
				}
			}
		}
		if live != 1 {
			t.Fatalf("%d slots live after one acquire with a lost reply, want 1", live)
		}
		l.Release(ctx)
	})
}

// A semaphore with keep-alive renews its slot, like a Lock.
func TestSemaphoreKeepAlive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture()
		s := newSemaphore(t, f.faulty(), "node-a", 3, func(c *leasehold.Config) { c.KeepAlive = true })
		l, err := s.Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Minute)
		if err := l.Context().Err(); err != nil {
			t.Fatalf("held context ended under keep-alive: %v", context.Cause(l.Context()))
		}
		if err := l.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		if rec := f.get(t, l.Name()); rec.Live() {
			t.Fatalf("slot still live after release: %+v", rec)
		}
	})
}

// Acquire honours its context while the semaphore is full, and leaves no term
// behind.
func TestSemaphoreAcquireCancelled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture()
		a := newSemaphore(t, f.faulty(), "node-a", 1, nil)
		b := newSemaphore(t, f.faulty(), "node-b", 1, nil)
		la, err := a.Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		if _, err := b.Acquire(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Acquire of a full semaphore with a deadline: %v, want DeadlineExceeded", err)
		}
		if rec := f.get(t, la.Name()); rec.Term != la.Term() {
			t.Fatalf("slot = %v, want the first holder's term %v", rec.Term, la.Term())
		}
		la.Release(context.Background())
	})
}

func TestNewSemaphoreBadInput(t *testing.T) {
	st := memstore.New()
	cfg := leasehold.Config{Identity: "node-a"}
	for _, c := range []struct {
		name  string
		slots int
		want  string
	}{
		{"workers", 0, "0 slots, want 1 to 256"},
		{"workers", -1, "-1 slots"},
		{"workers", leasehold.MaxSlots + 1, "257 slots"},
		{"bad name", 2, "lease name"},
		{strings.Repeat("w", store.MaxNameLen-3), 2, "slot lease names are too long"},
	} {
		_, err := leasehold.NewSemaphore(st, c.name, c.slots, cfg)
		if !errors.Is(err, leasehold.ErrInvalidConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("NewSemaphore(%q, %d): %v, want ErrInvalidConfig saying %q", c.name, c.slots, err, c.want)
		}
	}
	if _, err := leasehold.NewSemaphore(nil, "workers", 2, cfg); !errors.Is(err, leasehold.ErrInvalidConfig) {
		t.Errorf("NewSemaphore(nil store): %v, want ErrInvalidConfig", err)
	}
	if _, err := leasehold.NewSemaphore(st, "workers", 2, leasehold.Config{}); !errors.Is(err, leasehold.ErrInvalidConfig) {
		t.Errorf("NewSemaphore without an identity: %v, want ErrInvalidConfig", err)
	}
}

// A watch that fails, stalls or hangs never stalls a waiter: it polls, and
// gets the freed slot within a few retry periods of the release (a hanging
// subscription costs one retry period per attempt, for all slots together).
func TestSemaphoreWatchFaultsPoll(t *testing.T) {
	for _, mode := range []faultstore.Mode{faultstore.Fail, faultstore.Mute, faultstore.Hang} {
		synctest.Test(t, func(t *testing.T) {
			f := newFixture()
			ctx := context.Background()
			a := newSemaphore(t, f.faulty(), "node-a", 3, nil)
			st := f.faulty()
			st.Inject(faultstore.Fault{Mode: mode}, faultstore.OpWatch)
			b := newSemaphore(t, st, "node-b", 3, nil)
			for i := 0; i < 2; i++ {
				l, err := a.Acquire(ctx) // held for the test's length
				if err != nil {
					t.Fatal(err)
				}
				defer l.Release(ctx)
			}
			la, err := a.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			got := make(chan *leasehold.Lease, 1)
			go func() {
				l, err := b.Acquire(ctx)
				if err != nil {
					t.Error(err)
				}
				got <- l
			}()
			time.Sleep(5 * time.Second)
			released := time.Now()
			la.Release(ctx)
			lb := <-got
			bound := 3 * leasehold.DefaultTimings().RetryPeriod
			if d := time.Since(released); d > bound {
				t.Fatalf("watch fault %v: the waiter got the slot %v after the release, want within %v (it polls)", mode, d, bound)
			}
			lb.Release(ctx)
		})
	}
}

// BenchmarkSemaphoreLastSlot: TryAcquire and Release of the one free slot of
// four, on memstore: the cost of trying the held slots first.
func BenchmarkSemaphoreLastSlot(b *testing.B) {
	st := memstore.New()
	ctx := context.Background()
	s, err := leasehold.NewSemaphore(st, "workers", 4, leasehold.Config{Identity: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		l, err := s.TryAcquire(ctx)
		if err != nil {
			b.Fatal(err)
		}
		defer l.Release(ctx)
	}
	for b.Loop() {
		l, err := s.TryAcquire(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// Config.MaxHold caps a semaphore's term as it caps a Lock's.
func TestSemaphoreMaxHold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture()
		s := newSemaphore(t, f.faulty(), "node-a", 2, func(c *leasehold.Config) {
			c.KeepAlive = true
			c.MaxHold = 30 * time.Second
		})
		start := time.Now()
		l, err := s.Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		<-l.Context().Done()
		if d := time.Since(start); d != 30*time.Second || !errors.Is(context.Cause(l.Context()), leasehold.ErrMaxHold) {
			t.Fatalf("term ended at +%v with %v, want +30s and ErrMaxHold", d, context.Cause(l.Context()))
		}
		l.Release(context.Background())
	})
}
