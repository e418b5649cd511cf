package zookeeper

import (
	"context"
	"errors"
	"path"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/leasehold/leasehold/store"
)

// placeNode returns the one place node in the lease's path of st, or "".
func placeNode(t *testing.T, c *zk.Conn, st *Store, name string) string {
	t.Helper()
	kids := slices.DeleteFunc(contenderNames(t, c, st.Path(name)), func(n string) bool { return !isPlace(n) })
	if len(kids) > 1 {
		t.Fatalf("places in %s: %v, want at most one", st.Path(name), kids)
	}
	if len(kids) == 0 {
		return ""
	}
	return kids[0]
}

// TestPlaceBecomesTerm: a fair waiter's place is a contender node in the
// lease's path. Behind a live term its Acquire is refused (the control of
// the grant's condition); once the handle saw the term's node, the only one
// below the place, deleted, the Acquire through it makes the place the term
// with no request at all, with the node's czxid as the token and the
// place's metadata (TestPlaceLowestOnlyWhenNothingIsBelow has the controls).
// Dequeue after that sends nothing and leaves the term; the control: the
// holder's Dequeue through another handle deletes the node, and the term
// is gone.
func TestPlaceBecomesTerm(t *testing.T) {
	oc := newOpCounter(t, shared(t).Addr())
	root := uniqueRoot("place-term")
	h := openStore(t, root)
	w := openStore(t, root, oc.addr())
	o := openStore(t, root)
	c := rawConn(t)
	ctx := testCtx(t, 30*time.Second)
	ttl := 15 * time.Second

	first, err := h.Acquire(ctx, "job", "holder", ttl, "")
	if err != nil {
		t.Fatal(err)
	}
	ahead, err := w.EnqueueWithMetadata(ctx, "job", "waiter", ttl, "meta-w")
	if err != nil || ahead != 0 {
		t.Fatalf("Enqueue behind a term: %d ahead, %v; want 0 (the term is not a place)", ahead, err)
	}
	node := placeNode(t, c, w, "job")
	if node == "" {
		t.Fatal("no place node in the lease's path")
	}
	_, st, err := c.Get(w.Path("job") + "/" + node)
	if err != nil {
		t.Fatal(err)
	}
	if rec, err := w.Acquire(ctx, "job", "waiter", ttl, "meta-w"); !errors.Is(err, store.ErrHeld) || rec.Token != first.Token {
		t.Fatalf("the place's Acquire behind a live term: %+v, %v; want ErrHeld with the term (token %d)", rec, err, first.Token)
	}
	got := grantAfterRelease(ctx, t, h, w, oc, placeLowestSignal(t), first.Term, "meta-w")
	if got.Token != st.Czxid || got.Token <= first.Token || got.Metadata != "meta-w" || got.Remaining < ttl/2 {
		t.Fatalf("the place's grant: %+v; want the place's czxid %d (above %d) as the token, its metadata, most of %v left", got, st.Czxid, first.Token, ttl)
	}
	if rec, err := o.Get(ctx, "job"); err != nil || !rec.Live() || rec.Term != got.Term || rec.Metadata != "meta-w" {
		t.Fatalf("Get through another handle: %+v, %v; want the granted term %v with its metadata", rec, err, got.Term)
	}
	if err := w.Dequeue(ctx, "job", "waiter"); err != nil {
		t.Fatal(err)
	}
	if reqs := oc.take(); reqs != "" {
		t.Fatalf("Dequeue of a place that became the term: requests %q, want none", reqs)
	}
	if _, err := w.Renew(ctx, got.Term, ttl); err != nil {
		t.Fatalf("Renew of the term after Dequeue: %v", err)
	}

	// Control: the holder's Dequeue through another handle, which cannot
	// tell the term from a place, deletes the node.
	if err := o.Dequeue(ctx, "job", "waiter"); err != nil {
		t.Fatal(err)
	}
	if rec, err := o.Get(ctx, "job"); err != nil || rec.Live() {
		t.Fatalf("control: Get after another handle's Dequeue: %+v, %v; want the term gone", rec, err)
	}
	if _, err := w.Renew(ctx, got.Term, ttl); !errors.Is(err, store.ErrNotHeld) {
		t.Fatalf("control: Renew after another handle's Dequeue: %v, want ErrNotHeld", err)
	}
}

