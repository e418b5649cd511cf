package zookeeper

import (
	"context"
	"errors"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store"
)

// These tests run go-zookeeper/zk's own Lock against leasehold on one path.

func lockTimings() leasehold.Timings {
	return leasehold.Timings{LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RenewInterval: 500 * time.Millisecond, RetryPeriod: 250 * time.Millisecond}
}

// waitFor polls cond until it holds, or fails the test after d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(10 * time.Millisecond) // polling
	}
}

// contenderNames lists the lock nodes of a lease's path.
func contenderNames(t *testing.T, c *zk.Conn, p string) []string {
	t.Helper()
	kids, _, err := c.Children(p)
	if err != nil && !errors.Is(err, zk.ErrNoNode) {
		t.Fatal(err)
	}
	var out []string
	for _, k := range contenders(kids) {
		out = append(out, k.name)
	}
	return out
}

// TestInteropZkLock: a zk.Lock and a leasehold Lock on one path exclude each
// other in both directions, and each waiter gets the lock when the other
// side unlocks.
func TestInteropZkLock(t *testing.T) {
	st := openStore(t, uniqueRoot("zklock"))
	conn := rawConn(t)
	ctx := testCtx(t, 60*time.Second)
	p := st.Path("job")
	zl := zk.NewLock(conn, p, zk.WorldACL(zk.PermAll))
	lk, err := leasehold.NewLock(st, "job", leasehold.Config{Identity: "lh", Timings: lockTimings()})
	if err != nil {
		t.Fatal(err)
	}

	// zk.Lock first: leasehold is refused and sees who holds.
	if err := zl.Lock(); err != nil {
		t.Fatalf("zk.Lock: %v", err)
	}
	names := contenderNames(t, conn, p)
	if len(names) != 1 {
		t.Fatalf("contenders %v, want zk.Lock's node alone", names)
	}
	_, stat, err := conn.Get(p + "/" + names[0])
	if err != nil {
		t.Fatal(err)
	}
	_, err = lk.TryAcquire(ctx)
	var he *leasehold.HeldError
	if !errors.As(err, &he) || !errors.Is(err, store.ErrHeld) {
		t.Fatalf("leasehold TryAcquire while a zk.Lock holds: %v, want a HeldError", err)
	}
	if he.Record.Holder != "zookeeper:"+names[0] || !he.Record.Live() || he.Record.Token != stat.Czxid {
		t.Fatalf("held record %+v, want holder zookeeper:%s, live, token its czxid %d", he.Record, names[0], stat.Czxid)
	}
	if got := contenderNames(t, conn, p); len(got) != 1 {
		t.Fatalf("a refused leasehold acquire left nodes behind: %v", got)
	}
	// A waiting leasehold Lock gets it once the zk.Lock unlocks, not before.
	var unlocked atomic.Bool
	got := make(chan *leasehold.Lease, 1)
	go func() {
		h, err := lk.Acquire(ctx)
		if err != nil {
			t.Errorf("leasehold Acquire: %v", err)
		}
		if !unlocked.Load() {
			t.Errorf("leasehold acquired while zk.Lock held the lock")
		}
		got <- h
	}()
	// leasehold does not queue: while it waits, only zk.Lock's node is there.
	waitFor(t, 10*time.Second, "leasehold waiting", func() bool { return len(contenderNames(t, conn, p)) == 1 })
	unlocked.Store(true)
	if err := zl.Unlock(); err != nil {
		t.Fatalf("zk.Unlock: %v", err)
	}
	var held *leasehold.Lease
	select {
	case held = <-got:
	case <-time.After(20 * time.Second):
		t.Fatal("leasehold did not acquire within 20s of zk.Unlock")
	}
	if held == nil {
		t.FailNow()
	}
	if held.Token() <= stat.Czxid {
		t.Fatalf("leasehold token %d not above zk.Lock's czxid %d", held.Token(), stat.Czxid)
	}
	// leasehold's node is one zk.Lock can parse: the lock nodes zk.Lock sees
	// are leasehold's, ordered by the sequence after "lock-".
	names = contenderNames(t, conn, p)
	if len(names) != 1 || !strings.HasPrefix(names[0], "_c_") || !strings.Contains(names[0], "-lock-") {
		t.Fatalf("leasehold's node %v, want one node named _c_<id>-lock-<seq>", names)
	}
	_, lstat, err := conn.Get(p + "/" + names[0])
	if err != nil || lstat.Czxid != held.Token() || lstat.EphemeralOwner == 0 {
		t.Fatalf("leasehold's node: stat %+v, %v; want an ephemeral node whose czxid is the token %d", lstat, err, held.Token())
	}

	// leasehold first: a zk.Lock waits until leasehold releases.
	zl2 := zk.NewLock(rawConn(t), p, zk.WorldACL(zk.PermAll))
	var released atomic.Bool
	locked := make(chan error, 1)
	go func() {
		err := zl2.Lock()
		if err == nil && !released.Load() {
			t.Errorf("zk.Lock locked while leasehold held the lock")
		}
		locked <- err
	}()
	// zk.Lock queues: its node appears behind leasehold's.
	waitFor(t, 10*time.Second, "zk.Lock queued behind leasehold", func() bool { return len(contenderNames(t, conn, p)) == 2 })
	r, err := st.Get(ctx, "job")
	if err != nil || r.Term != held.Term() {
		t.Fatalf("Get while zk.Lock waits = %+v, %v; want leasehold's term %v", r, err, held.Term())
	}
	released.Store(true)
	if err := held.Release(ctx); err != nil {
		t.Fatalf("leasehold Release: %v", err)
	}
	select {
	case err := <-locked:
		if err != nil {
			t.Fatalf("zk.Lock: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("zk.Lock did not lock within 20s of leasehold's release")
	}
	r, err = st.Get(ctx, "job")
	if err != nil || !strings.HasPrefix(r.Holder, "zookeeper:_c_") || r.Token <= held.Token() {
		t.Fatalf("Get while zk.Lock holds = %+v, %v; want the zk.Lock holder, with a czxid above %d", r, err, held.Token())
	}
	if err := zl2.Unlock(); err != nil {
		t.Fatal(err)
	}
}

// TestInteropZkLockBehindQueue: a leasehold term whose holder acquires again
// while a zk.Lock waits behind it does not jump the queue: the old term
// ends, the zk.Lock gets the lock, and the new acquire is refused.
func TestInteropZkLockBehindQueue(t *testing.T) {
	st := openStore(t, uniqueRoot("queue"))
	conn := rawConn(t)
	ctx := testCtx(t, 30*time.Second)
	p := st.Path("job")
	first, err := st.Acquire(ctx, "job", "lh", 30*time.Second, "")
	if err != nil {
		t.Fatal(err)
	}
	zl := zk.NewLock(conn, p, zk.WorldACL(zk.PermAll))
	locked := make(chan error, 1)
	go func() { locked <- zl.Lock() }()
	waitFor(t, 10*time.Second, "zk.Lock queued", func() bool { return len(contenderNames(t, conn, p)) == 2 })
	rec, err := st.Acquire(ctx, "job", "lh", 30*time.Second, "")
	if !errors.Is(err, store.ErrHeld) || !strings.HasPrefix(rec.Holder, "zookeeper:") {
		t.Fatalf("re-acquire behind a queued zk.Lock: %+v, %v; want ErrHeld by the zk.Lock", rec, err)
	}
	if err := <-locked; err != nil {
		t.Fatalf("zk.Lock: %v", err)
	}
	if _, err := st.Renew(ctx, first.Term, 30*time.Second); !errors.Is(err, store.ErrNotHeld) {
		t.Fatalf("Renew of the replaced term: %v, want ErrNotHeld", err)
	}
	zl.Unlock()
}

// TestInteropZkLockContention: leasehold locks and zk.Lock users take turns
// on one path for a few seconds; an in-process ledger checks that no two of
// them ever hold at once, and that leasehold's tokens rise. The negative
// control puts the zk.Lock users on another path: the ledger must see them
// overlap with leasehold.
func TestInteropZkLockContention(t *testing.T) {
	if testing.Short() {
		t.Skip("a few seconds of contention")
	}
	root := uniqueRoot("contend")
	overlaps, lh, zl := contendWithZkLock(t, root, path.Join(root, "job"), 5*time.Second)
	t.Logf("turns: leasehold %d, zk.Lock %d", lh, zl)
	if overlaps > 0 {
		t.Fatalf("TWO HOLDERS %d times", overlaps)
	}
	if lh == 0 || zl == 0 {
		t.Fatalf("one side never held the lock (leasehold %d turns, zk.Lock %d)", lh, zl)
	}
	t.Run("NegativeControl", func(t *testing.T) {
		root := uniqueRoot("contend-neg")
		overlaps, lh, zl := contendWithZkLock(t, root, path.Join(root, "elsewhere"), 2*time.Second)
		t.Logf("on different paths: %d overlaps in %d leasehold and %d zk.Lock turns", overlaps, lh, zl)
		if overlaps == 0 {
			t.Fatal("the ledger saw no overlap between locks on different paths: it cannot catch two holders")
		}
	})
}

// contendWithZkLock runs two leasehold locks on name "job" under root and two
// zk.Lock users on zkPath for d, and returns how often two of them held at
// once, and the turns each side had.
func contendWithZkLock(t *testing.T, root, zkPath string, d time.Duration) (overlaps, lhTurns, zkTurns int64) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var mu sync.Mutex
	holders := 0
	var lastToken int64
	var nOverlap, nLh, nZk atomic.Int64
	enter := func() {
		mu.Lock()
		defer mu.Unlock()
		holders++
		if holders > 1 {
			nOverlap.Add(1)
		}
	}
	leave := func() {
		mu.Lock()
		holders--
		mu.Unlock()
	}
	work := func(wctx context.Context) {
		t := time.NewTimer(30 * time.Millisecond) // the guarded work
		defer t.Stop()
		select {
		case <-t.C:
		case <-wctx.Done():
		}
	}
	var wg sync.WaitGroup
	for i := 0; i < 2; i++ {
		lk, err := leasehold.NewLock(openStore(t, root), "job", leasehold.Config{Identity: "lh", Timings: lockTimings()})
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			for {
				h, err := lk.Acquire(ctx)
				if err != nil {
					if ctx.Err() == nil {
						t.Errorf("leasehold Acquire: %v", err)
					}
					return
				}
				enter()
				mu.Lock()
				if h.Token() <= lastToken {
					t.Errorf("leasehold token %d not above the last %d", h.Token(), lastToken)
				}
				lastToken = h.Token()
				mu.Unlock()
				nLh.Add(1)
				work(h.Context())
				leave()
				if err := h.Release(context.Background()); err != nil {
					t.Errorf("leasehold Release: %v", err)
				}
			}
		})
	}
	for i := 0; i < 2; i++ {
		conn := rawConn(t)
		wg.Go(func() {
			for ctx.Err() == nil {
				zl := zk.NewLock(conn, zkPath, zk.WorldACL(zk.PermAll))
				if err := zl.Lock(); err != nil {
					t.Errorf("zk.Lock: %v", err)
					return
				}
				enter()
				nZk.Add(1)
				work(context.Background())
				leave()
				if err := zl.Unlock(); err != nil {
					t.Errorf("zk.Unlock: %v", err)
					return
				}
				// Idle a while: two zk.Lock users that queue back to back
				// keep the queue from ever emptying, and leasehold, which
				// does not queue, from ever getting a turn.
				idle := time.NewTimer(150 * time.Millisecond)
				select {
				case <-idle.C:
				case <-ctx.Done():
				}
			}
		})
	}
	wg.Wait()
	return nOverlap.Load(), nLh.Load(), nZk.Load()
}

