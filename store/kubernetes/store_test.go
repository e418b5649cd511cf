package kubernetes_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store"
	k8sstore "github.com/leasehold/leasehold/store/kubernetes"
	"github.com/leasehold/leasehold/store/storetest"
)

// checkedTransport passes the store's requests on, and fails the test on
// any update (PUT) without a resourceVersion, or delete without one as a
// precondition: the server accepts either whatever the object's version,
// so it would overwrite or remove a rival's write.
type checkedTransport struct {
	next    http.RoundTripper
	t       testing.TB
	updates *atomic.Int64
	deletes *atomic.Int64 // nil: not counted
}

func (c checkedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method != http.MethodPut && r.Method != http.MethodDelete {
		return c.next.RoundTrip(r)
	}
	var b []byte
	if r.Body != nil {
		var err error
		b, err = io.ReadAll(r.Body)
		r.Body.Close()
		if err != nil {
			return nil, err
		}
	}
	var l struct {
		Metadata      struct{ Name, ResourceVersion string }
		Preconditions struct{ ResourceVersion string }
	}
	if err := json.Unmarshal(b, &l); err != nil {
		c.t.Errorf("%s with a body that is not an object: %v", r.Method, err)
	}
	switch {
	case r.Method == http.MethodPut && l.Metadata.ResourceVersion == "":
		c.t.Errorf("update of Lease %s without a resourceVersion", l.Metadata.Name)
	case r.Method == http.MethodDelete && l.Preconditions.ResourceVersion == "":
		c.t.Errorf("delete of %s without a resourceVersion precondition", r.URL.Path)
	}
	if r.Method == http.MethodPut {
		c.updates.Add(1)
	} else if c.deletes != nil {
		c.deletes.Add(1)
	}
	r2 := r.Clone(r.Context())
	r2.Body = io.NopCloser(bytes.NewReader(b))
	return c.next.RoundTrip(r2)
}

// TestConformanceCheckedUpdates runs the suite again with every update
// checked for its resourceVersion.
func TestConformanceCheckedUpdates(t *testing.T) {
	t.Parallel() // the suite mostly waits on leases
	srv := apiserver(t)
	var updates atomic.Int64
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T) func() (store.Store, error) {
			ns := namespace(t)
			return func() (store.Store, error) {
				cfg := storeConfig(t, srv.AdminConfig(), ns)
				cfg.HTTPClient = &http.Client{Transport: checkedTransport{next: cfg.HTTPClient.Transport, t: t, updates: &updates}}
				return k8sstore.New(cfg)
			}
		},
		MinTTL: k8sstore.MinTTL,
	})
	if updates.Load() == 0 {
		t.Error("no update went through the check")
	}
	t.Logf("%d updates, each with a resourceVersion", updates.Load())
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// putLease writes a Lease as another client would (client-go, kubectl),
// through the admin client.
func putLease(t testing.TB, ns, name string, mutate func(*coordinationv1.Lease)) *coordinationv1.Lease {
	t.Helper()
	c := adminClient(t).CoordinationV1().Leases(ns)
	ctx := ctxT(t)
	l, err := c.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		l = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
		mutate(l)
		l, err = c.Create(ctx, l, metav1.CreateOptions{})
	} else if err == nil {
		mutate(l)
		l, err = c.Update(ctx, l, metav1.UpdateOptions{})
	}
	if err != nil {
		t.Fatalf("write Lease %s: %v", name, err)
	}
	return l
}

func ptr[T any](v T) *T { return &v }

// waitNotLive polls st.Get until name is not live, and returns how long it took.
func waitNotLive(t testing.TB, st store.Store, name string, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	eventually(t, timeout, 50*time.Millisecond, name+" expired", func() (bool, error) {
		r, err := st.Get(ctxT(t), name)
		return err == nil && !r.Live(), err
	})
	return time.Since(start)
}