// placeLowestSignal returns a channel that receives the path of each node
// whose deletion made a place the lowest (testHookPlaceLowest).
func placeLowestSignal(t *testing.T) <-chan string {
	ch := make(chan string, 16)
	testHookPlaceLowest = func(p string) { ch <- p }
	t.Cleanup(func() { testHookPlaceLowest = nil })
	return ch
}

func waitSignal(ctx context.Context, t *testing.T, ch <-chan string, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-ctx.Done():
		t.Fatalf("%s: not within the test's time", what)
	}
}

// TestPlaceLowestOnlyWhenNothingIsBelow: a place becomes the term with no
// request only after the deletion of the one contender below it. Behind a
// term and another place, the deletion of that place leaves the term below:
// the Acquire lists and is refused with the term's record. A change of the
// data of the node below is no deletion: refused again. Once the term's
// node goes, nothing is below: the grant sends nothing. (With the "only
// contender below" condition dropped by hand, the first refusal fails:
// the place is granted with the term still live.)
func TestPlaceLowestOnlyWhenNothingIsBelow(t *testing.T) {
	oc := newOpCounter(t, shared(t).Addr())
	root := uniqueRoot("place-lowest")
	h, b := openStore(t, root), openStore(t, root)
	w := openStore(t, root, oc.addr())
	c := rawConn(t)
	ctx := testCtx(t, 30*time.Second)
	ttl := 15 * time.Second
	lowest := placeLowestSignal(t)

	term, err := h.Acquire(ctx, "job", "holder", ttl, "")
	if err != nil {
		t.Fatal(err)
	}
	if ahead, err := b.Enqueue(ctx, "job", "b", ttl); err != nil || ahead != 0 {
		t.Fatalf("b's Enqueue: %d ahead, %v; want 0", ahead, err)
	}
	if ahead, err := w.Enqueue(ctx, "job", "waiter", ttl); err != nil || ahead != 1 {
		t.Fatalf("the waiter's Enqueue: %d ahead, %v; want 1 (b's place)", ahead, err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wake, err := w.Watch(wctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	drainWake(wake)
	if err := b.Dequeue(ctx, "job", "b"); err != nil {
		t.Fatal(err)
	}
	waitWake(ctx, t, wake, "the waiter's watch after b's place went")
	oc.take()
	if rec, err := w.Acquire(ctx, "job", "waiter", ttl, ""); !errors.Is(err, store.ErrHeld) || rec.Term != term.Term {
		t.Fatalf("the waiter's Acquire with the term below its place: %+v, %v; want ErrHeld with %v", rec, err, term.Term)
	}
	if reqs := oc.take(); !strings.Contains(reqs, "getChildren2") {
		t.Fatalf("the refused Acquire: requests %q, want a listing", reqs)
	}

	// The term's node changes, and stays: no deletion.
	drainWake(wake)
	if _, err := c.Set(h.Path("job")+"/"+termNode(t, c, h, term.Term), []byte("changed by hand"), -1); err != nil {
		t.Fatal(err)
	}
	waitWake(ctx, t, wake, "the waiter's watch after the term's node changed")
	if rec, err := w.Acquire(ctx, "job", "waiter", ttl, ""); !errors.Is(err, store.ErrHeld) || rec.Token != term.Token {
		t.Fatalf("the waiter's Acquire after the term's node changed: %+v, %v; want ErrHeld with token %d", rec, err, term.Token)
	}

	got := grantAfterRelease(ctx, t, h, w, oc, lowest, term.Term, "")
	if got.Token <= term.Token {
		t.Fatalf("the grant's token %d, want above the term's %d", got.Token, term.Token)
	}
	if rec, err := b.Get(ctx, "job"); err != nil || rec.Term != got.Term {
		t.Fatalf("Get through another handle: %+v, %v; want %v", rec, err, got.Term)
	}
}

// TestPlaceGrantedOnlyByItsHandle: only the handle that wrote a place makes
// it a term. The same holder's Acquire through another handle takes the
// lowest place for that holder's live term and replaces it with a new node,
// so no two grants carry the place's token; the handle that wrote it then
// finds it gone and goes Acquire's usual way, replacing that term in turn.
func TestPlaceGrantedOnlyByItsHandle(t *testing.T) {
	root := uniqueRoot("place-handle")
	w := openStore(t, root)
	o := openStore(t, root)
	c := rawConn(t)
	ctx := testCtx(t, 30*time.Second)
	ttl := 15 * time.Second
	if _, err := w.Enqueue(ctx, "job", "waiter", ttl); err != nil {
		t.Fatal(err)
	}
	_, st, err := c.Get(w.Path("job") + "/" + placeNode(t, c, w, "job"))
	if err != nil {
		t.Fatal(err)
	}
	other, err := o.Acquire(ctx, "job", "waiter", ttl, "")
	if err != nil {
		t.Fatalf("the holder's Acquire through another handle: %v", err)
	}
	if other.Token <= st.Czxid {
		t.Fatalf("another handle's grant for the place's holder: token %d, want above the place's %d", other.Token, st.Czxid)
	}
	if n := placeNode(t, c, w, "job"); n != "" {
		t.Fatalf("the place %s is still there beside the other handle's term", n)
	}
	mine, err := w.Acquire(ctx, "job", "waiter", ttl, "")
	if err != nil {
		t.Fatalf("the writing handle's Acquire after the place went: %v", err)
	}
	if mine.Token <= other.Token {
		t.Fatalf("tokens %d then %d: the second grant does not replace the first", other.Token, mine.Token)
	}
	if _, err := o.Renew(ctx, other.Term, ttl); !errors.Is(err, store.ErrNotHeld) {
		t.Fatalf("Renew of the replaced term: %v, want ErrNotHeld", err)
	}
}

// TestPlaceGrantProvesSession: a place's term lives ttl from its session's
// last proof of life at the leader. When that proof is more than a quarter
// of ttl old, the grant sends a sync first, and the term has most of ttl
// left; TestPlaceBecomesTerm, whose proof is fresh, is the control (no
// sync).
func TestPlaceGrantProvesSession(t *testing.T) {
	oc := newOpCounter(t, shared(t).Addr())
	root := uniqueRoot("place-proof")
	w := openStore(t, root, oc.addr())
	ctx := testCtx(t, 30*time.Second)
	ttl := 15 * time.Second
	if _, err := w.Enqueue(ctx, "job", "waiter", ttl); err != nil {
		t.Fatal(err)
	}
	ageProofs(w, ttl)
	oc.take()
	got, err := w.Acquire(ctx, "job", "waiter", ttl, "")
	if err != nil {
		t.Fatal(err)
	}
	if reqs := oc.take(); reqs != "sync 1, getChildren2 1" {
		t.Fatalf("the grant of a lowest place with an old proof: requests %q, want its listing and a sync", reqs)
	}
	if got.Remaining < ttl*9/10 {
		t.Fatalf("the grant after the sync has %v left, want most of %v", got.Remaining, ttl)
	}
}

// TestPlacesRankWithForeignLocks: leasehold's fair waiters and zk.Lock users
// wait in one queue, in the order they came. A zk.Lock queued behind a
// leasehold place waits for that place's term to end; a leasehold place
// behind the zk.Lock is refused, naming it, until it unlocks; then the place
// takes the lease.
func TestPlacesRankWithForeignLocks(t *testing.T) {
	root := uniqueRoot("place-zklock")
	a, b, d := openStore(t, root), openStore(t, root), openStore(t, root)
	conn := rawConn(t)
	ctx := testCtx(t, 60*time.Second)
	ttl := 15 * time.Second
	p := a.Path("job")
	first, err := a.Acquire(ctx, "job", "holder", ttl, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Enqueue(ctx, "job", "w1", ttl); err != nil {
		t.Fatal(err)
	}
	zl := zk.NewLock(conn, p, zk.WorldACL(zk.PermAll))
	locked := make(chan error, 1)
	go func() { locked <- zl.Lock() }()
	waitFor(t, 10*time.Second, "zk.Lock queued", func() bool { return len(contenderNames(t, conn, p)) == 3 })
	if n, err := d.Enqueue(ctx, "job", "w2", ttl); err != nil || n != 2 {
		t.Fatalf("a place behind a place and a zk.Lock: %d ahead, %v; want 2", n, err)
	}
	if err := a.Release(ctx, first.Term); err != nil {
		t.Fatal(err)
	}
	w1, err := b.Acquire(ctx, "job", "w1", ttl, "")
	if err != nil {
		t.Fatalf("the first place once the holder released: %v (a zk.Lock queued after it must not take the lease)", err)
	}
	select {
	case err := <-locked:
		t.Fatalf("zk.Lock returned (%v) while the place before it holds", err)
	default:
	}
	if rec, err := d.Acquire(ctx, "job", "w2", ttl, ""); !errors.Is(err, store.ErrHeld) || rec.Holder != "w1" {
		t.Fatalf("the last place while w1 holds: %+v, %v; want ErrHeld by w1", rec, err)
	}
	if err := b.Release(ctx, w1.Term); err != nil {
		t.Fatal(err)
	}
	if err := <-locked; err != nil {
		t.Fatalf("zk.Lock: %v", err)
	}
	rec, err := d.Acquire(ctx, "job", "w2", ttl, "")
	if !errors.Is(err, store.ErrHeld) || !strings.HasPrefix(rec.Holder, "zookeeper:") {
		t.Fatalf("the last place while the zk.Lock holds: %+v, %v; want ErrHeld by the zk.Lock", rec, err)
	}
	if err := zl.Unlock(); err != nil {
		t.Fatal(err)
	}
	w2, err := d.Acquire(ctx, "job", "w2", ttl, "")
	if err != nil {
		t.Fatalf("the last place once the zk.Lock unlocked: %v", err)
	}
	if w2.Token <= w1.Token || path.Base(w2.Holder) != "w2" {
		t.Fatalf("w2's grant %+v; want a token above w1's %d", w2, w1.Token)
	}
}

// TestTransferBehindPlace: a fair waiter's place behind a term queues as a
// zk.Lock does: a successor's new node would rank behind it, so Transfer
// makes no reservation, releases the term and says so, and the place's
// Acquire then takes the lease. (TestTransferQueuedZkLock's control, a
// Transfer with nobody queued, reserves.)
func TestTransferBehindPlace(t *testing.T) {
	root := uniqueRoot("xfer-place")
	st, w := openStore(t, root), openStore(t, root)
	ctx := testCtx(t, 30*time.Second)
	ttl := 10 * time.Second
	a, err := st.Acquire(ctx, "job", "node-a", ttl, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Enqueue(ctx, "job", "waiter", ttl); err != nil {
		t.Fatal(err)
	}
	_, err = st.Transfer(ctx, a.Term, "node-b", ttl, "")
	if err == nil || !strings.Contains(err.Error(), "released instead") {
		t.Fatalf("Transfer with a place queued: %v, want an error saying the term was released instead", err)
	}
	got, err := w.Acquire(ctx, "job", "waiter", ttl, "")
	if err != nil {
		t.Fatalf("the place's Acquire after the Transfer released: %v", err)
	}
	if got.Token <= a.Token {
		t.Fatalf("the place's token %d, want above %d", got.Token, a.Token)
	}
}

// grantAfterRelease releases term through h, waits until w's place is
// found the lowest by the deletion, and asks w for the lease as "waiter"
// (15 s, metadata): granted with no request through oc.
func grantAfterRelease(ctx context.Context, t *testing.T, h, w *Store, oc *opCounter, lowest <-chan string, term store.Term, metadata string) store.Record {
	t.Helper()
	if err := h.Release(ctx, term); err != nil {
		t.Fatal(err)
	}
	waitSignal(ctx, t, lowest, "the place found the lowest")
	oc.take()
	got, err := w.Acquire(ctx, term.Name, "waiter", 15*time.Second, metadata)
	if err != nil {
		t.Fatalf("the place's Acquire once nothing is below: %v", err)
	}
	if reqs := oc.take(); reqs != "" {
		t.Fatalf("the place's grant: requests %q, want none (the deletion was seen)", reqs)
	}
	return got
}

// termNode returns the contender node of st's lease whose czxid is term's
// token.
func termNode(t *testing.T, c *zk.Conn, st *Store, term store.Term) string {
	t.Helper()
	for _, n := range contenderNames(t, c, st.Path(term.Name)) {
		if _, stat, err := c.Get(st.Path(term.Name) + "/" + n); err == nil && stat.Czxid == term.Token {
			return n
		}
	}
	t.Fatalf("no node of %v in %s", term, st.Path(term.Name))
	return ""
}

// drainWake empties a watch channel of wake-ups already sent.
func drainWake(ch <-chan struct{}) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

func waitWake(ctx context.Context, t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case _, ok := <-ch:
		if !ok {
			t.Fatalf("%s: the watch ended", what)
		}
	case <-ctx.Done():
		t.Fatalf("%s: no wake-up within the test's time", what)
	}
}
