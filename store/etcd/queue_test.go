package etcd

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/etcd/internal/etcdapi"
)

// TestQueuePlaceBecomesTerm: a place ranks in etcd's queue (another
// holder's Acquire is refused and sees the place's holder); its holder's
// Acquire makes it the term, whose token is the place key's create
// revision, kept on the same key and lease; once the term is recorded its
// marker is gone, and Dequeue ends nothing, through either handle; the term renews, fences and releases like any other, and Get
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
	if err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].CreateRevision != place.CreateRevision || resp.Kvs[0].Lease != place.Lease {
		t.Fatalf("the place key after the grant: %v, %v; want it kept (create revision %d) on the place's lease %x", resp, err, place.CreateRevision, place.Lease)
	}
	waitRecorded(t, st, rec.Term)
	if m, err := cli.Get(ctx, st.markerKey("job", "w")); err != nil || len(m.Kvs) != 0 {
		t.Fatalf("w's marker once the term is recorded: %v, %v; want it gone", m, err)
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
// the term; once the term is released it carries nothing and backs the
// handle's next place (no grant, no revocation), with the keep-alive sent
// alongside restoring its TTL; the next place ranks behind the term it came
// after.
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
	waitRecorded(t, st, rec.Term)
	ttl, err := cli.TimeToLive(ctx, clientv3.LeaseID(first.lease), clientv3.WithAttachedKeys())
	if err != nil || ttl.TTL <= 0 || len(ttl.Keys) != 1 {
		t.Fatalf("the first place's lease after the grant: %+v, %v; want it alive, carrying the term's key alone", ttl, err)
	}
	if err := st.Release(ctx, rec.Term); err != nil {
		t.Fatal(err)
	}
	ttl, err = cli.TimeToLive(ctx, clientv3.LeaseID(first.lease), clientv3.WithAttachedKeys())
	if err != nil || ttl.TTL <= 0 || len(ttl.Keys) != 0 {
		t.Fatalf("the first place's lease after the release: %+v, %v; want it alive (pooled), carrying nothing", ttl, err)
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

// waitRecorded waits until st has written the record of term t, made from a
// place without a write (grantPlace's recordPlace).
func waitRecorded(t *testing.T, st *Store, term store.Term) {
	t.Helper()
	ti, ok := st.recall(term)
	if !ok {
		t.Fatalf("the handle does not know term %v", term)
	}
	if ti.recorded == nil {
		t.Fatalf("term %v was not made from a place without a write", term)
	}
	<-ti.recorded
}

// writeGate holds every transaction that writes (a put or a delete) while
// it is shut, as a network that delays them would; reads pass.
type writeGate struct {
	etcdapi.Client
	mu   sync.Mutex
	open chan struct{} // closed while the gate is open
}

func newWriteGate(cli etcdapi.Client) *writeGate {
	g := &writeGate{Client: cli, open: make(chan struct{})}
	close(g.open)
	return g
}

func (g *writeGate) shut() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.open:
		g.open = make(chan struct{})
	default:
	}
}

func (g *writeGate) lift() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.open:
	default:
		close(g.open)
	}
}

