package etcd

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/etcd/internal/etcdapi"
)

// The tests of this file check the rules that make a handle's reuse of etcd
// leases safe (see "Reusing etcd leases" in the package doc), against the
// embedded etcd: they read the lease a key is attached to, and lease TTLs,
// from etcd itself.

// keyLease returns the etcd lease the live key of term t is attached to.
func keyLease(t *testing.T, st *Store, term store.Term) clientv3.LeaseID {
	t.Helper()
	ctx := testCtx(t, 5*time.Second)
	key, err := st.TermKey(ctx, term)
	if err != nil {
		t.Fatalf("TermKey(%v): %v", term, err)
	}
	resp, err := st.Client().Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != term.Token {
		t.Fatalf("the key of %v is not live: %+v", term, resp.Kvs)
	}
	return clientv3.LeaseID(resp.Kvs[0].Lease)
}

// leaseTTL is etcd's time to live of lease id in whole seconds (-1: etcd
// does not know it: revoked or expired).
func leaseTTL(t *testing.T, cli *clientv3.Client, id clientv3.LeaseID) int64 {
	t.Helper()
	r, err := cli.TimeToLive(testCtx(t, 5*time.Second), id)
	if err != nil {
		t.Fatalf("TimeToLive(%x): %v", int64(id), err)
	}
	return r.TTL
}

// waitRevoked polls etcd until it no longer knows lease id (revocations run
// in the background).
func waitRevoked(t *testing.T, cli *clientv3.Client, id clientv3.LeaseID, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for leaseTTL(t, cli, id) != -1 {
		if time.Now().After(deadline) {
			t.Fatalf("%s: lease %x still alive (TTL %d s)", what, int64(id), leaseTTL(t, cli, id))
		}
		time.Sleep(20 * time.Millisecond) // polling the server's state
	}
}

func (s *Store) pooledIDs() map[clientv3.LeaseID]bool {
	s.termsMu.Lock()
	defer s.termsMu.Unlock()
	out := map[clientv3.LeaseID]bool{}
	for _, ids := range s.pool {
		for _, id := range ids {
			out[clientv3.LeaseID(id)] = true
		}
	}
	return out
}

// TestLeaseReuse: a released term's lease backs the handle's next grant of
// any name and holder with that TTL, with a higher token and a full TTL, and
// the old term's late calls, through the same handle or another, neither
// touch the new term nor keep its lease alive: the new term, never renewed,
// expires on time while they keep coming.
func TestLeaseReuse(t *testing.T) {
	m := shared(t)
	prefix := uniquePrefix("reuse")
	a, b := openStore(t, prefix, m.clientURL), openStore(t, prefix, m.clientURL)
	ctx := testCtx(t, 60*time.Second)
	const ttl = 2 * time.Second

	old, err := a.Acquire(ctx, "x", "node-a", ttl, "")
	if err != nil {
		t.Fatal(err)
	}
	l := keyLease(t, a, old.Term)
	if err := a.Release(ctx, old.Term); err != nil {
		t.Fatal(err)
	}
	if !a.pooledIDs()[l] {
		t.Fatalf("after Release, lease %x is not in the handle's pool", int64(l))
	}
	cur, err := a.Acquire(ctx, "y", "node-b", ttl, "meta")
	if err != nil {
		t.Fatal(err)
	}
	if got := keyLease(t, a, cur.Term); got != l {
		t.Fatalf("the next grant with the same TTL is on lease %x, want the released term's %x", int64(got), int64(l))
	}
	if cur.Token <= old.Token {
		t.Fatalf("token on a reused lease %d, want > %d", cur.Token, old.Token)
	}
	if cur.TTL != ttl || cur.Remaining <= ttl-time.Second || cur.Remaining > ttl {
		t.Fatalf("grant on a reused lease: TTL %v, Remaining %v; want the full %v (the lease refreshed)", cur.TTL, cur.Remaining, ttl)
	}

	for _, st := range []*Store{a, b} {
		if _, err := st.Renew(ctx, old.Term, ttl); !errors.Is(err, store.ErrNotHeld) {
			t.Fatalf("Renew of the released term whose lease was reused: %v, want ErrNotHeld", err)
		}
		if err := st.Release(ctx, old.Term); !errors.Is(err, store.ErrNotHeld) {
			t.Fatalf("Release of the released term whose lease was reused: %v, want ErrNotHeld", err)
		}
		if _, err := st.Fence(ctx, old.Term); !errors.Is(err, store.ErrNotHeld) {
			t.Fatalf("Fence of the released term whose lease was reused: %v, want ErrNotHeld", err)
		}
	}
	if g, err := b.Get(ctx, "y"); err != nil || g.Term != cur.Term || !g.Live() || g.Metadata != "meta" {
		t.Fatalf("Get(y) = %+v, %v; want %v live", g, err, cur.Term)
	}

	// Nobody renews cur. The released term's renewals keep coming through
	// both handles; if any of them reached the lease, cur would not expire.
	start := time.Now()
	for {
		for _, st := range []*Store{a, b} {
			if _, err := st.Renew(ctx, old.Term, ttl); !errors.Is(err, store.ErrNotHeld) {
				t.Fatalf("late Renew of the released term: %v, want ErrNotHeld", err)
			}
		}
		g, err := b.Get(ctx, "y")
		if err != nil {
			t.Fatal(err)
		}
		if !g.Live() {
			break
		}
		// etcd ends a lease within a revocation tick (500 ms) of its TTL.
		if time.Since(start) > ttl+5*time.Second {
			t.Fatalf("the term on the reused lease is still live %v after its grant of %v: %+v", time.Since(start), ttl, g)
		}
		time.Sleep(50 * time.Millisecond) // paces the late renewals
	}
	next, err := b.Acquire(ctx, "y", "node-c", ttl, "")
	if err != nil {
		t.Fatal(err)
	}
	if next.Token <= cur.Token {
		t.Fatalf("token after the reused lease expired %d, want > %d", next.Token, cur.Token)
	}
}

