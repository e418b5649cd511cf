package zookeeper

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/leasehold/leasehold/internal/faultproxy"
	"github.com/leasehold/leasehold/store"
)

// opCounter is a TCP proxy in front of a server (internal/faultproxy) that
// counts the requests clients send through it, by ZooKeeper opcode. A
// ZooKeeper request is a frame (a 4-byte big-endian length, then the body)
// whose body begins with the request header: xid and opcode, 32 bits each;
// the first frame of a connection is the connect request, which has no
// header.
type opCounter struct {
	p  *faultproxy.Proxy
	mu sync.Mutex
	n  map[int]map[int32]int // by connection, then opcode
}

func newOpCounter(t *testing.T, target string) *opCounter {
	t.Helper()
	p, err := faultproxy.New(target)
	if err != nil {
		t.Fatal(err)
	}
	c := &opCounter{p: p, n: map[int]map[int32]int{}}
	p.FilterClient(c.count)
	t.Cleanup(c.close)
	return c
}

func (c *opCounter) addr() string { return c.p.Addr() }

func (c *opCounter) close() { c.p.Close() }

// count passes connection id's requests on, counting them.
func (c *opCounter) count(id int, dst io.Writer, src io.Reader) error {
	var head [4]byte
	for first := true; ; first = false {
		if _, err := io.ReadFull(src, head[:]); err != nil {
			return err
		}
		body := make([]byte, binary.BigEndian.Uint32(head[:]))
		if _, err := io.ReadFull(src, body); err != nil {
			return err
		}
		if !first && len(body) >= 8 {
			op := int32(binary.BigEndian.Uint32(body[4:8]))
			c.mu.Lock()
			if c.n[id] == nil {
				c.n[id] = map[int32]int{}
			}
			c.n[id][op]++
			c.mu.Unlock()
		}
		if _, err := dst.Write(append(head[:], body...)); err != nil {
			return err
		}
	}
}

// opNames names the opcodes the store sends.
var opNames = map[int32]string{1: "create", 2: "delete", 3: "exists", 4: "getData", 5: "setData",
	8: "getChildren", 9: "sync", 11: "ping", 12: "getChildren2", 14: "multi", 15: "create2",
	100: "auth", 101: "setWatches", -11: "closeSession"}

// take returns the requests counted since the last take, by name, leaving
// out pings and exists (the client's pings, and the store's touches of its
// term sessions, which come on a timer), as "name n, ...".
func (c *opCounter) take() string {
	sum := map[int32]int{}
	for _, m := range c.takeByConn() {
		for op, n := range m {
			sum[op] += n
		}
	}
	return describeOps(sum)
}

// takeByConn returns the requests counted since the last take, by
// connection.
func (c *opCounter) takeByConn() []map[int32]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []map[int32]int
	for _, id := range slices.Sorted(maps.Keys(c.n)) {
		out = append(out, c.n[id])
	}
	c.n = map[int]map[int32]int{}
	return out
}