func (g *writeGate) Txn(ctx context.Context, cmps []etcdapi.Cmp, then, els []etcdapi.Op) (*etcdapi.TxnResponse, error) {
	for _, op := range append(append([]etcdapi.Op(nil), then...), els...) {
		if op.Kind == etcdapi.OpRange {
			continue
		}
		g.mu.Lock()
		open := g.open
		g.mu.Unlock()
		select {
		case <-open:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		break
	}
	return g.Client.Txn(ctx, cmps, then, els)
}

// TestQueueGrantWithoutWrite: the holder whose place is first is granted
// while every write is held back: the grant is a read, as etcd's Mutex
// takes the lock. Meanwhile the place shows as the holder's term to
// everyone, another holder is refused, and another handle of the same
// holder gets a new term with a higher token (the place is a live term of
// that holder, never a place to grant twice), which ends the first. The
// term's record (its metadata) lands once writes pass. The control: a place
// whose lease cannot carry the term (another TTL) needs a write, and its
// grant waits for the gate.
func TestQueueGrantWithoutWrite(t *testing.T) {
	m := shared(t)
	prefix := uniquePrefix("qfree")
	base := openStore(t, prefix, m.clientURL)
	gate := newWriteGate(base.cli)
	st, err := NewOnAPI(gate, prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gate.lift(); st.Close() })
	other := openStore(t, prefix, m.clientURL)
	ctx := testCtx(t, 30*time.Second)

	// The control first: a place of 10 s, a term of 20 s.
	if n, err := st.Enqueue(ctx, "ctl", "w", 10*time.Second); err != nil || n != 0 {
		t.Fatalf("Enqueue = %d, %v; want 0 ahead", n, err)
	}
	gate.shut()
	short, cancel := context.WithTimeout(ctx, time.Second)
	_, err = st.Acquire(short, "ctl", "w", 20*time.Second, "")
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire of a 20 s term from a 10 s place while writes are held: %v; want it held until its deadline", err)
	}
	gate.lift()

	if n, err := st.Enqueue(ctx, "job", "w", 10*time.Second); err != nil || n != 0 {
		t.Fatalf("Enqueue = %d, %v; want 0 ahead", n, err)
	}
	p, _ := st.placeOf(placeID{"job", "w"})
	gate.shut()
	rec, err := st.Acquire(ctx, "job", "w", 10*time.Second, "meta")
	if err != nil || rec.Token != p.rev || rec.Remaining < 5*time.Second {
		t.Fatalf("Acquire by the first place's holder while writes are held = %+v, %v; want the place's token %d", rec, err, p.rev)
	}
	got, err := other.Get(ctx, "job")
	if err != nil || got.Holder != "w" || got.Token != rec.Token || !got.Live() {
		t.Fatalf("Get before the term's record = %+v, %v; want w's live term %d", got, err, rec.Token)
	}
	if r, err := other.Acquire(ctx, "job", "x", 10*time.Second, ""); !errors.Is(err, store.ErrHeld) || r.Holder != "w" {
		t.Fatalf("another holder's Acquire = %+v, %v; want ErrHeld by w", r, err)
	}
	again, err := other.Acquire(ctx, "job", "w", 10*time.Second, "")
	if err != nil || again.Token <= rec.Token {
		t.Fatalf("w's Acquire through another handle = %+v, %v; want a new term above %d", again, err, rec.Token)
	}
	gate.lift()
	waitRecorded(t, st, rec.Term)
	if _, err := st.Renew(ctx, rec.Term, 10*time.Second); !errors.Is(err, store.ErrNotHeld) {
		t.Fatalf("Renew of the replaced term: %v, want ErrNotHeld", err)
	}
	got, err = other.Get(ctx, "job")
	if err != nil || got.Term != again.Term {
		t.Fatalf("Get after the late record = %+v, %v; want the new term %v (the late record must not overwrite it)", got, err, again.Term)
	}
	if err := other.Release(ctx, again.Term); err != nil {
		t.Fatal(err)
	}

	// The record of an unreplaced term lands once writes pass.
	if n, err := st.Enqueue(ctx, "job2", "w", 10*time.Second); err != nil || n != 0 {
		t.Fatalf("Enqueue = %d, %v; want 0 ahead", n, err)
	}
	// The place's lease was granted before Enqueue returned, so it ends no
	// sooner than that plus its TTL: the grant, sent no keep-alive (the lease
	// is fresh), must not promise more than that.
	placed := time.Now()
	gate.shut()
	rec, err = st.Acquire(ctx, "job2", "w", 10*time.Second, "meta")
	answered := time.Now()
	if err != nil {
		t.Fatalf("Acquire while writes are held: %v", err)
	}
	if until := answered.Add(rec.Remaining); until.After(placed.Add(10 * time.Second)) {
		t.Fatalf("the grant's Remaining %v runs %v past the place lease's surest end (its grant's send + 10 s)", rec.Remaining, until.Sub(placed.Add(10*time.Second)))
	}
	if got, err := other.Get(ctx, "job2"); err != nil || got.Term != rec.Term || got.Metadata != "" {
		t.Fatalf("Get before the record = %+v, %v; want %v with no metadata yet", got, err, rec.Term)
	}
	gate.lift()
	waitRecorded(t, st, rec.Term)
	if got, err := other.Get(ctx, "job2"); err != nil || got.Term != rec.Term || got.Metadata != "meta" {
		t.Fatalf("Get after the record = %+v, %v; want %v with its metadata", got, err, rec.Term)
	}
	if _, err := other.Renew(ctx, rec.Term, 10*time.Second); err != nil {
		t.Fatalf("Renew through another handle: %v", err)
	}
	if err := st.Release(ctx, rec.Term); err != nil {
		t.Fatal(err)
	}
	if got, err := other.Get(ctx, "job2"); err != nil || got.Holder != "" || got.Token != rec.Token {
		t.Fatalf("Get after Release = %+v, %v; want no holder, last token %d", got, err, rec.Token)
	}
}