// TestLeaseReuseSameName: on the same name a reused lease gives the same key
// name, created again; a late Release of the old term must not delete it.
func TestLeaseReuseSameName(t *testing.T) {
	m := shared(t)
	prefix := uniquePrefix("reuse1")
	a, b := openStore(t, prefix, m.clientURL), openStore(t, prefix, m.clientURL)
	ctx := testCtx(t, 30*time.Second)
	ttl := time.Minute

	old, err := a.Acquire(ctx, "job", "node-a", ttl, "")
	if err != nil {
		t.Fatal(err)
	}
	oldKey, err := a.TermKey(ctx, old.Term)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Release(ctx, old.Term); err != nil {
		t.Fatal(err)
	}
	cur, err := a.Acquire(ctx, "job", "node-b", ttl, "")
	if err != nil {
		t.Fatal(err)
	}
	if key, _ := a.TermKey(ctx, cur.Term); key != oldKey {
		t.Fatalf("same name, reused lease: key %q, want the old key name %q again", key, oldKey)
	}
	for _, st := range []*Store{b, a} {
		if err := st.Release(ctx, old.Term); !errors.Is(err, store.ErrNotHeld) {
			t.Fatalf("late Release of the old term: %v, want ErrNotHeld", err)
		}
		if _, err := st.Renew(ctx, old.Term, ttl); !errors.Is(err, store.ErrNotHeld) {
			t.Fatalf("late Renew of the old term: %v, want ErrNotHeld", err)
		}
	}
	g, err := b.Get(ctx, "job")
	if err != nil || g.Term != cur.Term || !g.Live() {
		t.Fatalf("after the old term's late calls Get = %+v, %v; want %v live", g, err, cur.Term)
	}
	if _, err := b.Fence(ctx, cur.Term); err != nil {
		t.Fatalf("Fence of the live term: %v", err)
	}
	if err := a.Release(ctx, cur.Term); err != nil {
		t.Fatal(err)
	}
}

// TestRenewThroughAnotherHandle: a handle never keeps alive a lease another
// handle granted (that handle may reuse it once the term is released there);
// it moves the term's key to a lease of its own, keeping the token. The
// leases involved are never pooled afterwards.
func TestRenewThroughAnotherHandle(t *testing.T) {
	m := shared(t)
	prefix := uniquePrefix("adopt")
	a, b := openStore(t, prefix, m.clientURL), openStore(t, prefix, m.clientURL)
	cli := a.Client()
	ctx := testCtx(t, 60*time.Second)
	ttl := 30 * time.Second

	held, err := a.Acquire(ctx, "job", "node-a", ttl, "meta")
	if err != nil {
		t.Fatal(err)
	}
	la := keyLease(t, a, held.Term)
	r, err := b.Renew(ctx, held.Term, ttl)
	if err != nil {
		t.Fatalf("Renew through another handle: %v", err)
	}
	if r.Term != held.Term || r.Metadata != "meta" || r.Remaining <= ttl-time.Second || r.Remaining > ttl {
		t.Fatalf("Renew through another handle = %+v; want %v, its metadata, and about %v left", r, held.Term, ttl)
	}
	lb := keyLease(t, b, held.Term)
	if lb == la {
		t.Fatalf("after a renewal through another handle the key is still on the acquiring handle's lease %x", int64(la))
	}
	waitRevoked(t, cli, la, "the lease the key was moved off")

	// The acquiring handle renews again: its lease is gone, and it does not
	// keep b's lease alive either: the key moves to a lease of its own.
	if _, err := a.Renew(ctx, held.Term, ttl); err != nil {
		t.Fatalf("Renew through the acquiring handle after the move: %v", err)
	}
	la2 := keyLease(t, a, held.Term)
	if la2 == la || la2 == lb {
		t.Fatalf("key on lease %x after the second move, want a new lease (not %x or %x)", int64(la2), int64(la), int64(lb))
	}
	waitRevoked(t, cli, lb, "the other handle's lease the key was moved off")

	if err := a.Release(ctx, held.Term); err != nil {
		t.Fatal(err)
	}
	for _, st := range []*Store{a, b} {
		for _, id := range []clientv3.LeaseID{la, lb} {
			if st.pooledIDs()[id] {
				t.Fatalf("lease %x, which the key was moved off, is in a pool", int64(id))
			}
		}
	}
	if _, err := b.Renew(ctx, held.Term, ttl); !errors.Is(err, store.ErrNotHeld) {
		t.Fatalf("Renew after Release: %v, want ErrNotHeld", err)
	}
	next, err := a.Acquire(ctx, "job", "node-b", ttl, "")
	if err != nil {
		t.Fatal(err)
	}
	if got := keyLease(t, a, next.Term); got == la || got == lb {
		t.Fatalf("next grant on lease %x, a lease the key was moved off", int64(got))
	}
}

