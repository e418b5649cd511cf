package kubernetes_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/leasehold/leasehold/store"
	k8sstore "github.com/leasehold/leasehold/store/kubernetes"
)

// spyTransport counts the store's requests by method and the answers 409
// Conflict, and calls after (if set) once a request has been answered.
type spyTransport struct {
	next  http.RoundTripper
	mu    sync.Mutex
	n     map[string]int
	after func(*http.Request)
}

func (s *spyTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := s.next.RoundTrip(r)
	s.mu.Lock()
	s.n[r.Method]++
	if err == nil && resp.StatusCode == http.StatusConflict {
		s.n["409"]++
	}
	after := s.after
	s.mu.Unlock()
	if after != nil {
		after(r)
	}
	return resp, err
}

// take returns the counts since the last take, as "GET 1 PUT 1" (methods
// in a fixed order, zeros left out).
func (s *spyTransport) take() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := ""
	for _, m := range []string{"GET", "POST", "PUT", "DELETE", "409"} {
		if s.n[m] > 0 {
			out += fmt.Sprintf(" %s %d", m, s.n[m])
		}
	}
	s.n = map[string]int{}
	if out == "" {
		return "none"
	}
	return out[1:]
}

func (s *spyTransport) setAfter(f func(*http.Request)) {
	s.mu.Lock()
	s.after = f
	s.mu.Unlock()
}

// offsetClock is a store's clock (Config.Now) that a test moves forward;
// it keeps time.Now's monotonic reading.
type offsetClock struct{ d atomic.Int64 }

func (c *offsetClock) now() time.Time      { return time.Now().Add(time.Duration(c.d.Load())) }
func (c *offsetClock) add(d time.Duration) { c.d.Add(int64(d)) }

// spiedStore opens an admin store on ns whose requests spy sees, with clock.
func spiedStore(t *testing.T, ns string, clock *offsetClock) (*k8sstore.Store, *spyTransport) {
	t.Helper()
	cfg := storeConfig(t, apiserver(t).AdminConfig(), ns)
	spy := &spyTransport{next: cfg.HTTPClient.Transport, n: map[string]int{}}
	cfg.HTTPClient = &http.Client{Transport: spy}
	if clock != nil {
		cfg.Now = clock.now
	}
	st, err := k8sstore.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st, spy
}

// queuePlaces reads the queue object of lease name in ns as the admin: the
// holders of its places, first first, and whether the object exists.
func queuePlaces(t testing.TB, ns, name string) ([]string, bool) {
	t.Helper()
	obj, _, err := k8sstore.ObjectName(name)
	if err != nil {
		t.Fatal(err)
	}
	l, err := adminClient(t).CoordinationV1().Leases(ns).Get(ctxT(t), k8sstore.QueueName(obj), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, false
	}
	if err != nil {
		t.Fatal(err)
	}
	var q struct{ Places []struct{ Holder string } }
	if err := json.Unmarshal([]byte(l.Annotations[k8sstore.AnnotationQueue]), &q); err != nil {
		t.Fatalf("queue object %s: %v", l.Name, err)
	}
	var holders []string
	for _, p := range q.Places {
		holders = append(holders, p.Holder)
	}
	return holders, true
}

func mustEnqueue(t *testing.T, st *k8sstore.Store, holder string, ttl time.Duration, want int) {
	t.Helper()
	if n, err := st.Enqueue(ctxT(t), "job", holder, ttl); err != nil || n != want {
		t.Fatalf("Enqueue(%s): %d ahead, %v; want %d ahead", holder, n, err, want)
	}
}

func mustDequeue(t *testing.T, st *k8sstore.Store, holder string) {
	t.Helper()
	if err := st.Dequeue(ctxT(t), "job", holder); err != nil {
		t.Fatalf("Dequeue(%s): %v", holder, err)
	}
}

