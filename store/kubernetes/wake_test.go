package kubernetes_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/leasehold/leasehold/store"
	k8sstore "github.com/leasehold/leasehold/store/kubernetes"
)

// gatedSpy is a spyTransport whose watch streams can be held: while held,
// what a watch receives is kept from the store until the gate opens.
type gatedSpy struct {
	*spyTransport
	mu   sync.Mutex
	gate chan struct{} // nil: open
}

func (g *gatedSpy) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := g.spyTransport.RoundTrip(r)
	if err == nil && r.URL.Query().Get("watch") == "true" {
		resp.Body = &gatedBody{ReadCloser: resp.Body, g: g}
	}
	return resp, err
}

// hold keeps every watch event received from now on from the store.
func (g *gatedSpy) hold() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.gate == nil {
		g.gate = make(chan struct{})
	}
}

// open hands the held events over.
func (g *gatedSpy) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.gate != nil {
		close(g.gate)
		g.gate = nil
	}
}

type gatedBody struct {
	io.ReadCloser
	g *gatedSpy
}

func (b *gatedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.g.mu.Lock()
	gate := b.g.gate
	b.g.mu.Unlock()
	if gate != nil {
		<-gate
	}
	return n, err
}

// gatedStore opens an admin store on ns whose requests the returned spy
// counts and whose watches it can hold.
func gatedStore(t *testing.T, ns string) (*k8sstore.Store, *gatedSpy) {
	t.Helper()
	cfg := storeConfig(t, apiserver(t).AdminConfig(), ns)
	g := &gatedSpy{spyTransport: &spyTransport{next: cfg.HTTPClient.Transport, n: map[string]int{}}}
	cfg.HTTPClient = &http.Client{Transport: g}
	st, err := k8sstore.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		g.open()
		st.Close()
	})
	return st, g
}

