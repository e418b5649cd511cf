package sqlfence_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold/fence"
	"github.com/leasehold/leasehold/fence/sqlfence"
	"github.com/leasehold/leasehold/fence/sqlfence/pgxfence"
	"github.com/leasehold/leasehold/store"
)

// The classic statements of the plain-SQL lease recipe (store/postgres honours
// them), run here by hand as another client would.
const (
	acquireSQL = `UPDATE %s SET holder = $2, epoch = epoch + 1, expires_at = now() + make_interval(secs => $3)
WHERE name = $1 AND (holder IS NULL OR holder = $2 OR expires_at < now()) RETURNING epoch`
)

func (e *pgEnv) grant(t testing.TB, name, holder string, epoch int64, ttl time.Duration) store.Term {
	t.Helper()
	_, err := e.admin.Exec(context.Background(), `INSERT INTO `+e.t("leader_lease")+` (name, holder, epoch, expires_at)
VALUES ($1, $2, $3, clock_timestamp() + make_interval(secs => $4))
ON CONFLICT (name) DO UPDATE SET holder = $2, epoch = $3, expires_at = clock_timestamp() + make_interval(secs => $4)`,
		name, holder, epoch, ttl.Seconds())
	if err != nil {
		t.Fatal(err)
	}
	return store.Term{Name: name, Holder: holder, Token: epoch}
}

func (e *pgEnv) takeover(t testing.TB, name, holder string) int64 {
	t.Helper()
	var epoch int64
	err := e.admin.QueryRow(context.Background(), sprintf(acquireSQL, e.t("leader_lease")), name, holder, 30.0).Scan(&epoch)
	if err != nil {
		t.Fatalf("takeover by %s: %v", holder, err)
	}
	return epoch
}

// waitExpired polls the server until the lease row has expired by its clock.
func (e *pgEnv) waitExpired(t testing.TB, name string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		var expired bool
		if err := e.admin.QueryRow(context.Background(),
			`SELECT expires_at < clock_timestamp() FROM `+e.t("leader_lease")+` WHERE name = $1`, name).Scan(&expired); err != nil {
			t.Fatal(err)
		}
		if expired {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("lease %s never expired", name)
		}
		time.Sleep(10 * time.Millisecond) // poll interval
	}
}

func TestPostgresCheckLeaseRefusesOldTerm_FailsWithoutLeaseCheck(t *testing.T) {
	e := newPgEnv(t)
	ctx := context.Background()
	c := pgConnect(t)
	n := 0
	check := func(term store.Term) (error, error) {
		n++
		tx, err := c.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		if _, err := tx.Exec(ctx, `INSERT INTO `+e.t("attempts")+` VALUES ($1, $2)`, term.String()+"#"+itoa(int64(n)), term.Token); err != nil {
			t.Fatal(err)
		}
		if err := e.fence.CheckLease(ctx, pgxfence.Tx(tx), term); err != nil {
			return err, tx.Commit(ctx)
		}
		return nil, tx.Commit(ctx)
	}
	a1 := e.grant(t, "sweeper", "node-a", 1, 30*time.Second)
	if err, cerr := check(a1); err != nil || cerr != nil {
		t.Fatalf("live term: %v, %v", err, cerr)
	}
	var le *sqlfence.LeaseError
	// Wrong holder or wrong epoch: refused, the row is live.
	for _, bad := range []store.Term{{Name: "sweeper", Holder: "node-b", Token: 1}, {Name: "sweeper", Holder: "node-a", Token: 2}} {
		err, cerr := check(bad)
		if !errors.Is(err, store.ErrNotHeld) || !errors.As(err, &le) || !le.Found || !le.Live || cerr == nil {
			t.Fatalf("term %s: %v (commit %v), want a LeaseError on a live row, rolled back", bad, err, cerr)
		}
	}
	// Expired (by the database's clock), not yet taken over: refused, not stale.
	e.admin.Exec(ctx, `UPDATE `+e.t("leader_lease")+` SET expires_at = clock_timestamp() - interval '1 second' WHERE name = 'sweeper'`)
	err, _ := check(a1)
	if !errors.Is(err, store.ErrNotHeld) || errors.Is(err, fence.ErrStale) || !errors.As(err, &le) || le.Live {
		t.Fatalf("expired term: %v, want ErrNotHeld (not stale), Live false", err)
	}
	// Taken over by node-b with epoch 2: node-a's term is stale.
	if ep := e.takeover(t, "sweeper", "node-b"); ep != 2 {
		t.Fatalf("takeover epoch %d", ep)
	}
	err, _ = check(a1)
	if !errors.Is(err, store.ErrNotHeld) || !errors.Is(err, fence.ErrStale) || !errors.As(err, &le) ||
		le.Current.Holder != "node-b" || le.Current.Token != 2 {
		t.Fatalf("taken-over term: %v, want ErrNotHeld and ErrStale naming node-b epoch 2", err)
	}
	// No row at all.
	err, _ = check(store.Term{Name: "nothing", Holder: "x", Token: 1})
	if !errors.As(err, &le) || le.Found {
		t.Fatalf("missing lease: %v", err)
	}
	got := e.attempts(t)
	if len(got) != 1 || got[a1.String()+"#1"] != 1 {
		t.Fatalf("committed attempts %v: a refused write left a trace", got)
	}
}