// TestLeaseNotPooledWithKeepAliveOutstanding: a lease with a keep-alive whose
// answer never came (etcd may still apply it) or one in flight is revoked on
// release, not pooled. The outstanding keep-alive is simulated in the table.
func TestLeaseNotPooledWithKeepAliveOutstanding(t *testing.T) {
	m := shared(t)
	st := openStore(t, uniquePrefix("taint"), m.clientURL)
	ctx := testCtx(t, 30*time.Second)
	for _, c := range []struct {
		name string
		mark func(*ownLease)
	}{
		{"Unanswered", func(l *ownLease) { l.tainted = true }},
		{"InFlight", func(l *ownLease) { l.inflight++ }},
	} {
		t.Run(c.name, func(t *testing.T) {
			rec, err := st.Acquire(ctx, "job", "node-a", time.Minute, "")
			if err != nil {
				t.Fatal(err)
			}
			l := keyLease(t, st, rec.Term)
			st.termsMu.Lock()
			ol := st.leases[etcdapi.LeaseID(l)]
			if ol == nil || ol.term != rec.Term {
				st.termsMu.Unlock()
				t.Fatalf("the handle's table does not say lease %x carries %v: %+v", int64(l), rec.Term, ol)
			}
			c.mark(ol)
			st.termsMu.Unlock()
			if err := st.Release(ctx, rec.Term); err != nil {
				t.Fatal(err)
			}
			if st.pooledIDs()[l] {
				t.Fatalf("lease %x pooled with a keep-alive outstanding", int64(l))
			}
			waitRevoked(t, st.Client(), l, "release with a keep-alive outstanding")
		})
	}
}

// TestPooledLeaseTooOld: a pooled lease with too little life left is revoked,
// and the grant gets a new lease.
func TestPooledLeaseTooOld(t *testing.T) {
	m := shared(t)
	st := openStore(t, uniquePrefix("stale"), m.clientURL)
	ctx := testCtx(t, 30*time.Second)
	rec, err := st.Acquire(ctx, "job", "node-a", time.Minute, "")
	if err != nil {
		t.Fatal(err)
	}
	l := keyLease(t, st, rec.Term)
	if err := st.Release(ctx, rec.Term); err != nil {
		t.Fatal(err)
	}
	st.termsMu.Lock()
	st.leases[etcdapi.LeaseID(l)].aliveUntil = time.Now() // as if its last keep-alive was a TTL ago
	st.termsMu.Unlock()
	next, err := st.Acquire(ctx, "job", "node-a", time.Minute, "")
	if err != nil {
		t.Fatal(err)
	}
	if got := keyLease(t, st, next.Term); got == l {
		t.Fatalf("grant on the pooled lease %x whose life had run out", int64(l))
	}
	waitRevoked(t, st.Client(), l, "a pooled lease too old to use")
}