// TestQueueObject: the queue is one Lease object beside the lease, with no
// holder, not listed and not usable as a lease; each Enqueue and Dequeue is
// one read and at most one write, a refresh soon after the last one only a
// read; the last place's Dequeue deletes it.
func TestQueueObject(t *testing.T) {
	ns := namespace(t)
	var clock offsetClock
	st, spy := spiedStore(t, ns, &clock)
	cost := func(op, want string) {
		t.Helper()
		if got := spy.take(); got != want {
			t.Errorf("%s: requests %s, want %s", op, got, want)
		}
	}
	mustEnqueue(t, st, "node-a", time.Minute, 0)
	cost("first Enqueue", "GET 1 POST 1")
	mustEnqueue(t, st, "node-b", time.Minute, 1)
	cost("second Enqueue", "GET 1 PUT 1")
	mustEnqueue(t, st, "node-a", time.Minute, 0)
	cost("refresh at once", "GET 1")
	clock.add(time.Minute / 10)
	mustEnqueue(t, st, "node-a", time.Minute, 0)
	cost("refresh a tenth of the ttl later", "GET 1 PUT 1")
	mustEnqueue(t, st, "node-a", 2*time.Minute, 0)
	cost("refresh with another ttl", "GET 1 PUT 1")

	qn := k8sstore.QueueName("job")
	l, err := adminClient(t).CoordinationV1().Leases(ns).Get(ctxT(t), qn, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if l.Spec.HolderIdentity != nil || l.Annotations[k8sstore.AnnotationQueueOf] != "job" {
		t.Fatalf("queue object %s: holder %v, annotations %v; want no holder, %s=job", qn, l.Spec.HolderIdentity, l.Annotations, k8sstore.AnnotationQueueOf)
	}
	if recs, err := st.List(ctxT(t)); err != nil || len(recs) != 0 {
		t.Fatalf("List = %+v, %v; want no lease", recs, err)
	}
	if _, err := st.Acquire(ctxT(t), qn, "node-c", 2*time.Second, ""); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("Acquire(%q): err = %v, want ErrInvalid", qn, err)
	}
	spy.take()

	mustDequeue(t, st, "node-a")
	cost("Dequeue", "GET 1 PUT 1")
	if places, ok := queuePlaces(t, ns, "job"); !ok || fmt.Sprint(places) != "[node-b]" {
		t.Fatalf("after node-a left: places %v (object exists %v), want [node-b]", places, ok)
	}
	mustDequeue(t, st, "node-b")
	cost("last Dequeue", "GET 1 DELETE 1")
	if places, ok := queuePlaces(t, ns, "job"); ok {
		t.Fatalf("after the last place left the object is still there, with places %v", places)
	}
	mustDequeue(t, st, "node-b")
	cost("Dequeue of a place not there", "GET 1")
}

// TestQueueForeignObject: an object in the queue object's place that
// leasehold did not make for the lease is refused, not taken over.
func TestQueueForeignObject(t *testing.T) {
	ns := namespace(t)
	st := openStore(t, apiserver(t).AdminConfig(), ns)
	putLease(t, ns, k8sstore.QueueName("job"), func(l *coordinationv1.Lease) {
		h := "someone"
		l.Spec.HolderIdentity = &h
	})
	if _, err := st.Enqueue(ctxT(t), "job", "node-a", time.Minute); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("Enqueue: err = %v, want ErrInvalid", err)
	}
	if err := st.Dequeue(ctxT(t), "job", "node-a"); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("Dequeue: err = %v, want ErrInvalid", err)
	}
}

