package zookeeper

import (
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

	a, err := st.Acquire(ctx, "solo", "node-a", ttl, "")
	if err != nil {
		t.Fatal(err)
	}
	res, err := st.Transfer(ctx, a.Term, "node-b", ttl, "")
	if err != nil || res.Holder != "node-b" || res.Token <= a.Token {
		t.Fatalf("Transfer without a waiter = %+v, %v; want node-b's reservation", res, err)
	}

	a, err = st.Acquire(ctx, "job", "node-a", ttl, "")
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
