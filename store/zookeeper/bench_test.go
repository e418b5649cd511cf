package zookeeper

import (
	"context"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
)

// Benchmarks of the store's own calls on the shared test server, beside
// the bare ZooKeeper requests they are made of.

func BenchmarkAcquireRelease(b *testing.B) {
	st := openStore(b, uniqueRoot("bench"))
	ctx := context.Background()
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
