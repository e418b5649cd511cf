package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/postgres"
)

// The plain-SQL recipe, word for word, as another client (psql, a service in
// another language) runs it against the same table.
const (
	rawAcquire = `UPDATE leader_lease SET holder=$2, epoch=epoch+1, expires_at=now()+make_interval(secs=>$3)
WHERE name=$1 AND (holder IS NULL OR holder=$2 OR expires_at<now()) RETURNING epoch`
	rawRenew = `UPDATE leader_lease SET expires_at=now()+make_interval(secs=>$3)
WHERE name=$1 AND holder=$2 AND epoch=$4 AND expires_at>now()`
	// forceExpiry is what an operator (or the passage of time) does.
	forceExpiry = `UPDATE leader_lease SET expires_at=now()-interval '1 second' WHERE name=$1`
	// seedRow: the recipe updates a row that must exist.
	seedRow = `INSERT INTO leader_lease (name) VALUES ($1) ON CONFLICT DO NOTHING`
)

// rawClient is a plain SQL connection whose search_path finds the test's
// leader_lease, so the recipe runs unchanged.
func rawClient(t *testing.T, schema string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctxFor(t), withParams(t, testDSN(t), "search_path", schema))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// rawTryAcquire runs the recipe's acquire: the epoch, or 0 if no row matched.
func rawTryAcquire(t *testing.T, c *pgx.Conn, name, holder string, secs float64) int64 {
	t.Helper()
	var epoch int64
	err := c.QueryRow(ctxFor(t), rawAcquire, name, holder, secs).Scan(&epoch)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0
	}
	if err != nil {
		t.Fatalf("raw acquire: %v", err)
	}
	return epoch
}

// rawTryRenew runs the recipe's renew: how many rows matched (0 or 1).
func rawTryRenew(t *testing.T, c *pgx.Conn, name, holder string, secs float64, epoch int64) int64 {
	t.Helper()
	tag, err := c.Exec(ctxFor(t), rawRenew, name, holder, secs, epoch)
	if err != nil {
		t.Fatalf("raw renew: %v", err)
	}
	return tag.RowsAffected()
}