// TestExpiryIgnoresTimestamps: a store judges expiry only by how long it has
// seen the Lease unchanged, never by the renewTime another node's clock
// wrote, so a holder with a skewed clock neither loses its lease early nor
// keeps it forever.
func TestExpiryIgnoresTimestamps(t *testing.T) {
	ns := namespace(t)
	st := openStore(t, apiserver(t).AdminConfig(), ns)
	for name, skew := range map[string]time.Duration{"past": -time.Hour, "future": time.Hour} {
		t.Run(name, func(t *testing.T) {
			putLease(t, ns, name, func(l *coordinationv1.Lease) {
				at := metav1.NewMicroTime(time.Now().Add(skew))
				l.Spec = coordinationv1.LeaseSpec{
					HolderIdentity: ptr("skewed-node"), LeaseDurationSeconds: ptr(int32(2)),
					AcquireTime: &at, RenewTime: &at, LeaseTransitions: ptr(int32(7)),
				}
			})
			r, err := st.Get(ctxT(t), name)
			if err != nil {
				t.Fatal(err)
			}
			if !r.Live() || r.Remaining < time.Second || r.Remaining > 2*time.Second || r.Token != 7 || r.Holder != "skewed-node" {
				t.Fatalf("first sight of a Lease renewed at now%+v: %+v; want live, about 2 s left, token 7", skew, r)
			}
			if _, err := st.Acquire(ctxT(t), name, "me", 2*time.Second, ""); !errors.Is(err, store.ErrHeld) {
				t.Fatalf("Acquire while it is live: err = %v, want ErrHeld", err)
			}
			took := waitNotLive(t, st, name, 20*time.Second)
			if took < 1500*time.Millisecond {
				t.Errorf("expired %v after first sight, want about the 2 s lease duration", took)
			}
			rec, err := st.Acquire(ctxT(t), name, "me", 2*time.Second, "")
			if err != nil || rec.Token != 8 {
				t.Fatalf("Acquire after expiry = %+v, %v; want token 8 (leaseTransitions + 1)", rec, err)
			}
		})
	}
}

// TestFreshObserverWaitsFullDuration: a store that has never seen a Lease
// cannot know how long ago it was renewed, so it gives the holder the whole
// duration from its first sight, as client-go does.
func TestFreshObserverWaitsFullDuration(t *testing.T) {
	ns := namespace(t)
	cfg := apiserver(t).AdminConfig()
	a := openStore(t, cfg, ns)
	if _, err := a.Acquire(ctxT(t), "job", "node-a", 2*time.Second, ""); err != nil {
		t.Fatal(err)
	}
	waitNotLive(t, a, "job", 20*time.Second)
	fresh := openStore(t, cfg, ns)
	r, err := fresh.Get(ctxT(t), "job")
	if err != nil {
		t.Fatal(err)
	}
	if !r.Live() || r.Remaining < time.Second {
		t.Fatalf("a fresh store's first Get = %+v; want live with the full duration left", r)
	}
	if _, err := fresh.Acquire(ctxT(t), "job", "node-b", 2*time.Second, ""); !errors.Is(err, store.ErrHeld) {
		t.Fatalf("fresh store's Acquire: err = %v, want ErrHeld until it has waited itself", err)
	}
	// The old holder's own store has seen the term expire: no revival.
	if _, err := a.Renew(ctxT(t), store.Term{Name: "job", Holder: "node-a", Token: r.Token}, 2*time.Second); !errors.Is(err, store.ErrNotHeld) {
		t.Fatalf("Renew of a term its own store saw expire: err = %v, want ErrNotHeld", err)
	}
	waitNotLive(t, fresh, "job", 20*time.Second)
	if _, err := fresh.Acquire(ctxT(t), "job", "node-b", 2*time.Second, ""); err != nil {
		t.Fatalf("Acquire after waiting: %v", err)
	}
}

