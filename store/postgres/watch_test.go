package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
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

// TestListenOnlyWhileWatched: the store's connection LISTENs while it has a
// watch and UNLISTENs when the last one ends, so a store that only takes
// and releases leases is not sent a notification for each grant and
// release on the table. Checked by what the connection received: of 20
// cycles while nothing was watched and one grant after a new watch, only
// that grant's notification arrives (notifications come in commit order,
// so the earlier ones would have come first). With the UNLISTEN sent for
// another channel (checked by hand), the connection kept LISTENing and the
// test failed, counting 40.
func TestListenOnlyWhileWatched(t *testing.T) {
	schema := migrated(t)
	st := openStore(t, schema, postgres.Options{})
	other := openStore(t, schema, postgres.Options{NoWatch: true})
	ctx := ctxFor(t)

	wctx, stop := context.WithCancel(ctx)
	if _, err := st.Watch(wctx, "job"); err != nil {
		t.Fatal(err)
	}
	if listening, _ := st.ListenerListening(); !listening {
		t.Fatal("Watch returned before LISTEN was in effect")
	}
	stop()
	// The store marks itself not listening before it sends UNLISTEN: wait
	// until its backend has run it.
	admin := adminConn(t)
	_, pid, _ := st.ListenerState()
	waitFor(t, "the store's backend to run UNLISTEN after its last watch ended", func() bool {
		var query, state string
		if err := admin.QueryRow(ctx, `SELECT query, state FROM pg_stat_activity WHERE pid = $1`, int32(pid)).Scan(&query, &state); err != nil {
			t.Fatal(err)
		}
		listening, _ := st.ListenerListening()
		return !listening && strings.HasPrefix(query, "UNLISTEN ") && state == "idle"
	})
	_, before := st.ListenerListening()

	for range 20 {
		rec, err := other.Acquire(ctx, "job", "node-a", time.Minute, "")
		if err != nil {
			t.Fatal(err)
		}
		if err := other.Release(ctx, rec.Term); err != nil {
			t.Fatal(err)
		}
	}
	watch, err := st.Watch(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Acquire(ctx, "job", "node-a", time.Minute, ""); err != nil {
		t.Fatal(err)
	}
	select {
	case <-watch:
	case <-ctx.Done():
		t.Fatal("the watch started after the idle cycles was not woken by the grant")
	}
	waitFor(t, "the grant's notification to be counted", func() bool {
		_, n := st.ListenerListening()
		return n > before
	})
	if _, after := st.ListenerListening(); after-before != 1 {
		t.Fatalf("the store's connection received %d notifications; want 1 (the grant after the watch), none for the 20 cycles while nothing was watched", after-before)
	}
}

// TestWatchWaitsForListen: a Watch started while the store is not
// LISTENing returns only once LISTEN is in effect, so no change after it
// returns is missed. The test holds the listener's LISTEN back, grants the
// lease from another store meanwhile (a NOTIFY that the store's connection
// cannot hear), and checks that Watch has not returned; once the LISTEN is
// let go, Watch returns, and the next grant wakes it. Without the wait in
// Watch (checked by hand), Watch returns at once and the test fails.
func TestWatchWaitsForListen(t *testing.T) {
	schema := migrated(t)
	st := openStore(t, schema, postgres.Options{})
	other := openStore(t, schema, postgres.Options{NoWatch: true})
	ctx := ctxFor(t)
	held, let := holdFirstListen(st)
	answers := watchInBackground(ctx, st, "job")
	select {
	case <-held:
	case a := <-answers:
		t.Fatalf("Watch returned (%v) without the listener sending LISTEN", a.err)
	}
	rec, err := other.Acquire(ctx, "job", "node-a", time.Minute, "")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case a := <-answers:
		t.Fatalf("Watch returned (err %v) while its LISTEN was held back: a grant made then was missed", a.err)
	default:
	}
	close(let)
	a := <-answers
	if a.err != nil {
		t.Fatal(a.err)
	}
	if err := other.Release(ctx, rec.Term); err != nil {
		t.Fatal(err)
	}
	select {
	case _, open := <-a.ch:
		if !open {
			t.Fatal("the watch ended instead of waking at the release")
		}
	case <-ctx.Done():
		t.Fatal("the watch was not woken by the release after it returned")
	}
}

// TestWatchWaitingForListenSurvivesDrop: the connection drops while a Watch
// waits for its LISTEN. The watch is kept, as a watch open across a drop
// is: Watch returns it, and once the store has connected and LISTENed
// again it wakes every watch once (anything may have changed unheard), and
// then on each change as usual.
func TestWatchWaitingForListenSurvivesDrop(t *testing.T) {
	schema := migrated(t)
	st := openStore(t, schema, postgres.Options{})
	other := openStore(t, schema, postgres.Options{NoWatch: true})
	admin := adminConn(t)
	ctx := ctxFor(t)
	held, let := holdFirstListen(st)
	answers := watchInBackground(ctx, st, "job")
	<-held
	_, pid, _ := st.ListenerState()
	var ok bool
	if err := admin.QueryRow(ctx, `SELECT pg_terminate_backend($1)`, int32(pid)).Scan(&ok); err != nil || !ok {
		t.Fatalf("pg_terminate_backend(%d) = %v, %v", pid, ok, err)
	}
	close(let) // the held LISTEN now meets a closed connection
	a := <-answers
	if a.err != nil {
		t.Fatalf("Watch across the drop: %v; want the watch kept", a.err)
	}
	select {
	case _, open := <-a.ch:
		if !open {
			t.Fatal("the watch ended instead of waking after the reconnect")
		}
	case <-ctx.Done():
		t.Fatal("the watch was not woken once the store LISTENed again")
	}
	if _, newPID, sessions := st.ListenerState(); sessions != 2 || newPID == pid {
		t.Fatalf("listener pid %d, sessions %d after the drop; want a second session", newPID, sessions)
	}
	if _, err := other.Acquire(ctx, "job", "node-a", time.Minute, ""); err != nil {
		t.Fatal(err)
	}
	select {
	case _, open := <-a.ch:
		if !open {
			t.Fatal("the watch ended instead of waking at the grant")
		}
	case <-ctx.Done():
		t.Fatal("the watch was not woken by a grant after the reconnect")
	}
}

// holdFirstListen holds the store's first LISTEN back: held is closed when
// the listener is about to send it, and it is sent once let is closed.
// Set before the store's first Watch.
func holdFirstListen(st *postgres.Store) (held, let chan struct{}) {
	held, let = make(chan struct{}), make(chan struct{})
	first := true // read and written on the listener's goroutine only
	st.SetBeforeListen(func() {
		if first {
			first = false
			close(held)
			<-let
		}
	})
	return held, let
}

// watchAnswer is what a Watch call returned.
type watchAnswer struct {
	ch  <-chan struct{}
	err error
}

// watchInBackground calls st.Watch on a goroutine of its own and delivers
// its answer.
func watchInBackground(ctx context.Context, st *postgres.Store, name string) <-chan watchAnswer {
	answers := make(chan watchAnswer, 1)
	go func() {
		ch, err := st.Watch(ctx, name)
		answers <- watchAnswer{ch, err}
	}()
	return answers
}