// TestStrayNodeBehindForeignHolder: a node of a holder's lost attempt
// queued behind a zk.Lock holder (made here by hand, in a session of its
// own) is deleted by that holder's next acquire, which is refused: it must
// not wait in the queue and hold the lease when the zk.Lock unlocks.
func TestStrayNodeBehindForeignHolder(t *testing.T) {
	st := openStore(t, uniqueRoot("stray"))
	conn := rawConn(t)
	ctx := testCtx(t, 20*time.Second)
	p := st.Path("job")
	zl := zk.NewLock(conn, p, zk.WorldACL(zk.PermAll))
	if err := zl.Lock(); err != nil {
		t.Fatal(err)
	}
	defer zl.Unlock()
	stray, err := rawConn(t).Create(p+"/"+newNodePrefix("h"), encodeNode("h", "", 10*time.Second), zk.FlagEphemeralSequential, zk.WorldACL(zk.PermAll))
	if err != nil {
		t.Fatal(err)
	}
	rec, err := st.Acquire(ctx, "job", "h", 10*time.Second, "")
	if !errors.Is(err, store.ErrHeld) || !strings.HasPrefix(rec.Holder, "zookeeper:") {
		t.Fatalf("Acquire behind the zk.Lock: %+v, %v; want ErrHeld by the zk.Lock", rec, err)
	}
	if ok, _, err := conn.Exists(stray); err != nil || ok {
		t.Fatalf("the holder's stray node %s still exists (%v) after its refused acquire", path.Base(stray), err)
	}
	if got := contenderNames(t, conn, p); len(got) != 1 {
		t.Fatalf("contenders %v, want the zk.Lock's alone", got)
	}
}

