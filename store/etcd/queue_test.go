package etcd

import (
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/leasehold/leasehold/store"
)

// TestQueuePlaceBecomesTerm: a place ranks in etcd's queue (another
// holder's Acquire is refused and sees the place's holder); its holder's
// Acquire makes it the term, whose token is the place key's create
// revision, kept on the same key; Dequeue then ends nothing, through either
// handle; the term renews, fences and releases like any other, and Get
// then reports its token as the last one.
func TestQueuePlaceBecomesTerm(t *testing.T) {
	m := shared(t)
	prefix := uniquePrefix("qterm")
	st, other := openStore(t, prefix, m.clientURL), openStore(t, prefix, m.clientURL)
	cli := st.Client()
	ctx := testCtx(t, 30*time.Second)
	if n, err := st.Enqueue(ctx, "job", "w", 10*time.Second); err != nil || n != 0 {
		t.Fatalf("Enqueue on a free name = %d, %v; want 0 ahead", n, err)
	}
	resp, err := cli.Get(ctx, st.ContenderPrefix("job")+"/", clientv3.WithPrefix())
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "w" {
		t.Fatalf("contender keys after Enqueue: %v, %v; want one, holding \"w\"", resp, err)
	}
	place := resp.Kvs[0]

	rec, err := other.Acquire(ctx, "job", "x", 10*time.Second, "")
	if !errors.Is(err, store.ErrHeld) || rec.Holder != "w" || rec.Token != place.CreateRevision || !rec.Live() {
		t.Fatalf("another holder's Acquire while w's place is first = %+v, %v; want ErrHeld by w at token %d", rec, err, place.CreateRevision)
	}
	rec, err = st.Acquire(ctx, "job", "w", 10*time.Second, "meta")
	if err != nil {
		t.Fatalf("Acquire by the first place's holder: %v", err)
	}
	if rec.Token != place.CreateRevision {
		t.Fatalf("token %d, want the place key's create revision %d", rec.Token, place.CreateRevision)
	}
	resp, err = cli.Get(ctx, string(place.Key))
	if err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].CreateRevision != place.CreateRevision || resp.Kvs[0].Lease == place.Lease {
		t.Fatalf("the place key after the grant: %v, %v; want it kept (create revision %d) on another lease than the place's %x", resp, err, place.CreateRevision, place.Lease)
	}
	if ttl, err := cli.TimeToLive(ctx, clientv3.LeaseID(place.Lease)); err == nil && ttl.TTL > 0 {
		// The place's lease is revoked in the background once the term is
		// granted; it carries nothing either way.
		if len(ttl.Keys) != 0 {
			t.Fatalf("the place's lease still carries %q after the grant", ttl.Keys)
		}
	}
	for _, h := range []*Store{st, other} {
		if err := h.Dequeue(ctx, "job", "w"); err != nil {
			t.Fatalf("Dequeue after the grant: %v", err)
		}
	}
	got, err := other.Get(ctx, "job")
	if err != nil || got.Holder != "w" || got.Token != rec.Token || got.Metadata != "meta" || !got.Live() {
		t.Fatalf("Get after Dequeue = %+v, %v; want w's live term %d", got, err, rec.Token)
	}
	if _, err := other.Renew(ctx, rec.Term, 10*time.Second); err != nil {
		t.Fatalf("Renew through another handle: %v", err)
	}
	f, err := other.Fence(ctx, rec.Term)
	if err != nil || f.Key != string(place.Key) || f.CreateRevision != rec.Token {
		t.Fatalf("Fence = %+v, %v; want the place key at the token", f, err)
	}
	if tr, err := cli.Txn(ctx).If(fenceCmp(f)).Then(clientv3.OpPut(prefix+"data", "w")).Commit(); err != nil || !tr.Succeeded {
		t.Fatalf("fenced write while the term holds: %v, %v", tr, err)
	}
	if err := st.Release(ctx, rec.Term); err != nil {
		t.Fatalf("Release: %v", err)
	}
	got, err = other.Get(ctx, "job")
	if err != nil || got.Holder != "" || got.Token != rec.Token {
		t.Fatalf("Get after Release = %+v, %v; want no holder and the last token %d", got, err, rec.Token)
	}
	next, err := other.Acquire(ctx, "job", "x", 10*time.Second, "")
	if err != nil || next.Token <= rec.Token {
		t.Fatalf("the next grant = %+v, %v; want a token above %d", next, err, rec.Token)
	}
}

