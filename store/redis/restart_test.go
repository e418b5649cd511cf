package redis_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store"
	lhredis "github.com/leasehold/leasehold/store/redis"
)

// TestRedisRestartMidLease kills this test's own redis-server (no
// persistence) while a lock is held, and starts it again empty, as a restart
// without fsync does. It checks that:
//   - the pub/sub watch breaks (its channel closes) instead of going quiet;
//   - the holder steps down before its lease could have expired on Redis;
//   - the lost token counter is detected and reported, never hidden: a
//     handle that had seen token 4 is refused once, then granted 5, never a
//     token at or below 4.
func TestRedisRestartMidLease(t *testing.T) {
	srv := newRedisServer(t)
	u := storeURL(srv.Addr(), "lhtest:restart:") + "&tokens=counter" // small tokens: the regress is what is tested
	holderStore := openStore(t, u)
	rivalStore := openStore(t, u)
	ctx := testCtx(t)

	timings := leasehold.Timings{
		LeaseDuration: 4 * time.Second,
		RenewDeadline: 2 * time.Second,
		RenewInterval: 500 * time.Millisecond,
		RetryPeriod:   200 * time.Millisecond,
	}
	var mu sync.Mutex
	var events []leasehold.Event
	holder, err := leasehold.NewLock(holderStore, "job", leasehold.Config{
		Identity: "holder", Timings: timings, KeepAlive: true,
		OnEvent: func(e leasehold.Event) { mu.Lock(); events = append(events, e); mu.Unlock() },
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		h, err := holder.TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	held, err := holder.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if held.Token() != 4 {
		t.Fatalf("held token %d, want 4", held.Token())
	}
	rival, err := leasehold.NewLock(rivalStore, "job", leasehold.Config{Identity: "rival", Timings: timings})
	if err != nil {
		t.Fatal(err)
	}
	var he *leasehold.HeldError
	if _, err := rival.TryAcquire(ctx); !errors.As(err, &he) || he.Record.Token != 4 {
		t.Fatalf("rival's TryAcquire while held: err = %v, want HeldError with token 4", err)
	}
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	watch, err := rivalStore.Watch(wctx, "job")
	if err != nil {
		t.Fatal(err)
	}

	srv.Kill()

	// The watch cannot hear publishes any more: it must close, not go quiet.
	deadline := time.NewTimer(20 * time.Second)
	defer deadline.Stop()
	for open := true; open; {
		select {
		case _, open = <-watch:
		case <-deadline.C:
			t.Fatal("watch channel still open 20s after Redis was killed")
		}
	}

	srv.Start() // empty: the lock and the counter are gone

	// The holder steps down: its renewal fails (Redis down, or the term
	// gone after the restart), and its context ends. Redis could let a rival
	// in no earlier than LeaseDuration after the last successful renewal
	// reached it, which was after it was sent (SafeUntil - RenewDeadline).
	select {
	case <-held.Context().Done():
	case <-time.After(20 * time.Second):
		t.Fatal("holder's context not cancelled 20s after Redis restarted")
	}
	steppedDown := time.Now()
	cause := context.Cause(held.Context())
	if !errors.Is(cause, leasehold.ErrLeaseLost) && !errors.Is(cause, leasehold.ErrSafeUntilPassed) {
		t.Errorf("holder stepped down with cause %v, want ErrLeaseLost or ErrSafeUntilPassed", cause)
	}
	lastRenewSent := held.SafeUntil().Add(-timings.RenewDeadline)
	if expiry := lastRenewSent.Add(timings.LeaseDuration); !steppedDown.Before(expiry) {
		t.Errorf("holder stepped down at %v, not before its lease's earliest expiry %v", steppedDown, expiry)
	}
	if err := held.Release(ctx); !errors.Is(err, store.ErrNotHeld) {
		t.Errorf("Release after losing the term: err = %v, want ErrNotHeld", err)
	}

	// The holder's handle saw token 4; Redis now has no counter.
	var re *lhredis.TokenRegressError
	if err := retryTransport(t, func() error { _, err := holderStore.Get(ctx, "job"); return err }); !errors.As(err, &re) || re.Seen != 4 || re.Found != 0 {
		t.Fatalf("Get after the restart: err = %v, want TokenRegressError (seen 4, found 0)", err)
	}

	// The rival saw token 4 too: its first definite answer is the regress,
	// with nothing granted; then it gets 5.
	var got *leasehold.Lease
	err = retryTransport(t, func() error {
		h, err := rival.TryAcquire(ctx)
		got = h
		return err
	})
	if got != nil {
		t.Fatalf("rival granted token %d right after the restart, want the regress reported first", got.Token())
	}
	if !errors.As(err, &re) || re.Seen != 4 || re.Found != 0 {
		t.Fatalf("rival's first TryAcquire after the restart: err = %v, want TokenRegressError (seen 4, found 0)", err)
	}
	got, err = rival.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("rival's TryAcquire after the regress was reported: %v", err)
	}
	defer got.Release(ctx)
	if got.Token() != 5 {
		t.Fatalf("rival's token after the restart = %d, want 5 (above the 4 it had seen)", got.Token())
	}

	mu.Lock()
	defer mu.Unlock()
	var lost bool
	for _, e := range events {
		lost = lost || (e.Kind == leasehold.EventLost && e.Term.Token == 4)
	}
	if !lost {
		t.Errorf("no EventLost for the held term in %d events", len(events))
	}
}

// retryTransport calls f until it returns nil or a definite answer (one of
// the store's errors), skipping transport errors such as a pooled connection
// to the killed server, for at most 10s.
func retryTransport(t *testing.T, f func() error) error {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := f()
		if err == nil || errors.Is(err, store.ErrHeld) || errors.Is(err, store.ErrNotHeld) ||
			errors.Is(err, store.ErrNotFound) || errors.Is(err, lhredis.ErrTokenRegress) || time.Now().After(deadline) {
			return err
		}
		t.Logf("transport error, retrying: %v", err)
		timer := time.NewTimer(50 * time.Millisecond)
		<-timer.C
	}
}