func rawExec(t *testing.T, c *pgx.Conn, sql string, args ...any) {
	t.Helper()
	if _, err := c.Exec(ctxFor(t), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// TestWalkthroughLeaseholdThenRawSQL: node-a is leasehold, node-b is a raw
// SQL client.
func TestWalkthroughLeaseholdThenRawSQL(t *testing.T) {
	schema := migrated(t)
	st := openStore(t, schema, postgres.Options{})
	nodeB := rawClient(t, schema)
	ctx := ctxFor(t)

	// 1. node-a acquires: epoch 1.
	a, err := st.Acquire(ctx, "job", "node-a", 30*time.Second, "addr=a")
	if err != nil || a.Token != 1 {
		t.Fatalf("step 1: node-a Acquire = %+v, %v; want epoch 1", a, err)
	}
	// 2. node-b gets nothing while node-a's lease is live.
	if e := rawTryAcquire(t, nodeB, "job", "node-b", 30); e != 0 {
		t.Fatalf("step 2: node-b's raw acquire returned epoch %d while node-a is live; want no row", e)
	}
	// 3. node-a renews: still epoch 1.
	r, err := st.Renew(ctx, a.Term, 30*time.Second)
	if err != nil || r.Token != 1 {
		t.Fatalf("step 3: node-a Renew = %+v, %v; want epoch 1 kept", r, err)
	}
	// 4. After a forced expiry node-b takes over with epoch 2.
	rawExec(t, nodeB, forceExpiry, "job")
	if e := rawTryAcquire(t, nodeB, "job", "node-b", 30); e != 2 {
		t.Fatalf("step 4: node-b's raw acquire after expiry returned epoch %d, want 2", e)
	}
	// leasehold sees node-b's term, and no stale metadata of node-a's.
	g, err := st.Get(ctx, "job")
	if err != nil || g.Holder != "node-b" || g.Token != 2 || !g.Live() || g.Metadata != "" {
		t.Fatalf("Get after node-b's takeover = %+v, %v; want node-b live with epoch 2 and no metadata", g, err)
	}
	// 5. node-a's renew with epoch 1 matches no row: node-a steps down.
	if _, err := st.Renew(ctx, a.Term, 30*time.Second); !errors.Is(err, store.ErrNotHeld) {
		t.Fatalf("step 5: node-a's Renew with epoch 1: err = %v, want ErrNotHeld", err)
	}
	if err := st.Release(ctx, a.Term); !errors.Is(err, store.ErrNotHeld) {
		t.Fatalf("step 5: node-a's late Release: err = %v, want ErrNotHeld", err)
	}
	if n := rawTryRenew(t, nodeB, "job", "node-b", 30, 2); n != 1 {
		t.Fatalf("node-b's raw renew after node-a's late calls matched %d rows, want 1", n)
	}
	// And leasehold refuses to take node-b's live term.
	if rec, err := st.Acquire(ctx, "job", "node-c", 30*time.Second, ""); !errors.Is(err, store.ErrHeld) || rec.Holder != "node-b" || rec.Token != 2 {
		t.Fatalf("leasehold Acquire while node-b (raw) is live = %+v, %v; want ErrHeld by node-b", rec, err)
	}
}

// TestWalkthroughRawSQLThenLeasehold: the other way round.
func TestWalkthroughRawSQLThenLeasehold(t *testing.T) {
	schema := migrated(t)
	st := openStore(t, schema, postgres.Options{})
	nodeA := rawClient(t, schema)
	ctx := ctxFor(t)

	rawExec(t, nodeA, seedRow, "job")
	// 1. node-a (raw) acquires: epoch 1.
	if e := rawTryAcquire(t, nodeA, "job", "node-a", 30); e != 1 {
		t.Fatalf("step 1: node-a's raw acquire returned epoch %d, want 1", e)
	}
	// 2. node-b (leasehold) gets nothing: ErrHeld with node-a's term.
	rec, err := st.Acquire(ctx, "job", "node-b", 30*time.Second, "")
	if !errors.Is(err, store.ErrHeld) || rec.Holder != "node-a" || rec.Token != 1 || !rec.Live() || rec.Remaining > 30*time.Second {
		t.Fatalf("step 2: node-b Acquire = %+v, %v; want ErrHeld by node-a, epoch 1, live", rec, err)
	}
	// 3. node-a renews: still epoch 1.
	if n := rawTryRenew(t, nodeA, "job", "node-a", 30, 1); n != 1 {
		t.Fatalf("step 3: node-a's raw renew matched %d rows, want 1", n)
	}
	if g, err := st.Get(ctx, "job"); err != nil || g.Token != 1 || g.Holder != "node-a" {
		t.Fatalf("Get after node-a's renew = %+v, %v", g, err)
	}
	// 4. After a forced expiry node-b takes over with epoch 2.
	rawExec(t, nodeA, forceExpiry, "job")
	b, err := st.Acquire(ctx, "job", "node-b", 30*time.Second, "")
	if err != nil || b.Token != 2 {
		t.Fatalf("step 4: node-b Acquire after expiry = %+v, %v; want epoch 2", b, err)
	}
	// 5. node-a's renew with epoch 1 matches no row: node-a steps down.
	if n := rawTryRenew(t, nodeA, "job", "node-a", 30, 1); n != 0 {
		t.Fatalf("step 5: node-a's raw renew with epoch 1 matched %d rows, want 0", n)
	}
	// And the raw recipe refuses to take leasehold's live term.
	if e := rawTryAcquire(t, nodeA, "job", "node-a", 30); e != 0 {
		t.Fatalf("node-a's raw acquire while node-b (leasehold) is live returned epoch %d, want no row", e)
	}
	// After leasehold releases, the raw recipe takes it with epoch 3.
	if err := st.Release(ctx, b.Term); err != nil {
		t.Fatal(err)
	}
	if e := rawTryAcquire(t, nodeA, "job", "node-a", 30); e != 3 {
		t.Fatalf("raw acquire after leasehold's release returned epoch %d, want 3", e)
	}
}

// TestWalkthroughElectorStepsDown: the same five steps with a leasehold
// Elector as node-a. Its renewal after node-b's takeover matches no row, so
// its work's context is cancelled with ErrLeaseLost; and a Lock waiting as
// node-c wakes on node-b's (raw) release through LISTEN/NOTIFY, which the
// trigger sends for raw clients too.
func TestWalkthroughElectorStepsDown(t *testing.T) {
	schema := migrated(t)
	st := openStore(t, schema, postgres.Options{})
	nodeB := rawClient(t, schema)
	ctx := ctxFor(t)
	timings := leasehold.Timings{LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RenewInterval: 300 * time.Millisecond, RetryPeriod: 200 * time.Millisecond}

	renewed := make(chan int64, 100)
	e, err := leasehold.NewElector(st, "job", leasehold.Config{Identity: "node-a", Timings: timings, StopOnLoss: true,
		OnEvent: func(ev leasehold.Event) {
			if ev.Kind == leasehold.EventRenewed {
				select {
				case renewed <- ev.Term.Token:
				default:
				}
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	tokens := make(chan int64, 1)
	workCause := make(chan error, 1)
	runErr := make(chan error, 1)
	go func() {
		runErr <- e.Run(ctx, func(ctx context.Context, l *leasehold.Lease) error {
			tokens <- l.Token()
			<-ctx.Done()
			workCause <- context.Cause(ctx)
			return nil
		})
	}()
	// 1. node-a leads with epoch 1.
	if tok := <-tokens; tok != 1 {
		t.Fatalf("step 1: elector token %d, want 1", tok)
	}
	// 2. node-b gets nothing.
	if ep := rawTryAcquire(t, nodeB, "job", "node-b", 30); ep != 0 {
		t.Fatalf("step 2: raw acquire returned %d while the elector leads", ep)
	}
	// 3. node-a renews with epoch 1.
	if tok := <-renewed; tok != 1 {
		t.Fatalf("step 3: renewed token %d, want 1", tok)
	}
	// 4. Forced expiry; node-b takes over with epoch 2, in one transaction
	// so that node-a cannot renew in between.
	tx, err := nodeB.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, forceExpiry, "job"); err != nil {
		t.Fatal(err)
	}
	var ep int64
	if err := tx.QueryRow(ctx, rawAcquire, "job", "node-b", 30.0).Scan(&ep); err != nil || ep != 2 {
		t.Fatalf("step 4: raw takeover epoch %d, %v; want 2", ep, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// 5. node-a's next renewal matches no row: it steps down.
	if cause := <-workCause; !errors.Is(cause, leasehold.ErrLeaseLost) {
		t.Fatalf("step 5: work context cause %v, want ErrLeaseLost", cause)
	}
	if err := <-runErr; !errors.Is(err, leasehold.ErrLeaseLost) {
		t.Fatalf("step 5: Run = %v, want ErrLeaseLost (StopOnLoss)", err)
	}

	// node-c waits in Lock.Acquire; a long poll period makes sure that it is
	// the NOTIFY from node-b's raw release that wakes it.
	slow := leasehold.Timings{LeaseDuration: 10 * time.Minute, RenewDeadline: 9 * time.Minute, RenewInterval: time.Minute, RetryPeriod: 8 * time.Minute}
	attempts := make(chan error, 10)
	lk, err := leasehold.NewLock(st, "job", leasehold.Config{Identity: "node-c", Timings: slow, OnEvent: func(ev leasehold.Event) {
		if ev.Kind == leasehold.EventAcquireAttempt {
			attempts <- ev.Err
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *leasehold.Lease, 1)
	go func() {
		h, err := lk.Acquire(ctx)
		if err != nil {
			t.Errorf("node-c Acquire: %v", err)
		}
		got <- h
	}()
	if err := <-attempts; !errors.Is(err, store.ErrHeld) {
		t.Fatalf("node-c's first attempt: %v, want ErrHeld", err)
	}
	rawExec(t, nodeB, `UPDATE leader_lease SET holder = NULL, expires_at = '-infinity' WHERE name = $1 AND holder = $2 AND epoch = $3`, "job", "node-b", int64(2))
	h := <-got
	if h == nil {
		t.FailNow()
	}
	if h.Token() != 3 {
		t.Fatalf("node-c's token %d, want 3", h.Token())
	}
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
