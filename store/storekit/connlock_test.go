package storekit_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/storekit"
)

var (
	errLost     = errors.New("lock lost")
	errReleased = errors.New("lock released")
)

// TestConnLockLost: a failed check cancels the lock's context with the lost
// cause, and Release then learns the connection was lost; Release runs once.
func TestConnLockLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		term := store.Term{Name: "n", Holder: "h", Token: 7}
		checks := 0
		l := storekit.StartConnLock(term, time.Second, func(ctx context.Context) error {
			checks++
			if checks == 3 {
				return errors.New("connection reset")
			}
			return nil
		}, errLost, errReleased)
		if l.Term() != term {
			t.Fatalf("Term() = %v, want %v", l.Term(), term)
		}
		start := time.Now()
		<-l.Context().Done()
		if d := time.Since(start); d != 3*time.Second {
			t.Errorf("the context ended after %v, want 3s (the third check)", d)
		}
		if cause := context.Cause(l.Context()); !errors.Is(cause, errLost) {
			t.Errorf("cause = %v, want errLost", cause)
		}
		calls := 0
		release := func(lost bool) error {
			calls++
			if !lost {
				t.Error("release was told the connection is alive after a failed check")
			}
			return store.ErrNotHeld
		}
		if err := l.Release(release); !errors.Is(err, store.ErrNotHeld) {
			t.Errorf("Release = %v, want release's error", err)
		}
		if err := l.Release(release); !errors.Is(err, store.ErrNotHeld) || calls != 1 {
			t.Errorf("second Release = %v after %d calls of release, want the same error and one call", err, calls)
		}
		if cause := context.Cause(l.Context()); !errors.Is(cause, errLost) {
			t.Errorf("after Release the cause = %v, want still errLost", cause)
		}
	})
}

// TestConnLockReleased: while the checks pass, the context stays open, and
// Release ends it with the released cause and tells release it was not lost.
func TestConnLockReleased(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		checks := 0
		l := storekit.StartConnLock(store.Term{Name: "n", Holder: "h", Token: 1}, time.Second,
			func(context.Context) error { checks++; return nil }, errLost, errReleased)
		time.Sleep(10 * time.Second) // virtual time: ten checks
		synctest.Wait()
		if l.Context().Err() != nil || checks != 10 {
			t.Fatalf("after 10s of passing checks: context %v, %d checks; want open, 10", l.Context().Err(), checks)
		}
		if err := l.Release(func(lost bool) error {
			if lost {
				t.Error("release was told the connection was lost")
			}
			return nil
		}); err != nil {
			t.Errorf("Release = %v", err)
		}
		if cause := context.Cause(l.Context()); !errors.Is(cause, errReleased) {
			t.Errorf("cause after Release = %v, want errReleased", cause)
		}
		time.Sleep(5 * time.Second)
		if checks != 10 {
			t.Errorf("%d checks after Release, want none", checks-10)
		}
	})
}

func TestCheckLock(t *testing.T) {
	kit := storekit.Kit{Store: "x"}
	if every, err := kit.CheckLock("lock", "n", "h", "", 0); err != nil || every != time.Second {
		t.Errorf("CheckLock with a zero interval = %v, %v; want 1s, nil", every, err)
	}
	for _, c := range []struct {
		name, holder string
		every        time.Duration
	}{{"", "h", 0}, {"n", "", 0}, {"n", "h", -time.Second}} {
		if _, err := kit.CheckLock("lock", c.name, c.holder, "", c.every); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("CheckLock(%q, %q, %v) = %v, want ErrInvalid", c.name, c.holder, c.every, err)
		}
	}
}

// TestRetrier: a retryable error is retried (and counted) until another
// answer, at most Max more times; any other error is returned at once.
func TestRetrier(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		errConflict := errors.New("deadlock")
		r := &storekit.Retrier{Retryable: func(err error) bool { return errors.Is(err, errConflict) }, Max: 3}
		ctx := context.Background()
		calls := 0
		if err := r.Do(ctx, func() error {
			if calls++; calls < 3 {
				return errConflict
			}
			return nil
		}); err != nil || calls != 3 || r.Retried() != 2 {
			t.Errorf("two conflicts then success: err %v, %d calls, %d retried; want nil, 3, 2", err, calls, r.Retried())
		}
		calls = 0
		other := errors.New("connection reset: outcome unknown")
		if err := r.Do(ctx, func() error { calls++; return other }); err != other || calls != 1 {
			t.Errorf("a non-retryable error: %v after %d calls, want it at once", err, calls)
		}
		calls = 0
		if err := r.Do(ctx, func() error { calls++; return errConflict }); err != errConflict || calls != 4 {
			t.Errorf("conflicts only: %v after %d calls, want the conflict after 4 (Max 3 more)", err, calls)
		}
	})
}
