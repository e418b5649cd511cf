package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/postgres"
)

// slowPoll timings make a waiter poll only every eight minutes, so that a
// waiter that acts within a test's timeout was woken by a notification or by
// the holder's expiry, not by its poll.
var slowPoll = leasehold.Timings{LeaseDuration: 10 * time.Minute, RenewDeadline: 9 * time.Minute, RenewInterval: time.Minute, RetryPeriod: 8 * time.Minute}

// waiter starts lk.Acquire in a goroutine once its first attempt was
// refused; it returns the channel the Held arrives on.
func startWaiter(t *testing.T, st store.Store, name string, timings leasehold.Timings) <-chan *leasehold.Lease {
	t.Helper()
	attempts := make(chan error, 100)
	lk, err := leasehold.NewLock(st, name, leasehold.Config{Identity: "waiter", Timings: timings, OnEvent: func(ev leasehold.Event) {
		if ev.Kind == leasehold.EventAcquireAttempt {
			select {
			case attempts <- ev.Err:
			default:
			}
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *leasehold.Lease, 1)
	go func() {
		h, err := lk.Acquire(ctxFor(t))
		if err != nil {
			t.Errorf("waiter Acquire: %v", err)
		}
		got <- h
	}()
	if err := <-attempts; !errors.Is(err, store.ErrHeld) {
		t.Fatalf("waiter's first attempt: %v, want ErrHeld", err)
	}
	return got
}

func recvHeld(t *testing.T, got <-chan *leasehold.Lease) *leasehold.Lease {
	t.Helper()
	h := <-got
	if h == nil {
		t.FailNow()
	}
	t.Cleanup(func() { h.Release(context.Background()) })
	return h
}

// TestWatchOneConnectionPerStore: watches of many names share one LISTEN
// connection, and each wakes for its own name.
func TestWatchOneConnectionPerStore(t *testing.T) {
	schema := migrated(t)
	st := openStore(t, schema, postgres.Options{})
	other := openStore(t, schema, postgres.Options{NoWatch: true})
	ctx := ctxFor(t)
	chans := map[string][]<-chan struct{}{}
	for i := range 50 {
		name := fmt.Sprintf("shard/%d", i)
		for range 2 {
			ch, err := st.Watch(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			chans[name] = append(chans[name], ch)
		}
	}
	_, pid, sessions := st.ListenerState()
	if pid == 0 || sessions != 1 {
		t.Fatalf("listener pid %d, sessions %d; want one session", pid, sessions)
	}
	var listening int
	var listenPID uint32
	if err := adminConn(t).QueryRow(ctx, `SELECT count(*), min(pid) FROM pg_stat_activity WHERE query = $1`,
		`LISTEN "`+postgres.Channel(schema, "leader_lease")+`"`).Scan(&listening, &listenPID); err != nil {
		t.Fatal(err)
	}
	if listening != 1 || listenPID != pid {
		t.Fatalf("%d backends LISTEN on the store's channel (pid %d), want exactly the store's one (pid %d)", listening, listenPID, pid)
	}
	for _, name := range []string{"shard/7", "shard/42"} {
		if _, err := other.Acquire(ctx, name, "node-a", time.Minute, ""); err != nil {
			t.Fatal(err)
		}
		for i, ch := range chans[name] {
			select {
			case _, ok := <-ch:
				if !ok {
					t.Fatalf("watch %d of %s closed instead of waking", i, name)
				}
			case <-ctx.Done():
				t.Fatalf("watch %d of %s did not wake", i, name)
			}
		}
	}
}

// TestWatchSurvivesDroppedConnection terminates the store's LISTEN backend
// with pg_terminate_backend. An open watch stays open and is woken when the
// store has LISTENed again; a waiter blocked in Lock.Acquire (polling only
// every eight minutes) still takes the lease the moment it is released.
func TestWatchSurvivesDroppedConnection(t *testing.T) {
	schema := migrated(t)
	st := openStore(t, schema, postgres.Options{})
	holder := openStore(t, schema, postgres.Options{NoWatch: true})
	admin := adminConn(t)
	ctx := ctxFor(t)
	held, err := holder.Acquire(ctx, "job", "holder", time.Minute, "")
	if err != nil {
		t.Fatal(err)
	}
	got := startWaiter(t, st, "job", slowPoll)
	watch, err := st.Watch(ctx, "other")
	if err != nil {
		t.Fatal(err)
	}

	_, pid, _ := st.ListenerState()
	var ok bool
	if err := admin.QueryRow(ctx, `SELECT pg_terminate_backend($1)`, int32(pid)).Scan(&ok); err != nil || !ok {
		t.Fatalf("pg_terminate_backend(%d) = %v, %v", pid, ok, err)
	}
	waitFor(t, "the store to LISTEN again on a new connection", func() bool {
		up, newPID, sessions := st.ListenerState()
		return up && sessions == 2 && newPID != pid
	})
	select {
	case _, open := <-watch:
		if !open {
			t.Fatal("the watch was closed by the dropped connection; it should stay open and wake")
		}
	case <-ctx.Done():
		t.Fatal("the watch was not woken after the store listened again")
	}
	if n := st.Watchers("job"); n != 1 {
		t.Fatalf("the waiter has %d watches of job after the reconnect, want 1", n)
	}

	if err := holder.Release(ctx, held.Term); err != nil {
		t.Fatal(err)
	}
	h := recvHeld(t, got)
	if h.Token() != held.Token+1 {
		t.Fatalf("waiter's token %d, want %d", h.Token(), held.Token+1)
	}
}

// TestWaiterWakesAtExpiry: a holder that crashed (never renews, never
// releases) sends no notification; the waiter wakes when its lease expires,
// from the time remaining the database computed, not at its next poll.
func TestWaiterWakesAtExpiry(t *testing.T) {
	schema := migrated(t)
	st := openStore(t, schema, postgres.Options{})
	ctx := ctxFor(t)
	crashed, err := st.Acquire(ctx, "job", "crashed", 2*time.Second, "")
	if err != nil {
		t.Fatal(err)
	}
	h := recvHeld(t, startWaiter(t, st, "job", slowPoll))
	if h.Token() != crashed.Token+1 {
		t.Fatalf("waiter's token %d, want %d", h.Token(), crashed.Token+1)
	}
	hist, err := st.History(ctx, "job", 1)
	if err != nil || len(hist) != 1 || hist[0].Event != "expired-takeover" {
		t.Fatalf("History = %+v, %v; want an expired-takeover", hist, err)
	}
}