// requestLog records, in order, the requests a Store handle sends through
// it: each transaction as "txn-read" (no put or delete in it: etcd serves
// it on its read path) or "txn-write", and the other calls by name.
type requestLog struct {
	etcdapi.Client
	mu  sync.Mutex
	log []string
}

func (r *requestLog) add(what string) {
	r.mu.Lock()
	r.log = append(r.log, what)
	r.mu.Unlock()
}

// since returns the requests after the first n.
func (r *requestLog) since(n int) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.log[n:]...)
}

func (r *requestLog) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.log)
}

func (r *requestLog) Txn(ctx context.Context, cmps []etcdapi.Cmp, then, els []etcdapi.Op) (*etcdapi.TxnResponse, error) {
	kind := "txn-read"
	for _, op := range append(append([]etcdapi.Op(nil), then...), els...) {
		if op.Kind != etcdapi.OpRange {
			kind = "txn-write"
		}
	}
	r.add(kind)
	return r.Client.Txn(ctx, cmps, then, els)
}

func (r *requestLog) Range(ctx context.Context, op etcdapi.Op) (*etcdapi.OpResponse, error) {
	r.add("range")
	return r.Client.Range(ctx, op)
}

func (r *requestLog) Grant(ctx context.Context, ttl int64) (etcdapi.LeaseID, int64, error) {
	r.add("grant")
	return r.Client.Grant(ctx, ttl)
}

func (r *requestLog) TimeToLive(ctx context.Context, id etcdapi.LeaseID) (int64, int64, error) {
	r.add("time-to-live")
	return r.Client.TimeToLive(ctx, id)
}

func (r *requestLog) KeepAliveOnce(ctx context.Context, id etcdapi.LeaseID) (int64, error) {
	r.add("keep-alive")
	return r.Client.KeepAliveOnce(ctx, id)
}