// TestLeaseFields checks the Lease as client-go reads it: the fields
// client-go's LeaseLock writes, the token in leaseTransitions, and release
// as client-go's ReleaseOnCancel writes it.
func TestLeaseFields(t *testing.T) {
	ns := namespace(t)
	st := openStore(t, apiserver(t).AdminConfig(), ns)
	leases := adminClient(t).CoordinationV1().Leases(ns)
	before := time.Now().Add(-time.Second)
	rec, err := st.Acquire(ctxT(t), "fields", "node-a", 1500*time.Millisecond, "addr=10.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	if rec.TTL != 2*time.Second {
		t.Errorf("TTL 1.5 s granted as %v, want rounded up to 2 s", rec.TTL)
	}
	l, err := leases.Get(ctxT(t), "fields", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sp := l.Spec
	if sp.HolderIdentity == nil || *sp.HolderIdentity != "node-a" ||
		sp.LeaseDurationSeconds == nil || *sp.LeaseDurationSeconds != 2 ||
		sp.LeaseTransitions == nil || int64(*sp.LeaseTransitions) != rec.Token ||
		sp.AcquireTime == nil || sp.AcquireTime.Before(&metav1.MicroTime{Time: before}) ||
		sp.RenewTime == nil || !sp.RenewTime.Equal(sp.AcquireTime) {
		t.Fatalf("Lease spec after Acquire = %+v", sp)
	}
	if l.Annotations[k8sstore.AnnotationMetadata] != "addr=10.0.0.1" {
		t.Errorf("annotations %v, want the metadata", l.Annotations)
	}
	acquired := sp.AcquireTime.Time
	if _, err := st.Renew(ctxT(t), rec.Term, 3*time.Second); err != nil {
		t.Fatal(err)
	}
	l, _ = leases.Get(ctxT(t), "fields", metav1.GetOptions{})
	sp = l.Spec
	if !sp.AcquireTime.Time.Equal(acquired) || !sp.RenewTime.After(acquired) || *sp.LeaseDurationSeconds != 3 || int64(*sp.LeaseTransitions) != rec.Token {
		t.Errorf("Lease spec after Renew = %+v; want acquireTime kept, renewTime later, duration 3, same transitions", sp)
	}
	if err := st.Release(ctxT(t), rec.Term); err != nil {
		t.Fatal(err)
	}
	l, _ = leases.Get(ctxT(t), "fields", metav1.GetOptions{})
	sp = l.Spec
	if sp.HolderIdentity == nil || *sp.HolderIdentity != "" || *sp.LeaseDurationSeconds != 1 || int64(*sp.LeaseTransitions) != rec.Token {
		t.Errorf("Lease spec after Release = %+v; want holderIdentity \"\", leaseDurationSeconds 1, transitions kept (as client-go's release)", sp)
	}
	if _, ok := l.Annotations[k8sstore.AnnotationMetadata]; ok {
		t.Errorf("metadata annotation kept after release: %v", l.Annotations)
	}
}

// TestMetadataNotInherited: client-go keeps annotations it does not know, so
// a client-go holder taking over must not appear to carry leasehold's
// metadata.
func TestMetadataNotInherited(t *testing.T) {
	ns := namespace(t)
	st := openStore(t, apiserver(t).AdminConfig(), ns)
	rec, err := st.Acquire(ctxT(t), "meta", "node-a", 2*time.Second, "addr=10.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	putLease(t, ns, "meta", func(l *coordinationv1.Lease) { // as client-go's takeover writes it
		now := metav1.NewMicroTime(time.Now())
		l.Spec = coordinationv1.LeaseSpec{
			HolderIdentity: ptr("client-go-node"), LeaseDurationSeconds: ptr(int32(2)),
			AcquireTime: &now, RenewTime: &now, LeaseTransitions: ptr(int32(rec.Token + 1)),
		}
	})
	r, err := st.Get(ctxT(t), "meta")
	if err != nil {
		t.Fatal(err)
	}
	if r.Holder != "client-go-node" || r.Token != rec.Token+1 || r.Metadata != "" {
		t.Fatalf("Get after a client-go takeover = %+v; want its holder, token %d and no metadata", r, rec.Token+1)
	}
}

