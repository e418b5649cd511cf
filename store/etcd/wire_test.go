package etcd

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/freeport"

	"go.etcd.io/etcd/server/v3/embed"

	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/etcd/internal/etcdapi"
	"github.com/leasehold/leasehold/store/etcd/internal/etcdwire"
)

// These tests are of the store's own etcd client (etcdwire) where it does
// what clientv3 did for the store: moving on to the next endpoint, renewing
// an expired auth token, and ending calls and streams with their context.

// wireOf returns the store's etcdwire client.
func wireOf(t *testing.T, st *Store) *etcdwire.Client {
	t.Helper()
	w, ok := st.cli.(*etcdwire.Client)
	if !ok {
		t.Fatalf("the store is not on etcdwire: %T", st.cli)
	}
	return w
}

// TestWireNextEndpoint: with a first endpoint where nothing listens, Open and
// every operation go on to the next one.
func TestWireNextEndpoint(t *testing.T) {
	m := shared(t)
	dead := fmt.Sprintf("http://127.0.0.1:%d", freeport.ForTest(t))
	ctx := testCtx(t, 30*time.Second)
	st, err := Open(ctx, Config{Endpoints: []string{dead, m.clientURL}, Prefix: uniquePrefix("next")})
	if err != nil {
		t.Fatalf("Open with a dead first endpoint: %v", err)
	}
	defer st.Close()
	rec, err := st.Acquire(ctx, "job", "node-a", 5*time.Second, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Renew(ctx, rec.Term, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	w, err := st.Watch(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Release(ctx, rec.Term); err != nil {
		t.Fatal(err)
	}
	select {
	case <-w:
	case <-ctx.Done():
		t.Fatal("the watch did not wake on the release")
	}
	// The negative control: the dead endpoint alone fails.
	if _, err := Open(ctx, Config{Endpoints: []string{dead}, DialTimeout: 300 * time.Millisecond}); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("Open on the dead endpoint alone: %v, want ErrUnreachable", err)
	}
}

// TestWireAuthTokenRenewed: etcd's simple auth tokens expire (here after 1 s
// unused); the client authenticates again and repeats the request.
func TestWireAuthTokenRenewed(t *testing.T) {
	o := defaultOpts()
	o.tweak = func(c *embed.Config) { c.AuthTokenTTL = 1 }
	m := startMember(t, o)
	root := newClient(t, m.clientURL)
	const prefix = "apps/tok/"
	grantLeaseholdRole(t, root, "lh", "s3cret-lh", prefix)
	enableAuth(t, root, "rootpw")
	ctx := testCtx(t, 30*time.Second)
	st, err := Open(ctx, Config{Endpoints: []string{m.clientURL}, Prefix: prefix, Username: "lh", Password: "s3cret-lh"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rec, err := st.Acquire(ctx, "job", "node-a", 10*time.Second, "")
	if err != nil {
		t.Fatal(err)
	}
	w := wireOf(t, st)
	old := waitTokenExpired(t, ctx, w, prefix)
	if _, err := st.Renew(ctx, rec.Term, 10*time.Second); err != nil { // a keep-alive stream, then a Range
		t.Fatalf("Renew after the token expired: %v", err)
	}
	if w.Token() == old {
		t.Fatal("the client did not get a new token")
	}
	waitTokenExpired(t, ctx, w, prefix)
	if _, err := st.Watch(ctx, "job"); err != nil {
		t.Fatalf("Watch after the token expired: %v", err)
	}
	waitTokenExpired(t, ctx, w, prefix)
	if err := st.Release(ctx, rec.Term); err != nil {
		t.Fatal(err)
	}
}

// TestWireContext: a call ends with its context, and so does a watch (its
// channel closes) and a keep-alive stream.
func TestWireContext(t *testing.T) {
	m := shared(t)
	st := openStoreWire(t, uniquePrefix("wctx"), m.clientURL)
	w := wireOf(t, st)

	done, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := st.Get(done, "job"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Get with a cancelled context: %v", err)
	}
	if _, err := w.Range(done, etcdapi.Get("x")); !errors.Is(err, context.Canceled) {
		t.Fatalf("Range with a cancelled context: %v", err)
	}

	wctx, wcancel := context.WithCancel(context.Background())
	ch, err := st.Watch(wctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	wcancel()
	select {
	case _, ok := <-ch:
		for ok {
			_, ok = <-ch
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the watch channel stayed open after its context ended")
	}

	kctx, kcancel := context.WithCancel(context.Background())
	ka, err := w.KeepAlive(kctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		_, _, err := ka.Recv() // nothing was sent: waits until the stream ends
		got <- err
	}()
	kcancel()
	select {
	case err := <-got:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Recv after cancel: %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Recv did not return after its context ended")
	}
	// A keep-alive of an unknown lease is answered with TTL 0, which the
	// store reads as ErrLeaseNotFound.
	if _, _, err := st.keepAlive(testCtx(t, 10*time.Second), 0x7fff_0000_1234); !errors.Is(err, etcdapi.ErrLeaseNotFound) {
		t.Fatalf("keep-alive of an unknown lease: %v", err)
	}
	if _, _, err := w.TimeToLive(testCtx(t, 10*time.Second), 0x7fff_0000_1234); err != nil {
		t.Fatalf("TimeToLive of an unknown lease: %v", err)
	}
	if err := w.Revoke(testCtx(t, 10*time.Second), 0x7fff_0000_1234); !errors.Is(err, ErrLeaseNotFound) {
		t.Fatalf("Revoke of an unknown lease: %v, want ErrLeaseNotFound", err)
	}
	var _ store.Store = st
}

// openStoreWire opens a store on etcdwire whatever LEASEHOLD_ETCD_CLIENT says.
func openStoreWire(t *testing.T, prefix string, endpoints ...string) *Store {
	t.Helper()
	st, err := Open(testCtx(t, 10*time.Second), Config{Endpoints: endpoints, Prefix: prefix})
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// waitTokenExpired waits until etcd refuses the client's current token (real
// time: the server's own clock expires it) and returns that token. That the
// request fails is the negative control of TestWireAuthTokenRenewed: without
// a new token the store's requests would fail too.
func waitTokenExpired(t *testing.T, ctx context.Context, w *etcdwire.Client, prefix string) string {
	t.Helper()
	old := w.Token()
	deadline := time.Now().Add(15 * time.Second)
	for {
		timer := time.NewTimer(1500 * time.Millisecond)
		<-timer.C
		err := w.RangeWithToken(ctx, old, etcdapi.Get(prefix+"x"))
		if errors.Is(err, etcdapi.ErrInvalidAuthToken) {
			return old
		}
		if time.Now().After(deadline) {
			t.Fatalf("the token did not expire within 15 s (last: %v)", err)
		}
	}
}