// TestFairHandoffSendsNothing: a fair Lock waiting in etcd's queue right
// behind the holder takes the lock, once the holder releases, on its watch's
// event alone: its handle sends no request between the release and the
// grant (the term's record, a write, follows). etcd's Election waits for its
// predecessor's delete and then reads once. Controls, by hand: with the
// watch's proof ignored (provenLowest always false), the first request is a
// read-only transaction; with the grant made by the transaction that writes
// the record (grantPlace off), it is a write sent before the grant.
func TestFairHandoffSendsNothing(t *testing.T) {
	m := shared(t)
	prefix := uniquePrefix("qread")
	holderSt := openStore(t, prefix, m.clientURL)
	base := openStore(t, prefix, m.clientURL)
	reqs := &requestLog{Client: base.cli}
	st, err := NewOnAPI(reqs, prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	ctx := testCtx(t, 30*time.Second)
	h, err := holderSt.Acquire(ctx, "job", "h", 10*time.Second, "")
	if err != nil {
		t.Fatal(err)
	}
	// The waiter is settled once it was refused three times: its first
	// try (on the queue's being empty), its try once queued, and its try
	// once its watch was made. It then waits on the watch.
	settled := make(chan struct{})
	var refusals atomic.Int32
	lk, err := leasehold.NewLock(st, "job", leasehold.Config{Identity: "w", Timings: lockTimings(), Fair: true,
		OnEvent: func(ev leasehold.Event) {
			if ev.Kind == leasehold.EventAcquireAttempt && errors.Is(ev.Err, store.ErrHeld) && refusals.Add(1) == 3 {
				close(settled)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *leasehold.Lease, 1)
	go func() {
		l, err := lk.Acquire(ctx)
		if err != nil {
			t.Errorf("the waiter's Acquire: %v", err)
		}
		got <- l
	}()
	waitDone(t, settled, "the waiter settled behind the holder")
	mark := reqs.len()
	if err := holderSt.Release(ctx, h.Term); err != nil {
		t.Fatal(err)
	}
	l := waitDone(t, got, "the waiter's grant")
	if l == nil {
		return
	}
	if after := reqs.since(mark); len(after) > 0 && after[0] != "txn-write" {
		t.Fatalf("the waiter's requests from the release to its grant (and its record's write after): %v; want none before the record's write", after)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestQueueLowestOnlyWhenNothingIsBelow: the watch shows a waiter's place
// lowest only when it saw every contender key that was below the place
// deleted, and no change to the place's own key. Behind a term and another
// waiter's place, the deletion of that place leaves the term below: the
// waiter's Acquire reads and is refused. A put of the term's key (not a
// delete) is refused too. Once the term is released, the grant sends
// nothing. On a second name, a put of the waiter's own place key between
// the refusal and the release makes the grant read first. Controls, by
// hand: with the whole below set dropped at the first deletion, it fails at
// the first refusal; with any event taken for a deletion, at the put of the
// term's key; with the place's own key not looked at, at the second name.
func TestQueueLowestOnlyWhenNothingIsBelow(t *testing.T) {
	m := shared(t)
	prefix := uniquePrefix("qlowest")
	h, b := openStore(t, prefix, m.clientURL), openStore(t, prefix, m.clientURL)
	base := openStore(t, prefix, m.clientURL)
	reqs := &requestLog{Client: base.cli}
	w, err := NewOnAPI(reqs, prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	cli := h.Client()
	ctx := testCtx(t, 30*time.Second)
	ttl := 10 * time.Second
	reads := func(rs []string) bool {
		for _, r := range rs {
			if r == "txn-read" || r == "range" {
				return true
			}
		}
		return false
	}

	term, err := h.Acquire(ctx, "job", "holder", ttl, "")
	if err != nil {
		t.Fatal(err)
	}
	if n, err := b.Enqueue(ctx, "job", "b", ttl); err != nil || n != 0 {
		t.Fatalf("b's Enqueue: %d ahead, %v; want 0", n, err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wake := waitBehind(wctx, t, w, "job", "waiter", ttl, 1)
	drainWake(wake)
	if err := b.Dequeue(ctx, "job", "b"); err != nil {
		t.Fatal(err)
	}
	waitWake(ctx, t, wake, "the waiter's watch after b's place went")
	mark := reqs.len()
	if rec, err := w.Acquire(ctx, "job", "waiter", ttl, ""); !errors.Is(err, store.ErrHeld) || rec.Term != term.Term {
		t.Fatalf("the waiter's Acquire with the term below its place: %+v, %v; want ErrHeld with %v", rec, err, term.Term)
	}
	if rs := reqs.since(mark); !reads(rs) {
		t.Fatalf("the refused Acquire's requests %v; want a read", rs)
	}

	// The term's key is put again on its lease (not deleted).
	kvs := contenderKeys(ctx, t, h, "job")
	if kvs[0].CreateRevision != term.Token {
		t.Fatalf("the contender keys: %v; want the term's first", kvs)
	}
	drainWake(wake)
	if _, err := cli.Put(ctx, string(kvs[0].Key), string(kvs[0].Value), clientv3.WithLease(clientv3.LeaseID(kvs[0].Lease))); err != nil {
		t.Fatal(err)
	}
	waitWake(ctx, t, wake, "the waiter's watch after the term's key was put")
	if rec, err := w.Acquire(ctx, "job", "waiter", ttl, ""); !errors.Is(err, store.ErrHeld) || rec.Token != term.Token {
		t.Fatalf("the waiter's Acquire after the term's key was put: %+v, %v; want ErrHeld with token %d", rec, err, term.Token)
	}

	drainWake(wake)
	if err := h.Release(ctx, term.Term); err != nil {
		t.Fatal(err)
	}
	waitWake(ctx, t, wake, "the waiter's watch after the release")
	mark = reqs.len()
	got, err := w.Acquire(ctx, "job", "waiter", ttl, "")
	if err != nil || got.Token <= term.Token {
		t.Fatalf("the waiter's Acquire after the release: %+v, %v; want a grant above token %d", got, err, term.Token)
	}
	if rs := reqs.since(mark); len(rs) > 0 && rs[0] != "txn-write" {
		t.Fatalf("the grant's requests %v; want none before its record's write", rs)
	}
	if rec, err := b.Get(ctx, "job"); err != nil || rec.Term != got.Term {
		t.Fatalf("Get through another handle: %+v, %v; want %v", rec, err, got.Term)
	}

	// A change of the place's own key: the proof is gone, and the grant reads.
	term2, err := h.Acquire(ctx, "job2", "holder", ttl, "")
	if err != nil {
		t.Fatal(err)
	}
	wake2 := waitBehind(wctx, t, w, "job2", "waiter", ttl, 0)
	kvs = contenderKeys(ctx, t, h, "job2")
	if len(kvs) != 2 || string(kvs[1].Value) != "waiter" {
		t.Fatalf("job2's contender keys: %v; want the term's and the waiter's place", kvs)
	}
	place := kvs[1]
	drainWake(wake2)
	if _, err := cli.Put(ctx, string(place.Key), string(place.Value), clientv3.WithLease(clientv3.LeaseID(place.Lease))); err != nil {
		t.Fatal(err)
	}
	waitWake(ctx, t, wake2, "the waiter's watch after its place's key was put")
	drainWake(wake2)
	if err := h.Release(ctx, term2.Term); err != nil {
		t.Fatal(err)
	}
	waitWake(ctx, t, wake2, "the waiter's watch after job2's release")
	mark = reqs.len()
	got2, err := w.Acquire(ctx, "job2", "waiter", ttl, "")
	if err != nil || got2.Token != place.CreateRevision {
		t.Fatalf("the waiter's Acquire on job2: %+v, %v; want its place's token %d", got2, err, place.CreateRevision)
	}
	if rs := reqs.since(mark); len(rs) == 0 || rs[0] != "txn-read" {
		t.Fatalf("the grant's requests after its place's key changed: %v; want a read first", rs)
	}
}

// TestQueueProvenPlaceDeletedBeforeGrant pins the case SAFETY.md accepts for
// the grant on the watch's event: a place the watch has shown lowest is
// deleted by hand after the watch's last event (here: after the watch
// ended), another holder takes the lease, and the waiter's Acquire still
// grants the place's term, with a token below that holder's. Its first
// renewal reads the key and finds it gone (ErrNotHeld), so the holder stops
// trusting it then, and a fence that has seen the newer token refuses it.
func TestQueueProvenPlaceDeletedBeforeGrant(t *testing.T) {
	m := shared(t)
	prefix := uniquePrefix("qgone")
	h, w, x := openStore(t, prefix, m.clientURL), openStore(t, prefix, m.clientURL), openStore(t, prefix, m.clientURL)
	cli := h.Client()
	ctx := testCtx(t, 30*time.Second)
	ttl := 10 * time.Second
	term, err := h.Acquire(ctx, "job", "holder", ttl, "")
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wake := waitBehind(wctx, t, w, "job", "waiter", ttl, 0)
	kvs := contenderKeys(ctx, t, h, "job")
	if len(kvs) != 2 || string(kvs[1].Value) != "waiter" {
		t.Fatalf("the contender keys: %v; want the term's and the waiter's place", kvs)
	}
	place := kvs[1]
	drainWake(wake)
	if err := h.Release(ctx, term.Term); err != nil {
		t.Fatal(err)
	}
	waitWake(ctx, t, wake, "the waiter's watch after the release")
	cancel()
	for range wake {
	} // the watch has ended: it sees no more

	if _, err := cli.Delete(ctx, string(place.Key)); err != nil {
		t.Fatal(err)
	}
	other, err := x.Acquire(ctx, "job", "x", ttl, "")
	if err != nil {
		t.Fatalf("x's Acquire once the place was deleted: %v", err)
	}
	got, err := w.Acquire(ctx, "job", "waiter", ttl, "")
	if err != nil || got.Token != place.CreateRevision || got.Token >= other.Token {
		t.Fatalf("the waiter's Acquire after its proven place was deleted: %+v, %v; want the place's token %d, below x's %d (the accepted case)", got, err, place.CreateRevision, other.Token)
	}
	if _, err := w.Renew(ctx, got.Term, ttl); !errors.Is(err, store.ErrNotHeld) {
		t.Fatalf("Renew of the term whose place was deleted: %v; want ErrNotHeld", err)
	}
	if rec, err := x.Get(ctx, "job"); err != nil || rec.Term != other.Term {
		t.Fatalf("Get: %+v, %v; want x's term %v", rec, err, other.Term)
	}
}

// waitBehind queues holder on w for name (ahead: the places it must find
// ahead), opens w's watch of name (ended with ctx), and has the holder's
// Acquire refused once after it, as a fair waiter settles: the watch then
// follows the place (watchgrant.go). It returns the watch's wake channel.
func waitBehind(ctx context.Context, t *testing.T, w *Store, name, holder string, ttl time.Duration, ahead int) <-chan struct{} {
	t.Helper()
	if n, err := w.Enqueue(ctx, name, holder, ttl); err != nil || n != ahead {
		t.Fatalf("%s's Enqueue on %s: %d ahead, %v; want %d", holder, name, n, err, ahead)
	}
	wake, err := w.Watch(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Acquire(ctx, name, holder, ttl, ""); !errors.Is(err, store.ErrHeld) {
		t.Fatalf("%s's Acquire on %s behind the term: %v; want ErrHeld", holder, name, err)
	}
	return wake
}

// contenderKeys reads name's contender keys, lowest first.
func contenderKeys(ctx context.Context, t *testing.T, st *Store, name string) []*mvccpb.KeyValue {
	t.Helper()
	resp, err := st.Client().Get(ctx, st.ContenderPrefix(name)+"/", clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil || len(resp.Kvs) == 0 {
		t.Fatalf("%s's contender keys: %v, %v; want some", name, resp, err)
	}
	return resp.Kvs
}

// drainWake empties a watch's wake channel.
func drainWake(ch <-chan struct{}) {
	select {
	case <-ch:
	default:
	}
}

// waitWake waits for a watch's wake.
func waitWake(ctx context.Context, t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case _, ok := <-ch:
		if !ok {
			t.Fatalf("%s: the watch closed", what)
		}
	case <-ctx.Done():
		t.Fatalf("%s: no wake", what)
	}
}

// TestQueueGrantOnceAcrossGoroutines: Acquires of one holder, sent at once
// through the handle whose place is first, never get the same token: the
// place is made a term by one of them, and the others replace that term
// (a live term of the same holder) with terms of their own, higher tokens.
// Control, by hand: with the claim on the place taken out (every call may
// make it a term), two of them get the place's token.
func TestQueueGrantOnceAcrossGoroutines(t *testing.T) {
	m := shared(t)
	st := openStore(t, uniquePrefix("qonce"), m.clientURL)
	ctx := testCtx(t, 30*time.Second)
	for round := range 5 {
		name := fmt.Sprintf("job%d", round)
		if n, err := st.Enqueue(ctx, name, "w", 10*time.Second); err != nil || n != 0 {
			t.Fatalf("Enqueue = %d, %v; want 0 ahead", n, err)
		}
		const k = 4
		tokens := make(chan int64, k)
		var wg sync.WaitGroup
		for range k {
			wg.Go(func() {
				rec, err := st.Acquire(ctx, name, "w", 10*time.Second, "")
				if err != nil {
					t.Errorf("Acquire: %v", err)
					return
				}
				tokens <- rec.Token
			})
		}
		wg.Wait()
		close(tokens)
		seen := map[int64]bool{}
		for tok := range tokens {
			if seen[tok] {
				t.Fatalf("round %d: token %d granted to two Acquires", round, tok)
			}
			seen[tok] = true
		}
	}
}
