package zookeeper

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/storetest"
)

// Benchmarks of the store's own calls on the shared test server, beside
// the bare ZooKeeper requests they are made of and go-zookeeper/zk's Lock.
// Each `go test` starts its own server, whose JVM (first JIT tier only)
// warms up over the first few thousand requests: the first benchmark run
// is slow. Run with -count 3 or more and compare the later runs:
//
//	go test -run '^$' -bench 'AcquireRelease|ZkLockCycle|Handoff' -benchtime 1000x -count 4

// warm opens st's term session for 15 s terms and the lease's path, so
// that a benchmark's loop does not count them.
func warm(b *testing.B, st *Store, name string) {
	b.Helper()
	r, err := st.Acquire(context.Background(), name, "warm", 15*time.Second, "")
	if err != nil {
		b.Fatal(err)
	}
	if err := st.Release(context.Background(), r.Term); err != nil {
		b.Fatal(err)
	}
}

func BenchmarkAcquireRelease(b *testing.B) {
	st := openStore(b, uniqueRoot("bench"))
	ctx := context.Background()
	warm(b, st, "job")
	for b.Loop() {
		r, err := st.Acquire(ctx, "job", "a", 15*time.Second, "")
		if err != nil {
			b.Fatal(err)
		}
		if err := st.Release(ctx, r.Term); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRenew(b *testing.B) {
	st := openStore(b, uniqueRoot("bench"))
	ctx := context.Background()
	r, err := st.Acquire(ctx, "job", "a", 15*time.Second, "")
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := st.Renew(ctx, r.Term, 15*time.Second); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkGet(b *testing.B) {
	st := openStore(b, uniqueRoot("bench"))
	ctx := context.Background()
	if _, err := st.Acquire(ctx, "job", "a", 15*time.Second, ""); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := st.Get(ctx, "job"); err != nil {
			b.Fatal(err)
		}
	}
}

// The bare requests: an ephemeral sequential create and its delete (what
// zk.Lock's lock and unlock write), and one read.
func BenchmarkRawCreateDelete(b *testing.B) {
	c := rawConn(b)
	p := uniqueRoot("bench-raw")
	if err := ensurePathRaw(c, p, zk.WorldACL(zk.PermAll)); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		n, err := c.Create(p+"/lock-", nil, zk.FlagEphemeralSequential, zk.WorldACL(zk.PermAll))
		if err != nil {
			b.Fatal(err)
		}
		if err := c.Delete(n, -1); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRawChildren(b *testing.B) {
	c := rawConn(b)
	for b.Loop() {
		if _, _, err := c.Children("/lh-test"); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRawSync(b *testing.B) {
	c := rawConn(b)
	for b.Loop() {
		if _, err := c.Sync("/lh-test"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHandoff: one handle (as the side-by-side bench's contenders
// share one), a holder and a waiter whose watch is set: the time from the
// holder's Release to the waiter's Acquire returning, after the wake-up.
// With the waiter's note that the lease went free, the acquire is one
// create (see TestHandoffRequests).
func BenchmarkHandoff(b *testing.B) {
	st := openStore(b, uniqueRoot("bench"))
	warm(b, st, "job")
	storetest.BenchHandoff(b, st, "job", 15*time.Second)
}

// BenchmarkPlaceHandoff: a fair waiter's place, first behind the holder,
// on a handle of its own: the time from the holder's Release to the
// waiter's Acquire returning, which makes the place the term with one
// listing (beside BenchmarkZkLockHandoff, whose waiter also lists once).
func BenchmarkPlaceHandoff(b *testing.B) {
	root := uniqueRoot("bench-place")
	h, w := openStore(b, root), openStore(b, root)
	ctx := context.Background()
	ttl := 15 * time.Second
	warm(b, h, "job")
	var total time.Duration
	for i := 0; i < b.N; i++ {
		held, err := h.Acquire(ctx, "job", "holder", ttl, "")
		if err != nil {
			b.Fatal(err)
		}
		if n, err := w.Enqueue(ctx, "job", "waiter", ttl); err != nil || n != 0 {
			b.Fatalf("Enqueue: %d ahead, %v", n, err)
		}
		wctx, cancel := context.WithCancel(ctx)
		ch, err := w.Watch(wctx, "job")
		if err != nil {
			b.Fatal(err)
		}
		if _, err := w.Acquire(ctx, "job", "waiter", ttl, ""); !errors.Is(err, store.ErrHeld) {
			b.Fatalf("the waiter's Acquire before the release: %v", err)
		}
		for len(ch) > 0 {
			<-ch
		}
		t0 := time.Now()
		if err := h.Release(ctx, held.Term); err != nil {
			b.Fatal(err)
		}
		<-ch
		got, err := w.Acquire(ctx, "job", "waiter", ttl, "")
		if err != nil {
			b.Fatal(err)
		}
		total += time.Since(t0)
		cancel()
		if err := w.Dequeue(ctx, "job", "waiter"); err != nil {
			b.Fatal(err)
		}
		if err := w.Release(ctx, got.Term); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(total.Microseconds())/float64(b.N), "µs/handoff")
}

// BenchmarkRawHandoff is the floor of a hand-off: the holder deletes an
// ephemeral node, the waiter's exists watch fires, and it creates the node.
func BenchmarkRawHandoff(b *testing.B) {
	c1, c2 := rawConn(b), rawConn(b)
	acl := zk.WorldACL(zk.PermAll)
	dir := uniqueRoot("bench-raw")
	if err := ensurePathRaw(c1, dir, acl); err != nil {
		b.Fatal(err)
	}
	p := dir + "/lock"
	var total time.Duration
	for i := 0; i < b.N; i++ {
		if _, err := c1.Create(p, nil, zk.FlagEphemeral, acl); err != nil {
			b.Fatal(err)
		}
		_, _, ev, err := c2.ExistsW(p)
		if err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		if err := c1.Delete(p, -1); err != nil {
			b.Fatal(err)
		}
		<-ev
		if _, err := c2.Create(p, nil, zk.FlagEphemeral, acl); err != nil {
			b.Fatal(err)
		}
		total += time.Since(t0)
		if err := c2.Delete(p, -1); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(total.Microseconds())/float64(b.N), "µs/handoff")
}

// BenchmarkZkLockHandoff is go-zookeeper/zk's Lock on the same server: the
// waiter's Lock has created its node and watches the holder's when the
// holder unlocks.
func BenchmarkZkLockHandoff(b *testing.B) {
	c1, c2 := rawConn(b), rawConn(b)
	acl := zk.WorldACL(zk.PermAll)
	p := uniqueRoot("bench-zklock")
	if err := ensurePathRaw(c1, p, acl); err != nil {
		b.Fatal(err)
	}
	var total time.Duration
	for i := 0; i < b.N; i++ {
		l1 := zk.NewLock(c1, p, acl)
		if err := l1.Lock(); err != nil {
			b.Fatal(err)
		}
		l2 := zk.NewLock(c2, p, acl)
		done := make(chan error, 1)
		go func() { done <- l2.Lock() }()
		for { // the waiter's node is there
			k, _, err := c1.Children(p)
			if err != nil {
				b.Fatal(err)
			}
			if len(k) == 2 {
				break
			}
			time.Sleep(time.Millisecond)
		}
		time.Sleep(5 * time.Millisecond) // and its watch is set
		t0 := time.Now()
		if err := l1.Unlock(); err != nil {
			b.Fatal(err)
		}
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		total += time.Since(t0)
		if err := l2.Unlock(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(total.Microseconds())/float64(b.N), "µs/handoff")
}

// BenchmarkZkLockCycle: zk.Lock's Lock and Unlock, uncontended, beside
// BenchmarkAcquireRelease.
func BenchmarkZkLockCycle(b *testing.B) {
	c := rawConn(b)
	acl := zk.WorldACL(zk.PermAll)
	p := uniqueRoot("bench-zklock")
	if err := ensurePathRaw(c, p, acl); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		l := zk.NewLock(c, p, acl)
		if err := l.Lock(); err != nil {
			b.Fatal(err)
		}
		if err := l.Unlock(); err != nil {
			b.Fatal(err)
		}
	}
}
