package mysql_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/leasehold/leasehold/store"
	lhmysql "github.com/leasehold/leasehold/store/mysql"
)

// TestGetLockTokens: one holder at a time; each grant has a higher token,
// on the same counter as leases; release frees it for the next at once.
func TestGetLockTokens(t *testing.T) {
	db := migrated(t)
	a, b := openStore(t, db, lhmysql.Options{}), openStore(t, db, lhmysql.Options{})
	ctx := ctxFor(t)
	lease, err := a.Acquire(ctx, "cron", "node-l", time.Minute, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Release(ctx, lease.Term); err != nil {
		t.Fatal(err)
	}
	la, err := a.TryGetLock(ctx, "cron", "node-a", lhmysql.LockOptions{Metadata: "m"})
	if err != nil {
		t.Fatal(err)
	}
	if la.Token() != lease.Token+1 {
		t.Fatalf("lock token %d, want %d (the lease counter + 1)", la.Token(), lease.Token+1)
	}
	if _, err := b.TryGetLock(ctx, "cron", "node-b", lhmysql.LockOptions{}); !errors.Is(err, store.ErrHeld) {
		t.Fatalf("second TryGetLock: %v, want ErrHeld", err)
	}
	g, err := b.Get(ctx, "cron")
	if err != nil || g.Holder != "node-a" || g.Token != la.Token() || g.Live() {
		t.Fatalf("row while the lock is held = %+v, %v; want node-a's token, not a live lease", g, err)
	}
	got := make(chan *lhmysql.NamedLock, 1)
	go func() {
		l, err := b.GetLock(ctx, "cron", "node-b", lhmysql.LockOptions{})
		if err != nil {
			t.Errorf("GetLock: %v", err)
		}
		got <- l
	}()
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if la.Context().Err() == nil {
		t.Fatal("context not cancelled by Release")
	}
	lb := <-got
	if lb == nil {
		t.FailNow()
	}
	if lb.Token() <= la.Token() {
		t.Fatalf("next lock token %d, not above %d", lb.Token(), la.Token())
	}
	if err := lb.Release(ctx); err != nil {
		t.Fatal(err)
	}
	next, err := a.Acquire(ctx, "cron", "node-l", time.Minute, "")
	if err != nil || next.Token <= lb.Token() {
		t.Fatalf("lease after the locks = %+v, %v; want a token above %d", next, err, lb.Token())
	}
	if _, err := a.TryGetLock(ctx, "cron", "node-a", lhmysql.LockOptions{}); !errors.Is(err, store.ErrHeld) {
		t.Fatalf("TryGetLock over a live lease: %v, want ErrHeld", err)
	}
	// The failed attempt left no session holding the named lock.
	if err := a.Release(ctx, next.Term); err != nil {
		t.Fatal(err)
	}
	l, err := b.TryGetLock(ctx, "cron", "node-b", lhmysql.LockOptions{})
	if err != nil {
		t.Fatalf("TryGetLock after a refused attempt: %v", err)
	}
	l.Release(ctx)
}

// TestGetLockLost: the lock's connection killed by the server: the holder's
// context ends with ErrLockLost, a rival gets a higher token, and the old
// holder's Release says ErrNotHeld.
func TestGetLockLost(t *testing.T) {
	db := migrated(t)
	a, b := openStore(t, db, lhmysql.Options{}), openStore(t, db, lhmysql.Options{})
	ctx := ctxFor(t)
	la, err := a.TryGetLock(ctx, "cron", "node-a", lhmysql.LockOptions{CheckInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	admin := rawDB(t, db)
	var owner int64
	if err := admin.QueryRowContext(ctx, `SELECT IS_USED_LOCK(?)`, lhmysql.LockName(db, "leader_lease", "cron")).Scan(&owner); err != nil || owner == 0 {
		t.Fatalf("IS_USED_LOCK of the documented lock name = %d, %v; want the holder's session", owner, err)
	}
	mustExec(t, admin, fmt.Sprintf("KILL %d", owner))
	select {
	case <-la.Context().Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the holder's context was not cancelled after its connection was killed")
	}
	if !errors.Is(context.Cause(la.Context()), lhmysql.ErrLockLost) {
		t.Fatalf("cause = %v, want ErrLockLost", context.Cause(la.Context()))
	}
	lb, err := b.TryGetLock(ctx, "cron", "node-b", lhmysql.LockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if lb.Token() <= la.Token() {
		t.Fatalf("token after the loss %d, not above %d", lb.Token(), la.Token())
	}
	if err := la.Release(ctx); !errors.Is(err, store.ErrNotHeld) {
		t.Fatalf("Release of the lost lock: %v, want ErrNotHeld", err)
	}
	if g, _ := b.Get(ctx, "cron"); g.Holder != "node-b" {
		t.Fatalf("the lost holder's Release touched the new term: %+v", g)
	}
	lb.Release(ctx)
}

// TestGetLockCancelled: a GetLock whose context ends while it waits leaves
// no session behind that could be granted the lock later: when the holder
// releases, a third client gets it at once.
func TestGetLockCancelled(t *testing.T) {
	db := migrated(t)
	a, b := openStore(t, db, lhmysql.Options{}), openStore(t, db, lhmysql.Options{})
	ctx := ctxFor(t)
	la, err := a.TryGetLock(ctx, "cron", "node-a", lhmysql.LockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, err := b.GetLock(wctx, "cron", "node-b", lhmysql.LockOptions{}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("GetLock past its deadline: %v, want DeadlineExceeded", err)
	}
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lc, err := a.TryGetLock(ctx, "cron", "node-c", lhmysql.LockOptions{})
	if err != nil {
		t.Fatalf("TryGetLock after the holder released and the waiter gave up: %v (an abandoned session kept the lock?)", err)
	}
	lc.Release(ctx)
}