// TestQueueElectionValueIsNotAPlace: an etcd Election whose proposal is a
// leasehold holder's identity is not taken for that holder's place: the
// holder's Acquire is refused, its Enqueue queues behind the Election, and
// its Dequeue leaves the Election's key alone. (The negative control is
// TestQueuePlaceBecomesTerm, where the same Acquire on a real place is
// granted.)
func TestQueueElectionValueIsNotAPlace(t *testing.T) {
	m := shared(t)
	prefix := uniquePrefix("qelect")
	st := openStore(t, prefix, m.clientURL)
	ctx := testCtx(t, 30*time.Second)
	el := concurrency.NewElection(newSession(t, newClient(t, m.clientURL), 10), st.ContenderPrefix("job"))
	if err := el.Campaign(ctx, "w"); err != nil {
		t.Fatal(err)
	}
	if rec, err := st.Acquire(ctx, "job", "w", 10*time.Second, ""); !errors.Is(err, store.ErrHeld) || rec.Holder == "w" {
		t.Fatalf("Acquire by w while an Election with value w leads = %+v, %v; want ErrHeld by an etcd: holder", rec, err)
	}
	if n, err := st.Enqueue(ctx, "job", "w", 10*time.Second); err != nil || n != 0 {
		t.Fatalf("Enqueue behind the Election = %d, %v; want 0 ahead (the Election holds)", n, err)
	}
	if rec, err := st.Acquire(ctx, "job", "w", 10*time.Second, ""); !errors.Is(err, store.ErrHeld) {
		t.Fatalf("Acquire by w, queued behind the Election = %+v, %v; want ErrHeld", rec, err)
	}
	if err := st.Dequeue(ctx, "job", "w"); err != nil {
		t.Fatal(err)
	}
	lr, err := el.Leader(ctx)
	if err != nil || string(lr.Kvs[0].Value) != "w" || lr.Kvs[0].CreateRevision != el.Rev() {
		t.Fatalf("Election.Leader after w's Dequeue = %v, %v; want the Election's own key", lr, err)
	}
	if n := contenders(t, st, "job"); n != 1 {
		t.Fatalf("%d contender keys after Dequeue, want the Election's alone", n)
	}
}

// TestQueuePlaceLeaseReused: the lease of a place that became a term carries
// nothing and backs the handle's next place (no grant, no revocation), with
// the keep-alive sent alongside restoring its TTL; the next place ranks
// behind the term it came after.
func TestQueuePlaceLeaseReused(t *testing.T) {
	m := shared(t)
	prefix := uniquePrefix("qreuse")
	st := openStore(t, prefix, m.clientURL)
	cli := st.Client()
	ctx := testCtx(t, 30*time.Second)
	placeOf := func() *markerSeen {
		t.Helper()
		resp, err := cli.Get(ctx, st.markerKey("job", "w"))
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("w's marker: %v, %v; want one", resp, err)
		}
		return &markerSeen{lease: resp.Kvs[0].Lease, rev: resp.Kvs[0].CreateRevision}
	}
	if _, err := st.Enqueue(ctx, "job", "w", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	first := placeOf()
	rec, err := st.Acquire(ctx, "job", "w", 10*time.Second, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Dequeue(ctx, "job", "w"); err != nil {
		t.Fatal(err)
	}
	ttl, err := cli.TimeToLive(ctx, clientv3.LeaseID(first.lease), clientv3.WithAttachedKeys())
	if err != nil || ttl.TTL <= 0 || len(ttl.Keys) != 0 {
		t.Fatalf("the first place's lease after the grant: %+v, %v; want it alive (pooled), carrying nothing", ttl, err)
	}
	if err := st.Release(ctx, rec.Term); err != nil {
		t.Fatal(err)
	}
	if n, err := st.Enqueue(ctx, "job", "w", 10*time.Second); err != nil || n != 0 {
		t.Fatalf("Enqueue again = %d, %v", n, err)
	}
	second := placeOf()
	if second.lease != first.lease || second.rev <= rec.Token {
		t.Fatalf("the next place is on lease %x at revision %d; want the first place's lease %x, after the term %d", second.lease, second.rev, first.lease, rec.Token)
	}
	ttl, err = cli.TimeToLive(ctx, clientv3.LeaseID(second.lease), clientv3.WithAttachedKeys())
	if err != nil || len(ttl.Keys) != 2 || ttl.TTL < 8 {
		t.Fatalf("the reused lease: %+v, %v; want the place key and marker, with about its TTL of 10 s left", ttl, err)
	}
}

type markerSeen struct{ lease, rev int64 }

// TestQueueTwoHoldersOneHandle: holders that share a handle (and so its
// place leases) queue in turn: the lease of x's place, which became x's
// term, names a key that exists while x holds, so y's place goes on another
// lease, behind x's term.
func TestQueueTwoHoldersOneHandle(t *testing.T) {
	m := shared(t)
	st := openStore(t, uniquePrefix("qtwo"), m.clientURL)
	ctx := testCtx(t, 30*time.Second)
	if _, err := st.Enqueue(ctx, "job", "x", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	x, err := st.Acquire(ctx, "job", "x", 10*time.Second, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Dequeue(ctx, "job", "x"); err != nil {
		t.Fatal(err)
	}
	for range 2 { // a new place, then a refresh
		if n, err := st.Enqueue(ctx, "job", "y", 10*time.Second); err != nil || n != 0 {
			t.Fatalf("y's Enqueue while x holds = %d, %v; want 0 ahead", n, err)
		}
	}
	if n := contenders(t, st, "job"); n != 2 {
		t.Fatalf("%d contender keys, want x's term and y's place", n)
	}
	if _, err := st.Acquire(ctx, "job", "y", 10*time.Second, ""); !errors.Is(err, store.ErrHeld) {
		t.Fatalf("y's Acquire while x holds: %v, want ErrHeld", err)
	}
	if err := st.Release(ctx, x.Term); err != nil {
		t.Fatal(err)
	}
	y, err := st.Acquire(ctx, "job", "y", 10*time.Second, "")
	if err != nil || y.Token <= x.Token {
		t.Fatalf("y's Acquire after x released = %+v, %v; want a token above %d", y, err, x.Token)
	}
}