// A takeover waits for the lease-checked transaction to end: writes of two
// terms never overlap. node-a's check passes while its lease is live; the
// lease then expires by the database's clock; node-b's takeover blocks on the
// share lock until node-a commits; node-a's next check is refused.
func TestPostgresTakeoverWaitsForLeaseCheckedWrite_FailsWithoutShareLock(t *testing.T) {
	e := newPgEnv(t)
	ctx := context.Background()
	a, b := pgConnect(t), pgConnect(t)
	a1 := e.grant(t, "sweeper", "node-a", 1, 500*time.Millisecond)
	tx, err := a.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if err := e.fence.CheckLease(ctx, pgxfence.Tx(tx), a1); err != nil {
		t.Fatalf("node-a's check on its live term: %v", err)
	}
	e.waitExpired(t, "sweeper")
	res := make(chan error, 1)
	go func() {
		var ep int64
		err := b.QueryRow(ctx, sprintf(acquireSQL, e.t("leader_lease")), "sweeper", "node-b", 30.0).Scan(&ep)
		if err == nil && ep != 2 {
			err = errors.New("takeover got epoch " + itoa(ep))
		}
		res <- err
	}()
	e.waitForLockWait(t, b.PgConn().PID())
	select {
	case err := <-res:
		t.Fatalf("takeover finished (%v) while node-a's checked transaction was open", err)
	default:
	}
	// node-a, paused past its expiry, still writes: its term cannot have passed to anyone yet.
	if _, err := tx.Exec(ctx, `INSERT INTO `+e.t("writes")+` (attempt, token) VALUES ('a', 1)`); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-res; err != nil {
		t.Fatalf("takeover after node-a's commit: %v", err)
	}
	tx2, _ := a.Begin(ctx)
	if err := e.fence.CheckLease(ctx, pgxfence.Tx(tx2), a1); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("node-a after the takeover: %v, want stale", err)
	}
}

// Expiry is judged at the check, not at the start of the transaction: a
// transaction opened while the lease was live is refused after it expired.
func TestPostgresCheckLeaseUsesStatementTimeNotTxStart_FailsWithNow(t *testing.T) {
	e := newPgEnv(t)
	ctx := context.Background()
	c := pgConnect(t)
	a1 := e.grant(t, "sweeper", "node-a", 1, 500*time.Millisecond)
	tx, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	var started bool
	if err := tx.QueryRow(ctx, `SELECT expires_at > now() FROM `+e.t("leader_lease")+` WHERE name = 'sweeper'`).Scan(&started); err != nil || !started {
		t.Fatalf("lease not live at transaction start (%v)", err)
	}
	e.waitExpired(t, "sweeper")
	err = e.fence.CheckLease(ctx, pgxfence.Tx(tx), a1)
	var le *sqlfence.LeaseError
	if !errors.As(err, &le) || le.Live {
		t.Fatalf("check after expiry inside an older transaction: %v, want refused as expired", err)
	}
}

func TestPostgresClaimLease_FailsWithoutLeaseOrTokenCheck(t *testing.T) {
	e := newPgEnv(t)
	ctx := context.Background()
	db := e.sqlDB(t)
	claim := func(term store.Term) (error, error) {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		if err := e.fence.ClaimLease(ctx, sqlfence.SQLTx(tx), term, "sweeper"); err != nil {
			return err, tx.Commit()
		}
		return nil, tx.Commit()
	}
	a1 := e.grant(t, "sweeper", "node-a", 1, 30*time.Second)
	if err, cerr := claim(a1); err != nil || cerr != nil {
		t.Fatalf("live term: %v, %v", err, cerr)
	}
	if h := e.fenceToken(t, "sweeper"); h != 1 {
		t.Fatalf("fence row %d, want 1", h)
	}
	// Another writer of the resource claimed token 5 (through Claim only):
	// node-a's live term is refused by the fence.
	c := pgConnect(t)
	tx, _ := c.Begin(ctx)
	if err := e.fence.Claim(ctx, pgxfence.Tx(tx), "sweeper", hof(5), 5); err != nil {
		t.Fatal(err)
	}
	tx.Commit(ctx)
	err, cerr := claim(a1)
	var se *fence.StaleError
	if !errors.As(err, &se) || se.Highest != 5 || !errors.Is(cerr, sql.ErrTxDone) {
		t.Fatalf("live term under a higher fence: %v (commit %v), want StaleError highest 5", err, cerr)
	}
	// Lease taken over: refused by the lease check.
	e.admin.Exec(ctx, `UPDATE `+e.t("leader_lease")+` SET expires_at = '-infinity' WHERE name = 'sweeper'`)
	e.takeover(t, "sweeper", "node-b")
	err, _ = claim(a1)
	if !errors.Is(err, store.ErrNotHeld) || !errors.Is(err, fence.ErrStale) {
		t.Fatalf("taken-over term: %v", err)
	}
	// The pgx form.
	b2 := store.Term{Name: "sweeper", Holder: "node-b", Token: 2}
	tx, _ = c.Begin(ctx)
	if err := e.fence.ClaimLease(ctx, pgxfence.Tx(tx), b2, "sweeper"); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("node-b epoch 2 under fence 5: %v", err)
	}
	// Bad input.
	tx, _ = c.Begin(ctx)
	if err := e.fence.CheckLease(ctx, pgxfence.Tx(tx), store.Term{Name: "sweeper", Holder: "", Token: 1}); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("empty holder: %v", err)
	}
	if err := tx.Commit(ctx); err == nil {
		t.Fatal("transaction usable after a refused check")
	}
}
