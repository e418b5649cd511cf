package zookeeper

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/leasehold/leasehold/store"
)

// TestTransferQueuedZkLock: a zk.Lock waits behind a leasehold term. A
// successor's new node would queue behind the zk.Lock's, so Transfer makes
// no reservation: it releases the term (the zk.Lock gets the lock, as on a
// release) and says so. Without a waiter the same Transfer reserves the
// lease for the successor (the control).
func TestTransferQueuedZkLock(t *testing.T) {
	st := openStore(t, uniqueRoot("xfer-queue"))
	conn := rawConn(t)
	ctx := testCtx(t, 60*time.Second)
	ttl := 10 * time.Second

	reserveForB(t, ctx, st, "solo", ttl) // without a waiter

	a, err := st.Acquire(ctx, "job", "node-a", ttl, "")
	if err != nil {
		t.Fatal(err)
	}
	p := st.Path("job")
	zl := zk.NewLock(conn, p, zk.WorldACL(zk.PermAll))
	locked := make(chan error, 1)
	go func() { locked <- zl.Lock() }()
	waitFor(t, 20*time.Second, "the zk.Lock to queue", func() bool { return len(contenderNames(t, conn, p)) == 2 })
	_, err = st.Transfer(ctx, a.Term, "node-b", ttl, "")
	if err == nil || !strings.Contains(err.Error(), "released instead") || errors.Is(err, store.ErrNotHeld) {
		t.Fatalf("Transfer with a zk.Lock queued: %v, want an error saying the term was released instead", err)
	}
	select {
	case err := <-locked:
		if err != nil {
			t.Fatalf("zk.Lock: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the zk.Lock did not get the lock after the release")
	}
	g, err := st.Get(ctx, "job")
	if err != nil || !strings.HasPrefix(g.Holder, "zookeeper:") || !g.Live() {
		t.Fatalf("after the refused Transfer Get = %+v, %v; want the zk.Lock holding", g, err)
	}
	if _, err := st.Renew(ctx, a.Term, ttl); !errors.Is(err, store.ErrNotHeld) {
		t.Fatalf("Renew of the released term: %v, want ErrNotHeld", err)
	}
	zl.Unlock()
}

// attemptNode creates, through conn, the node a leasehold Acquire of holder
// creates before it lists the children: with the path's data written in the
// same transaction. It returns the node's path.
// reserveForB has node-a acquire name and hand it over to node-b, which
// finds the lease reserved for it; it returns the reservation.
func reserveForB(t *testing.T, ctx context.Context, st *Store, name string, ttl time.Duration) store.Record {
	t.Helper()
	a, err := st.Acquire(ctx, name, "node-a", ttl, "")
	if err != nil {
		t.Fatal(err)
	}
	res, err := st.Transfer(ctx, a.Term, "node-b", ttl, "")
	if err != nil || res.Holder != "node-b" || res.Token <= a.Token {
		t.Fatalf("Transfer of %s = %+v, %v; want node-b's reservation, with a token above %d", name, res, err, a.Token)
	}
	return res
}

func attemptNode(t *testing.T, conn *zk.Conn, p, holder string) string {
	t.Helper()
	resp, err := conn.Multi(
		&zk.CreateRequest{Path: p + "/" + newNodePrefix(holder), Data: encodeNode(holder, "", 10*time.Second), Acl: zk.WorldACL(zk.PermAll), Flags: zk.FlagEphemeralSequential},
		&zk.SetDataRequest{Path: p, Data: encodeRecord("x"), Version: -1})
	if err != nil {
		t.Fatalf("create %s's attempt node: %v", holder, err)
	}
	return resp[0].String
}

// waitHook makes testHookWaitGone report the paths waited for on a channel,
// and then run also (if not nil) before the wait starts.
func waitHook(t *testing.T, also func(path string)) <-chan string {
	waited := make(chan string, 16)
	testHookWaitGone = func(path string) {
		select {
		case waited <- path:
		default:
		}
		if also != nil {
			also(path)
		}
	}
	t.Cleanup(func() { testHookWaitGone = nil })
	return waited
}

// TestSuccessorWaitsForAttemptBehindReservation: a Transfer reserved the
// lease for node-b, and node-c's Acquire (woken by the term's delete) has
// just created its node behind the reservation, about to find it is not the
// lowest and delete it. node-b's Acquire, which replaces its reservation by
// its term, waits for that node to go: deleting the reservation first would
// make node-c's node the lowest and give node-c the lease during node-b's
// preference window (as a `leasehold handover` in CI once saw).
func TestSuccessorWaitsForAttemptBehindReservation(t *testing.T) {
	root := uniqueRoot("xfer-attempt")
	st := openStore(t, root)
	stB := openStore(t, root)
	conn := rawConn(t)
	ctx := testCtx(t, 60*time.Second)
	ttl := 10 * time.Second

	res := reserveForB(t, ctx, st, "job", ttl)
	p := st.Path("job")
	probe := attemptNode(t, conn, p, "node-c")
	waited := waitHook(t, nil)

	type result struct {
		rec store.Record
		err error
	}
	got := make(chan result, 1)
	go func() {
		rec, err := stB.Acquire(ctx, "job", "node-b", ttl, "")
		got <- result{rec, err}
	}()
	select {
	case path := <-waited:
		if path != probe {
			t.Fatalf("node-b's Acquire waited for %s, want node-c's attempt %s", path, probe)
		}
	case r := <-got:
		t.Fatalf("node-b's Acquire returned %+v, %v without waiting for node-c's attempt behind its reservation", r.rec, r.err)
	}
	if err := conn.Delete(probe, -1); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil || r.rec.Holder != "node-b" || r.rec.Token <= res.Token {
		t.Fatalf("node-b's Acquire = %+v, %v; want node-b's term with a token above the reservation's %d", r.rec, r.err, res.Token)
	}
	g, err := st.Get(ctx, "job")
	if err != nil || g.Term != r.rec.Term {
		t.Fatalf("Get = %+v, %v; want node-b's term %v", g, err, r.rec.Term)
	}
}

// TestTransferWaitsForAttempt: leasehold attempts near the term (node-c's
// node behind it when Transfer looks, and another created between Transfer's
// look and its transaction) do not queue: Transfer waits for the first to
// go, and its transaction, which checks the path's data version it looked
// at, does not apply after the second, since the second would rank before
// the successor's node and take the lock when the term's node goes. The
// reservation then heads the lock. TestTransferQueuedZkLock shows the
// foreign case, which releases instead.
func TestTransferWaitsForAttempt(t *testing.T) {
	st := openStore(t, uniqueRoot("xfer-race"))
	conn := rawConn(t)
	ctx := testCtx(t, 60*time.Second)
	ttl := 10 * time.Second

	a, err := st.Acquire(ctx, "job", "node-a", ttl, "")
	if err != nil {
		t.Fatal(err)
	}
	p := st.Path("job")
	first := attemptNode(t, conn, p, "node-c")
	waited := waitHook(t, func(path string) {
		if err := conn.Delete(path, -1); err != nil {
			t.Errorf("delete %s: %v", path, err)
		}
	})
	var second string
	testHookBeforeCreate = func() {
		testHookBeforeCreate = nil // once: the transaction sent again finds it in its look
		second = attemptNode(t, conn, p, "node-d")
	}
	t.Cleanup(func() { testHookBeforeCreate = nil })

	res, err := st.Transfer(ctx, a.Term, "node-b", ttl, "")
	if err != nil || res.Holder != "node-b" || res.Token <= a.Token {
		t.Fatalf("Transfer = %+v, %v; want node-b's reservation", res, err)
	}
	var paths []string
	for len(waited) > 0 {
		paths = append(paths, <-waited)
	}
	if len(paths) != 2 || paths[0] != first || paths[1] != second {
		t.Fatalf("Transfer waited for %v; want node-c's attempt %s, then node-d's %s", paths, first, second)
	}
	g, err := st.Get(ctx, "job")
	if err != nil || g.Term != res.Term {
		t.Fatalf("Get = %+v, %v; want the reservation %v heading the lock", g, err, res.Term)
	}
	if kids := contenderNames(t, conn, p); len(kids) != 1 {
		t.Fatalf("contenders after the Transfer: %v; want the reservation alone", kids)
	}
}