func describeOps(m map[int32]int) string {
	var parts []string
	for _, op := range slices.Sorted(maps.Keys(m)) {
		name := opNames[op]
		if name == "" {
			name = fmt.Sprintf("op%d", op)
		}
		if name == "ping" || name == "exists" {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %d", name, m[op]))
	}
	return strings.Join(parts, ", ")
}

// TestRequestsPerCycle counts the requests of an uncontended acquire and
// release: a first acquire lists the children and creates the node (its
// transaction shows it is the only child, so there is no second listing);
// after this handle's own release, or after its watch saw the holder's node
// deleted, an acquire is the create alone; a release is one delete. The
// control: an acquire of a held lease lists and reads the holder, and
// creates nothing.
func TestRequestsPerCycle(t *testing.T) {
	oc := newOpCounter(t, shared(t).Addr())
	st := openStore(t, uniqueRoot("requests"), oc.addr())
	ctx := testCtx(t, 30*time.Second)
	ttl := 15 * time.Second
	// Open the term session first: its connect and the probe are not the
	// cycle's.
	r, err := st.Acquire(ctx, "warm", "w", ttl, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Release(ctx, r.Term); err != nil {
		t.Fatal(err)
	}
	oc.take()

	check := func(what, want string) {
		t.Helper()
		if got := oc.take(); got != want {
			t.Fatalf("%s: requests %q, want %q", what, got, want)
		}
	}
	r, err = st.Acquire(ctx, "job", "a", ttl, "")
	if err != nil {
		t.Fatal(err)
	}
	// The path node does not exist yet: the create fails, the path is made,
	// and the create is sent again.
	oc.take()
	if err := st.Release(ctx, r.Term); err != nil {
		t.Fatal(err)
	}
	check("release", "delete 1")
	var last int64 = r.Token
	for i := range 3 {
		r, err = st.Acquire(ctx, "job", fmt.Sprintf("b%d", i), ttl, "")
		if err != nil {
			t.Fatal(err)
		}
		check("acquire after this handle's release", "multi 1")
		if r.Token <= last {
			t.Fatalf("token %d, want above %d", r.Token, last)
		}
		last = r.Token
		if err := st.Release(ctx, r.Term); err != nil {
			t.Fatal(err)
		}
		check("release", "delete 1")
	}
	// With no note of a release (another handle released): list, create.
	r, err = st.Acquire(ctx, "job2", "c", ttl, "")
	if err != nil {
		t.Fatal(err)
	}
	oc.take()
	st.takeFree("job2")
	if err := st.Release(ctx, r.Term); err != nil {
		t.Fatal(err)
	}
	st.takeFree("job2") // as if another handle had released
	oc.take()
	r, err = st.Acquire(ctx, "job2", "d", ttl, "")
	if err != nil {
		t.Fatal(err)
	}
	check("acquire of a free lease, no note", "getChildren2 1, multi 1")

	// Control: a held lease is looked at, and nothing is created.
	if _, err := st.Acquire(ctx, "job2", "e", ttl, ""); !errors.Is(err, store.ErrHeld) {
		t.Fatalf("acquire of a held lease: %v, want ErrHeld", err)
	}
	check("acquire of a held lease", "getData 1, getChildren2 1")
}

// TestSpeculativeCreate: an acquire that creates its node without looking
// first (this handle's note says the lease is free) and finds a contender
// below it deletes its node again and answers as a look would have:
// ErrHeld with the holder's record, nothing left behind; a node of its own
// holder below it (an earlier term) is replaced, as after a look, with no
// second node of the holder left; a child of the path that is not a
// contender (a nested lease's path) makes the store list, and does not
// keep a grant. Controls: the same acquires without the note.
func TestSpeculativeCreate(t *testing.T) {
	root := uniqueRoot("speculate")
	a, b := openStore(t, root), openStore(t, root)
	c := rawConn(t)
	ctx := testCtx(t, 30*time.Second)
	ttl := 15 * time.Second
	kids := func(name string) []string {
		t.Helper()
		k, _, err := c.Children(a.Path(name))
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	for _, note := range []bool{false, true} {
		name := fmt.Sprintf("held-%v", note)
		held, err := b.Acquire(ctx, name, "holder-b", ttl, "m")
		if err != nil {
			t.Fatal(err)
		}
		if note {
			a.markFree(name)
		}
		rec, err := a.Acquire(ctx, name, "holder-a", ttl, "")
		if !errors.Is(err, store.ErrHeld) || rec.Term != held.Term || rec.Metadata != "m" {
			t.Fatalf("note %v: acquire of a held lease = %+v, %v; want ErrHeld with %+v", note, rec, err, held.Term)
		}
		if k := kids(name); len(k) != 1 || !isHolders(k[0], "holder-b") {
			t.Fatalf("note %v: children after a refused acquire %v, want the holder's node alone", note, k)
		}

		name = fmt.Sprintf("same-%v", note)
		first, err := a.Acquire(ctx, name, "holder-a", ttl, "")
		if err != nil {
			t.Fatal(err)
		}
		if note {
			a.markFree(name)
		}
		second, err := a.Acquire(ctx, name, "holder-a", ttl, "")
		if err != nil {
			t.Fatal(err)
		}
		if second.Token <= first.Token {
			t.Fatalf("note %v: re-acquire token %d, want above %d", note, second.Token, first.Token)
		}
		if _, err := a.Renew(ctx, first.Term, ttl); !errors.Is(err, store.ErrNotHeld) {
			t.Fatalf("note %v: renew of the replaced term: %v, want ErrNotHeld", note, err)
		}
		if k := kids(name); len(k) != 1 {
			t.Fatalf("note %v: children after a re-acquire %v, want one node", note, k)
		}
		if got, err := b.Get(ctx, name); err != nil || got.Term != second.Term {
			t.Fatalf("note %v: Get = %+v, %v; want %+v", note, got, err, second.Term)
		}

		name = fmt.Sprintf("nested-%v", note)
		if _, err := b.Acquire(ctx, name+"/x", "holder-b", ttl, ""); err != nil {
			t.Fatal(err)
		}
		if note {
			a.markFree(name)
		}
		r, err := a.Acquire(ctx, name, "holder-a", ttl, "")
		if err != nil {
			t.Fatalf("note %v: acquire beside a nested lease: %v", note, err)
		}
		if got, err := b.Get(ctx, name); err != nil || got.Term != r.Term {
			t.Fatalf("note %v: Get = %+v, %v; want %+v", note, got, err, r.Term)
		}
		if note {
			b.markFree(name)
		}
		if _, err := b.Acquire(ctx, name, "holder-c", ttl, ""); !errors.Is(err, store.ErrHeld) {
			t.Fatalf("note %v: a rival's acquire beside a nested lease: %v, want ErrHeld", note, err)
		}
	}
}

// TestDequeueKnownPlace: a Dequeue through the handle whose Enqueue found
// the waiter's place deletes it with one request; through another handle
// it lists the queue first. A place this handle knew that is gone (another
// handle dequeued it, and the waiter queued again there) makes it list, and
// the waiter's new place goes: the control of the one-request path.
func TestDequeueKnownPlace(t *testing.T) {
	oc := newOpCounter(t, shared(t).Addr())
	root := uniqueRoot("dequeue")
	a := openStore(t, root, oc.addr())
	b := openStore(t, root)
	c := rawConn(t)
	ctx := testCtx(t, 30*time.Second)
	ttl := 15 * time.Second
	places := func() []string {
		t.Helper()
		k, _, err := c.Children(a.Path("job"))
		if err != nil {
			t.Fatal(err)
		}
		return slices.DeleteFunc(k, func(n string) bool { return !isPlace(n) })
	}
	if _, err := a.Enqueue(ctx, "job", "w1", ttl); err != nil {
		t.Fatal(err)
	}
	oc.take()
	if err := a.Dequeue(ctx, "job", "w1"); err != nil {
		t.Fatal(err)
	}
	if got := oc.take(); got != "delete 1" {
		t.Fatalf("dequeue of a known place: requests %q, want %q", got, "delete 1")
	}
	if k := places(); len(k) != 0 {
		t.Fatalf("places after dequeue: %v, want none", k)
	}

	// Known to a, dequeued through b and queued again there.
	if _, err := a.Enqueue(ctx, "job", "w2", ttl); err != nil {
		t.Fatal(err)
	}
	if err := b.Dequeue(ctx, "job", "w2"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Enqueue(ctx, "job", "w2", ttl); err != nil {
		t.Fatal(err)
	}
	if k := places(); len(k) != 1 {
		t.Fatalf("places after queueing again: %v, want one", k)
	}
	oc.take()
	if err := a.Dequeue(ctx, "job", "w2"); err != nil {
		t.Fatal(err)
	}
	if got, want := oc.take(), "delete 2, getChildren2 1"; got != want {
		t.Fatalf("dequeue of a known place that went: requests %q, want %q", got, want)
	}
	if k := places(); len(k) != 0 {
		t.Fatalf("places after dequeue: %v, want none (the new place too)", k)
	}
}

// TestHandoffRequests: a waiter whose watch saw the holder's node deleted
// takes the lease with one request on its term session, the create; the
// old path was a listing, the create and a second listing. The control: a
// waiter of another handle (its watch saw nothing) lists first.
func TestHandoffRequests(t *testing.T) {
	oc := newOpCounter(t, shared(t).Addr())
	root := uniqueRoot("handoff-requests")
	holder := openStore(t, root)
	waiter := openStore(t, root, oc.addr())
	ctx := testCtx(t, 30*time.Second)
	ttl := 15 * time.Second
	// The waiter's term session, opened ahead.
	if r, err := waiter.Acquire(ctx, "warm", "w", ttl, ""); err != nil {
		t.Fatal(err)
	} else if err := waiter.Release(ctx, r.Term); err != nil {
		t.Fatal(err)
	}
	for _, watched := range []bool{true, false} {
		name := fmt.Sprintf("job-%v", watched)
		h, err := holder.Acquire(ctx, name, "holder", ttl, "")
		if err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithCancel(ctx)
		var ch <-chan struct{}
		if watched {
			if ch, err = waiter.Watch(wctx, name); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := waiter.Acquire(ctx, name, "waiter", ttl, ""); !errors.Is(err, store.ErrHeld) {
			t.Fatalf("acquire of a held lease: %v, want ErrHeld", err)
		}
		if ch != nil {
			for len(ch) > 0 {
				<-ch
			}
		}
		if err := holder.Release(ctx, h.Term); err != nil {
			t.Fatal(err)
		}
		if ch != nil {
			select {
			case <-ch:
			case <-ctx.Done():
				t.Fatal("no wake-up after the release")
			}
		}
		oc.takeByConn()
		if _, err := waiter.Acquire(ctx, name, "waiter", ttl, ""); err != nil {
			t.Fatalf("acquire after the release: %v", err)
		}
		cancel()
		// The acquire's requests are on the term session: the connection
		// that sent the create.
		var got string
		for _, m := range oc.takeByConn() {
			if m[14] > 0 {
				got = describeOps(m)
			}
		}
		want := "multi 1"
		if !watched {
			want = "getChildren2 1, multi 1"
		}
		if got != want {
			t.Fatalf("watched %v: the acquire after the release sent %q on its session, want %q", watched, got, want)
		}
	}
}

// TestNoNoteBehindHolder: a watch whose node is a contender behind the
// holder (here a zk.Lock-style node that gives up) wakes the waiters when
// that node goes, but notes nothing: the lease is still held, and the
// waiter's next acquire looks first and creates nothing.
func TestNoNoteBehindHolder(t *testing.T) {
	oc := newOpCounter(t, shared(t).Addr())
	root := uniqueRoot("no-note")
	holder := openStore(t, root)
	waiter := openStore(t, root, oc.addr())
	c := rawConn(t)
	ctx := testCtx(t, 30*time.Second)
	ttl := 15 * time.Second
	if _, err := holder.Acquire(ctx, "job", "holder", ttl, ""); err != nil {
		t.Fatal(err)
	}
	foreign, err := c.Create(waiter.Path("job")+"/lock-", nil, zk.FlagEphemeralSequential, zk.WorldACL(zk.PermAll))
	if err != nil {
		t.Fatal(err)
	}
	ch, err := waiter.Watch(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	for len(ch) > 0 {
		<-ch
	}
	if err := c.Delete(foreign, -1); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
	case <-ctx.Done():
		t.Fatal("no wake-up after the node behind the holder went")
	}
	oc.take()
	if _, err := waiter.Acquire(ctx, "job", "waiter", ttl, ""); !errors.Is(err, store.ErrHeld) {
		t.Fatalf("acquire: %v, want ErrHeld", err)
	}
	var got string
	for _, m := range oc.takeByConn() {
		if m[12] > 0 && m[4] > 0 {
			got = describeOps(m)
		}
	}
	if want := "getData 1, getChildren2 1"; got != want {
		t.Fatalf("acquire after a node behind the holder went: %q on its session, want %q (no create)", got, want)
	}
}

// TestUnqueuedRequests counts the requests of a fair Lock's uncontended
// cycle (AcquireUnqueued, Release): a place is a node in the lease's path,
// so AcquireUnqueued is Acquire, and a cycle costs the create's transaction
// and the delete. A place written through another handle is a contender
// below any new node: the next AcquireUnqueued is refused with ErrQueued,
// naming the place's holder, and nothing stays written; once the place
// left, the lease is granted again. (The control, a lease free of any
// node, is the first part.)
func TestUnqueuedRequests(t *testing.T) {
	oc := newOpCounter(t, shared(t).Addr())
	root := uniqueRoot("unqueued")
	a := openStore(t, root, oc.addr())
	b := openStore(t, root)
	c := rawConn(t)
	ctx := testCtx(t, 30*time.Second)
	ttl := 15 * time.Second
	cycle := func(holder string) store.Record {
		t.Helper()
		r, err := a.AcquireUnqueued(ctx, "job", holder, ttl, "")
		if err != nil {
			t.Fatalf("AcquireUnqueued for %s: %v", holder, err)
		}
		if err := a.Release(ctx, r.Term); err != nil {
			t.Fatal(err)
		}
		return r
	}
	check := func(what, want string) {
		t.Helper()
		if got := oc.take(); got != want {
			t.Fatalf("%s: requests %q, want %q", what, got, want)
		}
	}
	last := cycle("warm") // the term session and the lease's path
	oc.take()
	for i := range 3 {
		r := cycle(fmt.Sprintf("a%d", i))
		check("a cycle with nobody queued", "delete 1, multi 1")
		if r.Token <= last.Token {
			t.Fatalf("token %d, want above %d", r.Token, last.Token)
		}
		last = r
	}

	if _, err := b.Enqueue(ctx, "job", "waiter", ttl); err != nil {
		t.Fatal(err)
	}
	if r, err := a.AcquireUnqueued(ctx, "job", "rival", ttl, ""); !errors.Is(err, store.ErrQueued) || r.Holder != "waiter" {
		t.Fatalf("AcquireUnqueued with a place queued through another handle: %+v, %v; want ErrQueued with the waiter's place", r, err)
	}
	kids, _, err := c.Children(a.Path("job"))
	if err != nil || len(kids) != 1 || !isPlace(kids[0]) {
		t.Fatalf("after the refusal the lease's children are %v (%v); want the place alone", kids, err)
	}
	if err := b.Dequeue(ctx, "job", "waiter"); err != nil {
		t.Fatal(err)
	}
	oc.take()
	r := cycle("after")
	check("the first cycle once the place left", "delete 1, getChildren2 1, multi 1")
	if r.Token <= last.Token {
		t.Fatalf("token %d, want above %d", r.Token, last.Token)
	}
	cycle("again")
	check("the next cycle", "delete 1, multi 1")
}

// TestEnqueueRequests counts Enqueue's requests, as the README's table
// gives them: a new place is written first, as zk.Lock writes its node;
// alone, that is all; behind other contenders one listing counts them. A
// place of this holder written before (through another handle, or by an
// Enqueue whose answer was lost) is taken over rather than doubled: the
// listing finds it, it is read, and the new place is deleted. A refresh is
// one listing.
func TestEnqueueRequests(t *testing.T) {
	oc := newOpCounter(t, shared(t).Addr())
	root := uniqueRoot("enqueue-requests")
	a := openStore(t, root, oc.addr())
	b := openStore(t, root)
	ctx := testCtx(t, 30*time.Second)
	ttl := 15 * time.Second
	check := func(what, want string, wantAhead, ahead int, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if got := oc.take(); got != want || ahead != wantAhead {
			t.Fatalf("%s: requests %q with %d ahead, want %q with %d ahead", what, got, ahead, want, wantAhead)
		}
	}
	// The term session and the lease's path, made ahead.
	if r, err := a.Acquire(ctx, "job", "warm", ttl, ""); err != nil {
		t.Fatal(err)
	} else if err := a.Release(ctx, r.Term); err != nil {
		t.Fatal(err)
	}
	oc.take()
	ahead, err := a.Enqueue(ctx, "job", "w1", ttl)
	check("a new place, alone", "multi 1", 0, ahead, err)
	ahead, err = a.Enqueue(ctx, "job", "w1", ttl)
	check("its refresh", "getChildren2 1", 0, ahead, err)
	if err := a.Dequeue(ctx, "job", "w1"); err != nil {
		t.Fatal(err)
	}
	h, err := b.Acquire(ctx, "job", "holder", ttl, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Enqueue(ctx, "job", "w0", ttl); err != nil {
		t.Fatal(err)
	}
	oc.take()
	ahead, err = a.Enqueue(ctx, "job", "w2", ttl)
	check("a new place behind the holder and a place", "getChildren2 1, multi 1", 1, ahead, err)
	ahead, err = a.Enqueue(ctx, "job", "w2", ttl)
	check("its refresh", "getChildren2 1", 1, ahead, err)

	// w0's place, written through b, is taken over by a's Enqueue for w0:
	// one place of w0's stays, the one ahead.
	ahead, err = a.Enqueue(ctx, "job", "w0", ttl)
	check("a place of the holder written through another handle", "delete 1, getData 1, getChildren2 1, multi 1", 0, ahead, err)
	kids, _, err := rawConn(t).Children(a.Path("job"))
	if err != nil {
		t.Fatal(err)
	}
	var w0 []string
	for _, c := range contenders(kids) {
		if isPlace(c.name) && isHolders(c.name, "w0") {
			w0 = append(w0, c.name)
		}
	}
	if len(w0) != 1 {
		t.Fatalf("w0's places after a second Enqueue through another handle: %v, want one (%v)", w0, kids)
	}
	if err := b.Release(ctx, h.Term); err != nil {
		t.Fatal(err)
	}
}