// TestTokenSurvivesDeletion: a Lease deleted (by an operator) and created
// again restarts leaseTransitions; a store that saw the old value still
// grants above it.
func TestTokenSurvivesDeletion(t *testing.T) {
	ns := namespace(t)
	st := openStore(t, apiserver(t).AdminConfig(), ns)
	var last int64
	for range 3 {
		rec, err := st.Acquire(ctxT(t), "job", "node-a", 2*time.Second, "")
		if err != nil {
			t.Fatal(err)
		}
		last = rec.Token
	}
	if err := adminClient(t).CoordinationV1().Leases(ns).Delete(ctxT(t), "job", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	rec, err := st.Acquire(ctxT(t), "job", "node-a", 2*time.Second, "")
	if err != nil {
		t.Fatal(err)
	}
	if rec.Token <= last {
		t.Fatalf("token after the Lease was deleted = %d, want > %d", rec.Token, last)
	}
}

// TestNameCollision: two lease names never share a Lease object, even if
// one is the mapped object name of the other.
func TestNameCollision(t *testing.T) {
	ns := namespace(t)
	st := openStore(t, apiserver(t).AdminConfig(), ns)
	obj, verbatim, err := k8sstore.ObjectName("Jobs/Nightly")
	if err != nil || verbatim {
		t.Fatalf("ObjectName: %q, %v, %v", obj, verbatim, err)
	}
	if _, err := st.Acquire(ctxT(t), "Jobs/Nightly", "node-a", 2*time.Second, ""); err != nil {
		t.Fatal(err)
	}
	if r, err := st.Get(ctxT(t), "Jobs/Nightly"); err != nil || r.Holder != "node-a" {
		t.Fatalf("Get of the mapped name = %+v, %v", r, err)
	}
	// obj is itself a valid lease name, used verbatim: it must not be taken
	// for the same lease.
	if _, err := st.Acquire(ctxT(t), obj, "node-b", 2*time.Second, ""); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("Acquire of %q, the object of another lease: err = %v, want ErrInvalid", obj, err)
	}
	// An object of a mapped name that leasehold did not write is refused too.
	other, _, _ := k8sstore.ObjectName("Other")
	putLease(t, ns, other, func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = ptr("x") })
	if _, err := st.Get(ctxT(t), "Other"); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("Get of a mapped name whose object leasehold did not write: err = %v, want ErrInvalid", err)
	}
}

// TestReleaseWakesWaiters: a waiter watching the Lease takes over as soon as
// the holder releases it, by leasehold's Release or by client-go's
// ReleaseOnCancel, long before its next poll would have.
func TestReleaseWakesWaiters(t *testing.T) {
	// A retry period far longer than a hand-off through the watch.
	timings := leasehold.Timings{
		LeaseDuration: 15 * time.Second,
		RenewDeadline: 10 * time.Second,
		RenewInterval: 3 * time.Second,
		RetryPeriod:   5 * time.Second,
	}
	for _, holderKind := range []string{"leasehold", "client-go"} {
		t.Run(holderKind, func(t *testing.T) {
			ns := namespace(t)
			var release func()
			// Without the watch, the waiter's next try would come after its
			// retry period or when the holder's lease would expire,
			// whichever is sooner.
			bound := timings.RetryPeriod
			switch holderKind {
			case "leasehold":
				st := openStore(t, apiserver(t).AdminConfig(), ns)
				rec, err := st.Acquire(ctxT(t), interopLease, "holder", timings.LeaseDuration, "")
				if err != nil {
					t.Fatal(err)
				}
				release = func() {
					if err := st.Release(ctxT(t), rec.Term); err != nil {
						t.Errorf("Release: %v", err)
					}
				}
			case "client-go":
				m := newMonitor(t)
				cg := startClientGo(t, m, ns, "cg-holder", true)
				m.waitLeader("", 30*time.Second)
				release = cg.stop
				bound = min(bound, cgLeaseDuration)
			}

			type stamped struct {
				kind leasehold.EventKind
				err  error
				at   time.Time
			}
			events := make(chan stamped, 100)
			e, err := leasehold.NewElector(openStore(t, apiserver(t).AdminConfig(), ns), interopLease, leasehold.Config{
				Identity: "waiter", Timings: timings,
				OnEvent: func(ev leasehold.Event) {
					select {
					case events <- stamped{ev.Kind, ev.Err, time.Now()}:
					default:
					}
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() {
				defer close(done)
				e.Run(ctx, func(ctx context.Context, l *leasehold.Lease) error { <-ctx.Done(); return nil })
			}()
			t.Cleanup(func() { cancel(); <-done })

			// Wait until the waiter has been refused and has gone quiet: it
			// is then in its long wait, for its retry period or the holder's
			// expiry. (It tries, subscribes to the watch, tries again.)
			var lastHeld time.Time
			for {
				quiet := 30 * time.Second
				if !lastHeld.IsZero() {
					quiet = 500 * time.Millisecond
				}
				ev, ok := within(events, quiet)
				if !ok {
					if lastHeld.IsZero() {
						t.Fatal("the waiter was never refused")
					}
					break
				}
				if ev.kind == leasehold.EventAcquireAttempt && errors.Is(ev.err, store.ErrHeld) {
					lastHeld = ev.at
				}
			}
			released := time.Now()
			release()
			for {
				ev, ok := within(events, 30*time.Second)
				if !ok {
					t.Fatal("the waiter did not take over within 30 s of the release")
				}
				if ev.kind != leasehold.EventAcquired {
					continue
				}
				t.Logf("hand-off %v after the release; %v after the waiter's last try (its timer would have woken it after %v)",
					ev.at.Sub(released).Round(time.Millisecond), ev.at.Sub(lastHeld).Round(time.Millisecond), bound)
				if ev.at.Sub(lastHeld) >= bound {
					t.Errorf("the waiter took over %v after its last try: woken by its timer, not by the release", ev.at.Sub(lastHeld))
				}
				return
			}
		})
	}
}

// within returns the next value from ch, or false when ch is closed or
// after timeout.
func within[T any](ch <-chan T, timeout time.Duration) (T, bool) {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case v, ok := <-ch:
		return v, ok
	case <-timer.C:
		var zero T
		return zero, false
	}
}

// closedWithin drains ch until it is closed (true) or timeout passes (false).
func closedWithin[T any](ch <-chan T, timeout time.Duration) bool {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return true
			}
		case <-timer.C:
			return false
		}
	}
}

