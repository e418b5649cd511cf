package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/postgres"
)

// serverAddr is host:port of the test server.
func serverAddr(t *testing.T) string {
	u, err := url.Parse(testDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// termLive reads a term's row straight from the server (not through any
// proxy): whether that exact term is still live on the database's clock.
func termLive(t *testing.T, conn *pgx.Conn, schema string, term store.Term) bool {
	t.Helper()
	var live bool
	err := conn.QueryRow(ctxFor(t), `SELECT holder = $2 AND epoch = $3 AND expires_at > now() FROM `+schema+`.leader_lease WHERE name = $1`,
		term.Name, term.Holder, term.Token).Scan(&live)
	if err != nil {
		t.Fatalf("read %v: %v", term, err)
	}
	return live
}

// TestDatabaseRestartMidLease runs three electors through a proxy and cuts
// it, as a database restart would: every connection drops and new ones are
// refused. Every leader must step down (its work's context cancelled at
// safeUntil) while the database still shows its term live, that is before
// the lease could expire and a rival take over; and each must lead again,
// with a higher token, once the proxy lets connections through.
func TestDatabaseRestartMidLease(t *testing.T) {
	schema := migrated(t)
	px := newTCPProxy(t, serverAddr(t))
	st, err := postgres.Open(ctxFor(t), px.DSN(withParams(t, testDSN(t), "pool_max_conns", "4", "connect_timeout", "2")), postgres.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	direct := adminConn(t)
	// A 5 s lease trusted for 2 s after each renewal was sent: 3 s of margin.
	timings := leasehold.Timings{LeaseDuration: 5 * time.Second, RenewDeadline: 2 * time.Second, RenewInterval: 500 * time.Millisecond, RetryPeriod: 300 * time.Millisecond}

	type leadership struct {
		term  store.Term
		cause error
	}
	const n = 3
	started := make(chan store.Term, 4*n)
	ended := make(chan leadership, 4*n)
	renewed := make([]chan struct{}, n)
	ctx, cancel := context.WithCancel(ctxFor(t))
	var wg sync.WaitGroup
	for i := range n {
		renewed[i] = make(chan struct{}, 1)
		e, err := leasehold.NewElector(st, fmt.Sprintf("job-%d", i), leasehold.Config{
			Identity: fmt.Sprintf("node-%d", i), Timings: timings,
			OnEvent: func(ev leasehold.Event) {
				if ev.Kind == leasehold.EventRenewed {
					select {
					case renewed[i] <- struct{}{}:
					default:
					}
				}
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			e.Run(ctx, func(ctx context.Context, l *leasehold.Lease) error {
				started <- l.Term()
				<-ctx.Done()
				ended <- leadership{l.Term(), context.Cause(ctx)}
				return nil
			})
		}()
	}
	defer func() { cancel(); wg.Wait() }()
	// A waiter's watch: electors subscribe only once refused, and these lead
	// distinct names, so watch one name here to have a LISTEN connection.
	if _, err := st.Watch(ctx, "job-0"); err != nil {
		t.Fatalf("Watch: %v", err)
	}

	first := map[string]store.Term{}
	for range n {
		term := <-started
		first[term.Name] = term
	}
	for i := range n {
		<-renewed[i] // mid-lease: each has renewed at least once
	}

	px.Cut()
	for range n {
		l := <-ended
		if !errors.Is(l.cause, leasehold.ErrSafeUntilPassed) {
			t.Errorf("%v ended with %v, want ErrSafeUntilPassed", l.term, l.cause)
		}
		// The leader has stopped; the database must still hold its term.
		if !termLive(t, direct, schema, l.term) {
			t.Errorf("%v: the leader stepped down only after its lease had expired on the database's clock", l.term)
		}
	}

	px.Restore()
	for range n {
		term := <-started
		old := first[term.Name]
		if term.Holder != old.Holder || term.Token <= old.Token {
			t.Errorf("after the restart %s leads as %v, want %s again with a token above %d", term.Name, term, old.Holder, old.Token)
		}
		if !termLive(t, direct, schema, term) {
			t.Errorf("after the restart the database does not show %v live", term)
		}
	}
	waitFor(t, "the LISTEN connection to come back", func() bool {
		up, _, sessions := st.ListenerState()
		return up && sessions >= 2
	})
}

// TestListenerDownFallsBackToPolling cuts only the store's LISTEN
// connection (it goes through a proxy; the pool does not). A waiter keeps
// polling and takes the lease after a release; when the proxy is restored
// the store LISTENs again, and the next hand-off comes by notification (the
// waiter's poll period is minutes long).
func TestListenerDownFallsBackToPolling(t *testing.T) {
	schema := migrated(t)
	px := newTCPProxy(t, serverAddr(t))
	sess, err := pgx.ParseConfig(px.DSN(testDSN(t)))
	if err != nil {
		t.Fatal(err)
	}
	waiterStore := openStore(t, schema, postgres.Options{SessionConfig: sess})
	holderStore := openStore(t, schema, postgres.Options{NoWatch: true})
	ctx := ctxFor(t)

	acquireWhileWaiting := func(t *testing.T, name string, timings leasehold.Timings) int64 {
		t.Helper()
		attempts := make(chan error, 100)
		lk, err := leasehold.NewLock(waiterStore, name, leasehold.Config{Identity: "waiter", Timings: timings, OnEvent: func(ev leasehold.Event) {
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
		held, err := holderStore.Acquire(ctx, name, "holder", time.Minute, "")
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan *leasehold.Lease, 1)
		go func() {
			h, err := lk.Acquire(ctx)
			if err != nil {
				t.Errorf("waiter Acquire: %v", err)
			}
			got <- h
		}()
		if err := <-attempts; !errors.Is(err, store.ErrHeld) {
			t.Fatalf("waiter's first attempt: %v, want ErrHeld", err)
		}
		if err := holderStore.Release(ctx, held.Term); err != nil {
			t.Fatal(err)
		}
		h := <-got
		if h == nil {
			t.FailNow()
		}
		defer h.Release(ctx)
		return h.Token()
	}

	// The watch works, then its connection is cut.
	if _, err := waiterStore.Watch(ctx, "warm-up"); err != nil {
		t.Fatalf("Watch: %v", err)
	}
	px.Cut()
	waitFor(t, "the LISTEN connection to drop", func() bool {
		up, _, _ := waiterStore.ListenerState()
		return !up
	})
	fast := leasehold.Timings{LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RenewInterval: 500 * time.Millisecond, RetryPeriod: 200 * time.Millisecond}
	if tok := acquireWhileWaiting(t, "polled", fast); tok != 2 {
		t.Fatalf("waiter took the polled lease with token %d, want 2", tok)
	}
	if up, _, _ := waiterStore.ListenerState(); up {
		t.Fatal("the LISTEN connection came up while the proxy was cut")
	}

	px.Restore()
	waitFor(t, "the store to LISTEN again", func() bool {
		up, _, sessions := waiterStore.ListenerState()
		return up && sessions >= 2
	})
	slow := leasehold.Timings{LeaseDuration: 10 * time.Minute, RenewDeadline: 9 * time.Minute, RenewInterval: time.Minute, RetryPeriod: 8 * time.Minute}
	if tok := acquireWhileWaiting(t, "notified", slow); tok != 2 {
		t.Fatalf("waiter took the notified lease with token %d, want 2", tok)
	}
}