// TestQueueExpiryOnObserversClock: an observer judges a place expired only
// once its own clock has seen the place unrefreshed for its ttl, and its
// removal is conditional on the version it read: a refresh that lands
// between its read and its write keeps the place. The negative control:
// without the refresh, the place is removed.
func TestQueueExpiryOnObserversClock(t *testing.T) {
	ns := namespace(t)
	var clock, waiterClock offsetClock
	waiter, _ := spiedStore(t, ns, &waiterClock)
	observer, spy := spiedStore(t, ns, &clock)
	ttl := 2 * time.Second
	mustEnqueue(t, waiter, "node-b", ttl, 0)
	mustEnqueue(t, observer, "node-a", time.Minute, 1)

	clock.add(ttl / 2)
	mustEnqueue(t, observer, "node-a", time.Minute, 1) // not yet expired by its clock

	// Past the ttl on the observer's clock, which runs fast: by node-b's
	// own, only half of it has passed, and it refreshes its place just after
	// the observer has read the object.
	clock.add(ttl)
	waiterClock.add(ttl / 2)
	qn := k8sstore.QueueName("job")
	var refreshed atomic.Bool
	spy.setAfter(func(r *http.Request) {
		if r.Method == http.MethodGet && r.URL.Path[len(r.URL.Path)-len(qn):] == qn && refreshed.CompareAndSwap(false, true) {
			mustEnqueue(t, waiter, "node-b", ttl, 0)
		}
	})
	spy.take()
	mustEnqueue(t, observer, "node-a", time.Minute, 1)
	spy.setAfter(nil)
	if got := spy.take(); got != "GET 2 PUT 1 409 1" {
		t.Fatalf("the observer's requests: %s; want its removal refused (409), then a second read (its own place needs no refresh yet)", got)
	}
	if places, _ := queuePlaces(t, ns, "job"); fmt.Sprint(places) != "[node-b node-a]" {
		t.Fatalf("places %v, want the refreshed node-b kept first", places)
	}

	// Negative control: no refresh within the ttl on the observer's clock.
	clock.add(ttl)
	mustEnqueue(t, observer, "node-a", time.Minute, 0)
	if places, _ := queuePlaces(t, ns, "job"); fmt.Sprint(places) != "[node-a]" {
		t.Fatalf("places %v, want node-b's expired place removed", places)
	}
	mustEnqueue(t, waiter, "node-b", ttl, 1) // it queues again, at the back
}

// TestQueueAbandoned: a queue whose waiters all died is deleted by the next
// Dequeue (or replaced by the next Enqueue) on the name whose store judges
// every place expired; not before.
func TestQueueAbandoned(t *testing.T) {
	ns := namespace(t)
	for _, h := range []string{"node-b", "node-c"} {
		dead := openStore(t, apiserver(t).AdminConfig(), ns)
		if _, err := dead.Enqueue(ctxT(t), "job", h, time.Second); err != nil {
			t.Fatal(err)
		}
		dead.Close()
	}
	var clock offsetClock
	st, spy := spiedStore(t, ns, &clock)
	spy.take()
	mustDequeue(t, st, "node-a")
	if got := spy.take(); got != "GET 1" {
		t.Fatalf("Dequeue with places not yet judged expired: requests %s, want GET 1 (no write)", got)
	}
	if places, _ := queuePlaces(t, ns, "job"); fmt.Sprint(places) != "[node-b node-c]" {
		t.Fatalf("places %v, want both (not yet expired on this store's clock)", places)
	}
	clock.add(time.Second)
	mustDequeue(t, st, "node-a")
	if places, ok := queuePlaces(t, ns, "job"); ok {
		t.Fatalf("the abandoned queue is still there, with places %v", places)
	}
}

// TestQueueRaceOrder: many handles racing to queue get one place each, in
// the order the object holds them, though most lose compare-and-set races.
func TestQueueRaceOrder(t *testing.T) {
	ns := namespace(t)
	const k = 16
	ahead := make([]int, k)
	var wg sync.WaitGroup
	for i := range k {
		st := openStore(t, apiserver(t).AdminConfig(), ns)
		wg.Go(func() {
			n, err := st.Enqueue(ctxT(t), "job", fmt.Sprintf("node-%02d", i), time.Minute)
			if err != nil {
				t.Errorf("Enqueue node-%02d: %v", i, err)
			}
			ahead[i] = n
		})
	}
	wg.Wait()
	places, _ := queuePlaces(t, ns, "job")
	if len(places) != k {
		t.Fatalf("places %v, want %d", places, k)
	}
	for i, n := range ahead {
		if who := fmt.Sprintf("node-%02d", i); n < 0 || n >= k || places[n] != who {
			t.Fatalf("node-%02d was told %d ahead; the queue is %v", i, n, places)
		}
	}
}