// highWater reads the high-water mark of Lease "job" in ns as the admin.
func highWater(t *testing.T, ns string) int64 {
	t.Helper()
	l, err := adminClient(t).CoordinationV1().Leases(ns).Get(ctxT(t), k8sstore.HighWaterName("job"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.ParseInt(l.Annotations[k8sstore.AnnotationHighWater], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// waitRefused acquires "job" on st until the store refuses it (the holder's
// grant has reached it), and returns the refusal's record.
func mustBeRefused(t *testing.T, st *k8sstore.Store, holder string) store.Record {
	t.Helper()
	rec, err := st.Acquire(ctxT(t), "job", holder, 15*time.Second, "")
	if !errors.Is(err, store.ErrHeld) {
		t.Fatalf("Acquire(%s) = %v, %v; want ErrHeld", holder, rec, err)
	}
	return rec
}

// TestWokenWaiterWritesWithoutReading: a waiter that watches reserves its
// token (it raises the high-water mark to the next token, with the version
// it read; the watch starts that, and the first refusal while it watches
// waits for it) and then waits without a request per wake-up; once
// its watch delivered the release it takes the lease with one write, the
// Lease, conditional on the version it saw, and no read. A waiter without a
// watch reads both first and writes both (the control). The grant is the
// same either way: the next token, recorded in the mark first.
func TestWokenWaiterWritesWithoutReading(t *testing.T) {
	ns := namespace(t)
	holderSt := openStore(t, apiserver(t).AdminConfig(), ns)
	st, spy := gatedStore(t, ns)

	first, err := holderSt.Acquire(ctxT(t), "job", "node-a", 15*time.Second, "")
	if err != nil {
		t.Fatal(err)
	}
	mustBeRefused(t, st, "node-b")
	if got := spy.take(); got != "GET 1" {
		t.Errorf("refusal without a watch: %s, want GET 1 (the Lease; no read of the mark)", got)
	}
	wake, err := st.Watch(ctxT(t), "job")
	if err != nil {
		t.Fatal(err)
	}
	mustBeRefused(t, st, "node-b")
	if got := spy.take(); got != "GET 4 PUT 1" {
		t.Errorf("watch, then the first refusal while watching: %s, want GET 4 PUT 1 (the watch's read of the Lease and the watch itself; the reservation the watch starts: the mark read and raised; the refusal's read of the Lease, which waits for the reservation)", got)
	}
	if m := highWater(t, ns); m != first.Token+1 {
		t.Errorf("mark after the reservation: %d, want %d", m, first.Token+1)
	}
	mustBeRefused(t, st, "node-b")
	if got := spy.take(); got != "GET 1" {
		t.Errorf("second refusal while watching: %s, want GET 1 (the token is still reserved)", got)
	}
	rec := grantReservedAfterRelease(t, ns, holderSt, st, spy, wake, first, "woken waiter's grant")

	// Control: a waiter without a watch reads the Lease and the mark.
	other, otherSpy := gatedStore(t, ns)
	mustBeRefused(t, other, "node-c")
	if err := st.Release(ctxT(t), rec.Term); err != nil {
		t.Fatal(err)
	}
	otherSpy.take()
	rec2, err := other.Acquire(ctxT(t), "job", "node-c", 15*time.Second, "")
	if err != nil {
		t.Fatal(err)
	}
	if got := otherSpy.take(); got != "GET 2 PUT 2" {
		t.Errorf("grant without a watch: %s, want GET 2 PUT 2", got)
	}
	if rec2.Token != rec.Token+1 || highWater(t, ns) != rec2.Token {
		t.Errorf("token %d, mark %d; want %d for both", rec2.Token, highWater(t, ns), rec.Token+1)
	}
}

// TestWatchReservesToken: a Watch on a Lease that another term holds, set
// up after an Acquire through the store was refused (as the core
// subscribes), reserves the token the waiter's grant will take, with no
// second refused Acquire after it: a waiter released to right after it
// started then takes the lease with one write. Without it (by hand: the
// reservation in Watch removed) the grant reads and raises the mark first,
// GET 1 PUT 2, as in session 29's Kubernetes runs, where a release within
// the first 10-25 ms of a fair waiter's start cost it those two requests.
// A waiter queued behind others, which subscribes without a refused
// Acquire, reserves too. A Watch that only observes, on a held Lease with no
// refusal or place before it (the status page) or on a missing one, writes
// nothing.
func TestWatchReservesToken(t *testing.T) {
	ns := namespace(t)
	holderSt := openStore(t, apiserver(t).AdminConfig(), ns)
	st, spy := gatedStore(t, ns)
	observer, observerSpy := gatedStore(t, ns)

	if _, err := st.Watch(ctxT(t), "free-job"); err != nil {
		t.Fatal(err)
	}
	if !k8sstore.AwaitReservation(ctxT(t), st, "free-job") {
		t.Fatal("the reservation did not end")
	}
	if got := spy.take(); got != "GET 2" {
		t.Errorf("watch on a missing Lease: %s, want GET 2 (the Lease, the watch; no reservation)", got)
	}

	first, err := holderSt.Acquire(ctxT(t), "job", "node-a", 15*time.Second, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := observer.Watch(ctxT(t), "job"); err != nil {
		t.Fatal(err)
	}
	if !k8sstore.AwaitReservation(ctxT(t), observer, "job") {
		t.Fatal("the reservation did not end")
	}
	if got, m := observerSpy.take(), highWater(t, ns); got != "GET 2" || m != first.Token {
		t.Errorf("watch on a held Lease with no refusal before it: %s, mark %d; want GET 2 (the Lease, the watch), mark %d (no reservation)", got, m, first.Token)
	}

	mustBeRefused(t, st, "node-b")
	if got := spy.take(); got != "GET 1" {
		t.Errorf("refusal without a watch: %s, want GET 1", got)
	}
	wake, err := st.Watch(ctxT(t), "job")
	if err != nil {
		t.Fatal(err)
	}
	if !k8sstore.AwaitReservation(ctxT(t), st, "job") {
		t.Fatal("the reservation did not end")
	}
	if got, m := spy.take(), highWater(t, ns); got != "GET 3 PUT 1" || m != first.Token+1 {
		t.Errorf("watch on a held Lease after a refusal: %s, mark %d; want GET 3 PUT 1 (the Lease, the watch, the mark read and raised), mark %d", got, m, first.Token+1)
	}
	rec := grantReservedAfterRelease(t, ns, holderSt, st, spy, wake, first, "grant after a watch alone")

	// A fair waiter queued behind others subscribes without a refused
	// Acquire: its place marks its store as waiting, and its watch reserves.
	queued, queuedSpy := gatedStore(t, ns)
	mustEnqueue(t, queued, "node-q", time.Minute, 0)
	queuedSpy.take()
	if _, err := queued.Watch(ctxT(t), "job"); err != nil {
		t.Fatal(err)
	}
	if !k8sstore.AwaitReservation(ctxT(t), queued, "job") {
		t.Fatal("the reservation did not end")
	}
	if got, m := queuedSpy.take(), highWater(t, ns); got != "GET 4 PUT 1" || m != rec.Token+1 {
		t.Errorf("watch on a held Lease with a place queued: %s, mark %d; want GET 4 PUT 1 (the Lease, its watch and the queue's, the mark read and raised), mark %d", got, m, rec.Token+1)
	}
}

// grantReservedAfterRelease releases held through holderSt, waits for st's
// watch to wake, and has st's node-b take the lease: one write (PUT 1, the
// Lease, no read) with the token reserved above held's, which the mark
// holds.
func grantReservedAfterRelease(t *testing.T, ns string, holderSt, st *k8sstore.Store, spy *gatedSpy, wake <-chan struct{}, held store.Record, what string) store.Record {
	t.Helper()
	if err := holderSt.Release(ctxT(t), held.Term); err != nil {
		t.Fatal(err)
	}
	if _, ok := within(wake, 30*time.Second); !ok {
		t.Fatal("the watch did not wake on the release")
	}
	spy.take()
	rec, err := st.Acquire(ctxT(t), "job", "node-b", 15*time.Second, "")
	if err != nil {
		t.Fatal(err)
	}
	if got := spy.take(); got != "PUT 1" {
		t.Errorf("%s: %s, want PUT 1 (the Lease, with the reserved token, no read)", what, got)
	}
	if rec.Token != held.Token+1 || highWater(t, ns) != rec.Token {
		t.Errorf("%s: token %d, mark %d; want %d for both", what, rec.Token, highWater(t, ns), held.Token+1)
	}
	return rec
}

// TestWokenWaiterOutOfDate: a waiter whose watch delivered the release but
// not the grant that followed it (held here by its transport) tries from
// the version it saw; the server refuses that write, and the waiter reads
// the Lease and answers ErrHeld with the live term: one term, the Lease
// untouched by the refused waiter, which reserves the token after the live
// term's for its next turn. The control runs the same steps
// with nobody taking the lease in between: the waiter then takes it from the
// version it saw, so the held watch did leave it only the release to go by.
func TestWokenWaiterOutOfDate(t *testing.T) {
	for _, taken := range []bool{true, false} {
		t.Run("taken="+strconv.FormatBool(taken), func(t *testing.T) {
			ns := namespace(t)
			holderSt := openStore(t, apiserver(t).AdminConfig(), ns)
			thirdSt := openStore(t, apiserver(t).AdminConfig(), ns)
			st, spy := gatedStore(t, ns)

			first, err := holderSt.Acquire(ctxT(t), "job", "node-a", 15*time.Second, "")
			if err != nil {
				t.Fatal(err)
			}
			wake, err := st.Watch(ctxT(t), "job")
			if err != nil {
				t.Fatal(err)
			}
			mustBeRefused(t, st, "node-b")
			if err := holderSt.Release(ctxT(t), first.Term); err != nil {
				t.Fatal(err)
			}
			if _, ok := within(wake, 30*time.Second); !ok {
				t.Fatal("the watch did not wake on the release")
			}
			spy.hold()
			var third store.Record
			if taken {
				if third, err = thirdSt.Acquire(ctxT(t), "job", "node-c", 15*time.Second, ""); err != nil {
					t.Fatal(err)
				}
			}
			mark := highWater(t, ns)
			spy.take()
			rec, err := st.Acquire(ctxT(t), "job", "node-b", 15*time.Second, "")
			got := spy.take()
			if !taken {
				if err != nil || rec.Token != first.Token+1 || got != "PUT 1" {
					t.Fatalf("nobody took it: Acquire = %v, %v with %s; want token %d (reserved) with PUT 1", rec, err, got, first.Token+1)
				}
				return
			}
			if !errors.Is(err, store.ErrHeld) || rec.Holder != "node-c" || rec.Token != third.Token {
				t.Fatalf("Acquire from an out-of-date version = %v, %v; want ErrHeld with node-c's term %d", rec, err, third.Token)
			}
			// It tried the Lease with its reserved token from the version it
			// had (refused: 409), read the Lease, found node-c's term above
			// its reservation, and reserved again: read the mark (node-c
			// had raised it) and raised it to the token after node-c's.
			if got != "GET 2 PUT 2 409 1" {
				t.Errorf("requests: %s, want GET 2 PUT 2 409 1", got)
			}
			if m := highWater(t, ns); m != third.Token+1 || mark != third.Token {
				t.Errorf("mark %d before the refused waiter, %d after; want %d, then %d (its new reservation)", mark, m, third.Token, third.Token+1)
			}
			l, err := adminClient(t).CoordinationV1().Leases(ns).Get(ctxT(t), "job", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if *l.Spec.HolderIdentity != "node-c" || int64(*l.Spec.LeaseTransitions) != third.Token {
				t.Errorf("Lease holder %s token %d; want node-c %d", *l.Spec.HolderIdentity, *l.Spec.LeaseTransitions, third.Token)
			}
		})
	}
}

// TestReservedTokenGrantedOnlyIfNothingIntervened: a token a waiter
// reserved is granted only from a version its watch delivered, while that
// watch has run without a gap since the reservation and no version has shown
// the token or more. Each case reserves (node-b refused while node-a holds),
// then lets something happen before the release reaches the waiter:
//   - nothing (the control): the reserved token is granted with one write;
//   - another store takes and releases the lease in between: its grant is
//     above the reservation, and the waiter's grant is above both;
//   - the waiter's watch ends and a new one starts: the reservation is
//     dropped (the store cannot tell what it missed); the new watch, on a
//     Lease still held, reserves the token above it, and the grant takes
//     that one;
//   - the Lease is granted, deleted, and made again by another tool with
//     leaseTransitions 0: the grant is still above every token granted.
//
// In every case the token is above every token granted before, and the mark
// holds it.
func TestReservedTokenGrantedOnlyIfNothingIntervened(t *testing.T) {
	for _, c := range []string{"nothing", "another grant", "watch restarted", "deleted and made again"} {
		t.Run(c, func(t *testing.T) {
			ns := namespace(t)
			holderSt := openStore(t, apiserver(t).AdminConfig(), ns)
			otherSt := openStore(t, apiserver(t).AdminConfig(), ns)
			st, spy := gatedStore(t, ns)
			leases := adminClient(t).CoordinationV1().Leases(ns)

			first, err := holderSt.Acquire(ctxT(t), "job", "node-a", 15*time.Second, "")
			if err != nil {
				t.Fatal(err)
			}
			wctx, stopWatch := context.WithCancel(ctxT(t))
			defer stopWatch()
			wake, err := st.Watch(wctx, "job")
			if err != nil {
				t.Fatal(err)
			}
			mustBeRefused(t, st, "node-b")
			reserved := highWater(t, ns)
			if reserved != first.Token+1 {
				t.Fatalf("reservation: mark %d, want %d", reserved, first.Token+1)
			}
			highest := first.Token // the highest token granted so far

			if c == "watch restarted" {
				stopWatch()
				if !closedWithin(wake, 30*time.Second) {
					t.Fatal("the watch did not end")
				}
				if wake, err = st.Watch(ctxT(t), "job"); err != nil {
					t.Fatal(err)
				}
				// Its reservation's requests are not the grant's.
				if !k8sstore.AwaitReservation(ctxT(t), st, "job") {
					t.Fatal("the new watch's reservation did not end")
				}
			}
			spy.hold() // the waiter sees nothing of what follows until open
			if err := holderSt.Release(ctxT(t), first.Term); err != nil {
				t.Fatal(err)
			}
			switch c {
			case "another grant", "deleted and made again":
				rec, err := otherSt.Acquire(ctxT(t), "job", "node-c", 15*time.Second, "")
				if err != nil {
					t.Fatal(err)
				}
				if rec.Token <= reserved {
					t.Fatalf("node-c's token %d is not above the reservation %d", rec.Token, reserved)
				}
				highest = rec.Token
				if err := otherSt.Release(ctxT(t), rec.Term); err != nil {
					t.Fatal(err)
				}
			}
			if c == "deleted and made again" {
				if err := leases.Delete(ctxT(t), "job", metav1.DeleteOptions{}); err != nil {
					t.Fatal(err)
				}
				zero := int32(0)
				l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "job"}, Spec: coordinationv1.LeaseSpec{LeaseTransitions: &zero}}
				if _, err := leases.Create(ctxT(t), l, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			cur, err := leases.Get(ctxT(t), "job", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			spy.open()
			// Wait until the watch has delivered the Lease as it is now:
			// every version in between changed its holder or token, so
			// each one wakes the channel.
			for k8sstore.Delivered(st, "job") != cur.ResourceVersion {
				if _, ok := within(wake, 30*time.Second); !ok {
					t.Fatalf("the watch did not deliver version %s (last delivered: %q)", cur.ResourceVersion, k8sstore.Delivered(st, "job"))
				}
			}
			spy.take()
			rec, err := st.Acquire(ctxT(t), "job", "node-b", 15*time.Second, "")
			if err != nil {
				t.Fatal(err)
			}
			got := spy.take()
			if rec.Token <= highest || highWater(t, ns) != rec.Token {
				t.Fatalf("grant: token %d, mark %d; want a token above %d that the mark holds", rec.Token, highWater(t, ns), highest)
			}
			if c == "nothing" {
				if got != "PUT 1" || rec.Token != reserved {
					t.Errorf("nothing intervened: token %d with %s; want the reserved %d with PUT 1 (the Lease alone)", rec.Token, got, reserved)
				}
				return
			}
			if c == "watch restarted" {
				// The new watch, started while node-a still held the
				// lease, reserved a token of its own (see Watch): the
				// grant takes that one, above the reservation the gap
				// dropped, with one write.
				if got != "PUT 1" || rec.Token != reserved+1 {
					t.Errorf("watch restarted: token %d with %s; want %d (the new watch's reservation, not the dropped %d) with PUT 1", rec.Token, got, reserved+1, reserved)
				}
				return
			}
			// The mark is raised again before the Lease is written; it is
			// read first where another store raised it meanwhile.
			if want := "GET 1 PUT 2"; got != want {
				t.Errorf("requests: %s; want %s", got, want)
			}
		})
	}
}