// TestInteropFairLocksWithZkLock: fair leasehold Locks and zk.Lock users
// on one path are served in the order they came, through the library as
// users call it. A fair Lock holds; a zk.Lock queues; a second fair Lock
// queues after it. The release hands the lock to the zk.Lock, and its
// unlock to the second fair Lock, with a token above the first's. The
// control: a Lock without Fair, started after the zk.Lock queued, writes
// no place, and is still waiting when the fair Lock behind it is served.
func TestInteropFairLocksWithZkLock(t *testing.T) {
	root := uniqueRoot("fair-zklock")
	conn := rawConn(t)
	ctx := testCtx(t, 60*time.Second)
	newLock := func(id string, fair bool) *leasehold.Lock {
		l, err := leasehold.NewLock(openStore(t, root), "job", leasehold.Config{Identity: id, Fair: fair, Timings: lockTimings()})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	p := openStore(t, root).Path("job")
	first, err := newLock("first", true).Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	zl := zk.NewLock(conn, p, zk.WorldACL(zk.PermAll))
	zlocked := make(chan error, 1)
	go func() { zlocked <- zl.Lock() }()
	waitFor(t, 10*time.Second, "zk.Lock queued", func() bool { return len(contenderNames(t, conn, p)) == 2 })
	type acquired struct {
		l   *leasehold.Lease
		err error
	}
	unfair := make(chan acquired, 1)
	go func() { l, err := newLock("unfair", false).Acquire(ctx); unfair <- acquired{l, err} }()
	second := make(chan acquired, 1)
	go func() { l, err := newLock("second", true).Acquire(ctx); second <- acquired{l, err} }()
	waitFor(t, 10*time.Second, "the second fair Lock queued", func() bool { return len(contenderNames(t, conn, p)) == 3 })
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-zlocked; err != nil {
		t.Fatalf("zk.Lock: %v", err)
	}
	select {
	case a := <-second:
		t.Fatalf("the second fair Lock acquired (%v) while the zk.Lock that came before it holds", a.err)
	case a := <-unfair:
		t.Fatalf("the Lock without Fair acquired (%v) while the zk.Lock holds", a.err)
	default:
	}
	if err := zl.Unlock(); err != nil {
		t.Fatal(err)
	}
	var got acquired
	select {
	case got = <-second:
	case a := <-unfair:
		t.Fatalf("control: the Lock without Fair, which wrote no place, acquired first (%v)", a.err)
	case <-time.After(20 * time.Second):
		t.Fatal("the second fair Lock did not acquire after the zk.Lock unlocked")
	}
	if got.err != nil {
		t.Fatal(got.err)
	}
	if got.l.Token() <= first.Token() {
		t.Fatalf("the second fair Lock's token %d, want above the first's %d", got.l.Token(), first.Token())
	}
	if err := got.l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	a := <-unfair // the Lock without Fair is served last
	if a.err != nil {
		t.Fatal(a.err)
	}
	a.l.Release(ctx)
}