// TestOpenURL opens the store from kubernetes:// URLs with a kubeconfig.
func TestOpenURL(t *testing.T) {
	srv := apiserver(t)
	ns := namespace(t)
	ctxNS := namespace(t)
	kc, err := srv.Kubeconfig("kubeconfig-"+ns, srv.AdminToken, "test-ctx", ctxNS)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBERNETES_SERVICE_HOST", "") // not in a pod
	t.Setenv("KUBECONFIG", "")
	open := func(raw string) (store.Store, error) {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		st, err := k8sstore.OpenURL(ctxT(t), u)
		if err == nil {
			t.Cleanup(func() { st.Close() })
		}
		return st, err
	}
	ok := map[string]string{
		"kubernetes://" + ns + "?kubeconfig=" + kc:                       ns,
		"kubernetes://" + ns + "?kubeconfig=" + kc + "&context=test-ctx": ns,
		"kubernetes://?kubeconfig=" + kc:                                 ctxNS, // the context's namespace
		"kubernetes:///?kubeconfig=" + kc:                                ctxNS,
	}
	for raw, wantNS := range ok {
		st, err := open(raw)
		if err != nil {
			t.Errorf("OpenURL(%s): %v", raw, err)
			continue
		}
		if got := st.(*k8sstore.Store).Namespace(); got != wantNS {
			t.Errorf("OpenURL(%s) namespace %q, want %q", raw, got, wantNS)
		}
		if _, err := st.Get(ctxT(t), "nothing"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("OpenURL(%s): Get = %v, want ErrNotFound", raw, err)
		}
	}
	t.Setenv("KUBECONFIG", kc)
	st, err := open("kubernetes://" + ns)
	if err != nil {
		t.Fatalf("OpenURL with $KUBECONFIG: %v", err)
	}
	if _, err := st.Acquire(ctxT(t), "job", "node-a", 2*time.Second, ""); err != nil {
		t.Fatalf("Acquire through a store from $KUBECONFIG: %v", err)
	}
	invalid := []string{
		"kubernetes://user:secret@" + ns,
		"kubernetes://" + ns + "/path",
		"kubernetes://" + ns + ":443",
		"kubernetes://Bad_Namespace",
		"kubernetes://" + ns + "?bogus=1",
		"etcd://" + ns,
	}
	for _, raw := range invalid {
		if _, err := open(raw); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("OpenURL(%s): err = %v, want ErrInvalid", raw, err)
		}
	}
	if _, err := open("kubernetes://" + ns + "?context=no-such-context"); err == nil {
		t.Errorf("OpenURL with an unknown context: no error")
	}
}