// TestClosePoolRevoked: Close revokes the pooled leases (they carry no key),
// and a pooled lease is not shared with another TTL.
func TestClosePoolRevoked(t *testing.T) {
	m := shared(t)
	prefix := uniquePrefix("close")
	st, err := Open(testCtx(t, 10*time.Second), Config{Endpoints: []string{m.clientURL}, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	cli := newClient(t, m.clientURL)
	ctx := testCtx(t, 30*time.Second)
	rec, err := st.Acquire(ctx, "job", "node-a", time.Minute, "")
	if err != nil {
		t.Fatal(err)
	}
	l := keyLease(t, st, rec.Term)
	if err := st.Release(ctx, rec.Term); err != nil {
		t.Fatal(err)
	}
	other, err := st.Acquire(ctx, "job", "node-a", 2*time.Minute, "")
	if err != nil {
		t.Fatal(err)
	}
	if got := keyLease(t, st, other.Term); got == l {
		t.Fatalf("a 2 min grant reused the pooled 1 min lease %x", int64(l))
	}
	if ttl := leaseTTL(t, cli, l); ttl <= 0 {
		t.Fatalf("pooled lease %x: TTL %d, want alive until Close", int64(l), ttl)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if ttl := leaseTTL(t, cli, l); ttl != -1 {
		t.Fatalf("after Close the pooled lease %x has TTL %d, want revoked", int64(l), ttl)
	}
	// Close does not release: the live term keeps its lease.
	if r, err := cli.Get(context.Background(), prefix+"job/", clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || r.Count != 1 {
		t.Fatalf("after Close: %v keys under the name (%v), want the live term's 1", r.Count, err)
	}
}

// TestReuseRaces: a term's Release and a late Renew race an Acquire of
// another name on the same handle, which may take the released lease from the
// pool. Whatever the interleaving, the new term must keep its lease: the
// late renewal's clean-up (the lease of a term that has ended) must never
// revoke a lease that has moved on to the new term.
func TestReuseRaces(t *testing.T) {
	m := shared(t)
	st := openStore(t, uniquePrefix("races"), m.clientURL)
	ctx := testCtx(t, 60*time.Second)
	ttl := time.Minute
	for i := 0; i < 100; i++ {
		old, err := st.Acquire(ctx, "a", "node-a", ttl, "")
		if err != nil {
			t.Fatal(err)
		}
		// The renewal's read sees the key gone about when the release's
		// answer arrives; the acquire starts the moment the release returns,
		// so it may take the lease while the renewal is still cleaning up.
		renewed := make(chan struct{})
		go func() { st.Renew(ctx, old.Term, ttl); close(renewed) }()
		relErr := st.Release(ctx, old.Term)
		cur, acqErr := st.Acquire(ctx, "b", "node-b", ttl, "")
		<-renewed
		if relErr != nil && !errors.Is(relErr, store.ErrNotHeld) {
			t.Fatalf("round %d: Release: %v", i, relErr)
		}
		if acqErr != nil {
			t.Fatalf("round %d: Acquire: %v", i, acqErr)
		}
		st.life.Wait() // background revocations of this round (no watch is open)
		l := keyLease(t, st, cur.Term)
		if ttl := leaseTTL(t, st.Client(), l); ttl <= 0 {
			t.Fatalf("round %d: the live term %v lost its lease %x (TTL %d)", i, cur.Term, int64(l), ttl)
		}
		if err := st.Release(ctx, cur.Term); err != nil {
			t.Fatalf("round %d: Release of the new term: %v", i, err)
		}
		st.Release(ctx, old.Term) // if the race left it live
	}
}

// TestFreshPooledLeaseNoKeepAlive: acquire-and-release cycles on one handle
// reuse one pooled lease, and while it has lost at most an eighth of its TTL
// no keep-alive is sent: a grant is the transaction alone, its Remaining what
// the lease has left (at most ttl). The control: a pooled lease older than
// that gets a keep-alive with the next grant.
func TestFreshPooledLeaseNoKeepAlive(t *testing.T) {
	m := shared(t)
	st := openStore(t, uniquePrefix("fresh"), m.clientURL)
	ctx := testCtx(t, 30*time.Second)
	ttl := 2 * time.Second // an eighth: 250 ms
	cycle := func() store.Record {
		t.Helper()
		rec, err := st.Acquire(ctx, "job", "node-a", ttl, "")
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Release(ctx, rec.Term); err != nil {
			t.Fatal(err)
		}
		return rec
	}
	cycle() // a new lease, granted: no keep-alive
	before := st.acquireKeepAlives.Load()
	start := time.Now()
	n := 0
	for time.Since(start) < 100*time.Millisecond {
		rec := cycle()
		n++
		if rec.Remaining > ttl || rec.Remaining < ttl-freshSlack(ttl)-time.Since(start) {
			t.Fatalf("grant %d on a fresh pooled lease: Remaining %v, want at most %v and at least what the lease has left", n, rec.Remaining, ttl)
		}
	}
	if got := st.acquireKeepAlives.Load() - before; got != 0 {
		t.Fatalf("%d cycles within 100 ms on a fresh pooled lease sent %d keep-alives, want none", n, got)
	}
	time.Sleep(freshSlack(ttl) + 50*time.Millisecond)
	cycle()
	if got := st.acquireKeepAlives.Load() - before; got != 1 {
		t.Fatalf("control: a grant on a pooled lease older than an eighth of its TTL sent %d keep-alives, want 1", got)
	}
}
