package etcd

import (
	"errors"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/leasehold/leasehold/store"
)

// TestTransferQueuedMutex: an etcd Mutex waits behind a leasehold term. A
// successor's new key would rank behind the Mutex's, so Transfer makes no
// reservation: it releases the term (the Mutex gets the lock, as on a
// release) and says so. Without a waiter the same Transfer reserves the
// lease for the successor (the control).
func TestTransferQueuedMutex(t *testing.T) {
	m := shared(t)
	st := openStore(t, uniquePrefix("xfer-queue"), m.clientURL)
	cli := newClient(t, m.clientURL)
	ctx := testCtx(t, 60*time.Second)

	// Control: no waiter, the reservation is made.
	a, err := st.Acquire(ctx, "solo", "node-a", 10*time.Second, "")
	if err != nil {
		t.Fatal(err)
	}
	res, err := st.Transfer(ctx, a.Term, "node-b", 10*time.Second, "")
	if err != nil || res.Holder != "node-b" || res.Token <= a.Token {
		t.Fatalf("Transfer without a waiter = %+v, %v; want node-b's reservation", res, err)
	}

	a, err = st.Acquire(ctx, "job", "node-a", 10*time.Second, "")
	if err != nil {
		t.Fatal(err)
	}
	mu := concurrency.NewMutex(newSession(t, cli, 10), st.ContenderPrefix("job"))
	locked := make(chan error, 1)
	go func() { locked <- mu.Lock(ctx) }()
	waitContenders(t, st, "job", 2)
	_, err = st.Transfer(ctx, a.Term, "node-b", 10*time.Second, "")
	if err == nil || !strings.Contains(err.Error(), "released instead") || errors.Is(err, store.ErrNotHeld) {
		t.Fatalf("Transfer with an etcd Mutex queued: %v, want an error saying the term was released instead", err)
	}
	if err := waitDone(t, locked, "the Mutex to lock after the release"); err != nil {
		t.Fatalf("Mutex.Lock: %v", err)
	}
	g, err := st.Get(ctx, "job")
	if err != nil || !strings.HasPrefix(g.Holder, "etcd:") || !g.Live() {
		t.Fatalf("after the refused Transfer Get = %+v, %v; want the Mutex holding", g, err)
	}
	if _, err := st.Renew(ctx, a.Term, 10*time.Second); !errors.Is(err, store.ErrNotHeld) {
		t.Fatalf("Renew of the released term: %v, want ErrNotHeld", err)
	}
	mu.Unlock(ctx)
}