// TestWatchEvents: the watch wakes for grants, releases, creation and
// deletion of the Lease, not for renewals or for its own start, and ends
// with the store.
func TestWatchEvents(t *testing.T) {
	ns := namespace(t)
	cfg := apiserver(t).AdminConfig()
	w := openStore(t, cfg, ns)
	other := openStore(t, cfg, ns)
	ctx := ctxT(t)
	wakes := func(ch <-chan struct{}, want bool, after string) {
		t.Helper()
		// A wake comes within milliseconds; its absence is judged after a
		// while, which can only make this test pass more often, not fail.
		wait := 500 * time.Millisecond
		if want {
			wait = 30 * time.Second
		}
		_, ok := within(ch, wait)
		if ok != want {
			t.Fatalf("after %s: woken = %v, want %v", after, ok, want)
		}
	}
	ch, err := w.Watch(ctx, "job") // no Lease yet
	if err != nil {
		t.Fatal(err)
	}
	rec, err := other.Acquire(ctx, "job", "node-a", 5*time.Second, "")
	if err != nil {
		t.Fatal(err)
	}
	wakes(ch, true, "the Lease was created")
	for range 3 {
		if _, err := other.Renew(ctx, rec.Term, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	wakes(ch, false, "three renewals")
	ch2, err := w.Watch(ctx, "job") // the Lease exists: no wake for its current state
	if err != nil {
		t.Fatal(err)
	}
	wakes(ch2, false, "subscribing")
	if err := other.Release(ctx, rec.Term); err != nil {
		t.Fatal(err)
	}
	wakes(ch, true, "a release")
	wakes(ch2, true, "a release")
	if _, err := other.Acquire(ctx, "job", "node-b", 5*time.Second, ""); err != nil {
		t.Fatal(err)
	}
	wakes(ch, true, "a grant")
	if err := adminClient(t).CoordinationV1().Leases(ns).Delete(ctx, "job", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	wakes(ch, true, "the Lease was deleted")
	w.Close()
	for _, c := range []<-chan struct{}{ch, ch2} {
		if !closedWithin(c, 10*time.Second) {
			t.Fatal("watch channel still open 10 s after Close")
		}
	}
}

// TestWatchSightingStartsTheClock: a version the store's watch delivers
// counts as seen from then, so a contender waiting with a watch judges a
// holder's expiry from when the holder's write reached it, not from its next
// read (before, a waiting leasehold node started its clock at its next poll
// and lost expiry races to client-go contenders; see interop/README.md). It
// stays safe: the event follows the write. A store without the watch, asked
// at the same moment, is the control: it has just seen the version.
func TestWatchSightingStartsTheClock(t *testing.T) {
	ns := namespace(t)
	cfg := apiserver(t).AdminConfig()
	var now atomic.Int64 // nanoseconds added to base: the stores' own clock
	base := time.Now()
	clock := func() time.Time { return base.Add(time.Duration(now.Load())) }
	open := func() *k8sstore.Store {
		sc := storeConfig(t, cfg, ns)
		sc.Now = clock
		st, err := k8sstore.New(sc)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}
	watcher, control := open(), open()
	ctx := ctxT(t)
	ch, err := watcher.Watch(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := openStore(t, cfg, ns).Acquire(ctx, "job", "node-a", 5*time.Second, ""); err != nil {
		t.Fatal(err)
	}
	if _, ok := within(ch, 30*time.Second); !ok {
		t.Fatal("the watch did not report the grant")
	}
	now.Add(int64(3 * time.Second))
	seen, err := watcher.Get(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := control.Get(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	if seen.Remaining != 2*time.Second {
		t.Errorf("watching store, 3 s after its watch delivered the grant: %v left, want 2s (the 5 s lease less 3 s)", seen.Remaining)
	}
	if fresh.Remaining != 5*time.Second {
		t.Errorf("control store, first sight now: %v left, want the full 5s", fresh.Remaining)
	}
}
