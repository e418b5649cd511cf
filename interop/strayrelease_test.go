package interop_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/fence"
)

// gateLock is client-go's LeaseLock behind a gate: once shut, its calls
// wait until the gate opens or their context ends, as on a network that
// holds them. It reports the holder that an empty-holder Update (a release)
// overwrote, as the Get before it showed it.
type gateLock struct {
	resourcelock.Interface

	mu        sync.Mutex
	gate      chan struct{} // closed: open
	shutNext  bool          // shut the gate after the next successful Update
	shut      chan struct{} // closed once shutNext has shut it
	lastGet   string        // the holder the last Get returned
	overwrote chan string   // the holder each successful release overwrote
	// gaveUp is set once a Get's context ended at the shut gate (the
	// renewals' deadline passed); the Get that comes to the gate after
	// that is the release's, and closes afterGiveUp.
	gaveUp      bool
	afterGiveUp chan struct{}
	firstGiveUp chan struct{} // closed at the first Get that gave up
	gaveUpOnce  sync.Once
}

func newGateLock(inner resourcelock.Interface) *gateLock {
	open := make(chan struct{})
	close(open)
	return &gateLock{Interface: inner, gate: open, shut: make(chan struct{}), overwrote: make(chan string, 4), afterGiveUp: make(chan struct{}), firstGiveUp: make(chan struct{})}
}

func (g *gateLock) wait(ctx context.Context) error {
	g.mu.Lock()
	gate := g.gate
	g.mu.Unlock()
	select {
	case <-gate:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// shutAfterNextUpdate shuts the gate right after the peer's next
// successful write: its renewal, so that its lease then runs out in full.
func (g *gateLock) shutAfterNextUpdate() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.shutNext = true
}

func (g *gateLock) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	close(g.gate)
}

func (g *gateLock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	g.mu.Lock()
	if g.gaveUp {
		g.gaveUp = false
		close(g.afterGiveUp)
	}
	g.mu.Unlock()
	if err := g.wait(ctx); err != nil {
		g.mu.Lock()
		g.gaveUp = true
		g.mu.Unlock()
		g.gaveUpOnce.Do(func() { close(g.firstGiveUp) })
		return nil, nil, err
	}
	r, raw, err := g.Interface.Get(ctx)
	if err == nil {
		g.mu.Lock()
		g.lastGet = r.HolderIdentity
		g.mu.Unlock()
	}
	return r, raw, err
}

func (g *gateLock) Create(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	if err := g.wait(ctx); err != nil {
		return err
	}
	return g.Interface.Create(ctx, ler)
}

func (g *gateLock) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	if err := g.wait(ctx); err != nil {
		return err
	}
	err := g.Interface.Update(ctx, ler)
	g.mu.Lock()
	defer g.mu.Unlock()
	if err == nil && ler.HolderIdentity == "" {
		g.overwrote <- g.lastGet
	}
	if err == nil && g.shutNext {
		g.shutNext = false
		g.gate = make(chan struct{})
		close(g.shut)
	}
	return err
}

// TestClientGoStrayRelease shows, on a real kube-apiserver, what
// store/kubernetes's README warns of: a client-go v0.37.2 LeaderElector with
// ReleaseOnCancel, cut off from the server past its renew deadline while a
// leasehold Elector took the Lease over, releases on its way out a Lease it
// no longer holds (tryRelease checks IsLeader against the record it
// observed before cut off, not the one it just read) and so empties the
// leasehold holder's live Lease. A third contender then takes it with a
// higher token; the leasehold holder learns at its next renewal, and until
// then only the fence keeps its writes out. Without ReleaseOnCancel (the
// README's advice beside other electors) the Lease stays the leasehold
// holder's: that subtest is the control.
//
// If the first subtest fails because client-go no longer releases a Lease
// it does not hold, client-go has mended it: update the README.
func TestClientGoStrayRelease(t *testing.T) {
	s := kubeServer(t)
	for _, release := range []bool{true, false} {
		name := "ReleaseOnCancel"
		if !release {
			name = "no-release"
		}
		t.Run(name, func(t *testing.T) { strayRelease(t, newKubeFleet(t, s), release) })
	}
}

func strayRelease(t *testing.T, f *kubeFleet, release bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	wait := func(what string, ch <-chan struct{}) {
		t.Helper()
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatalf("%s: not within the test's minute", what)
		}
	}
	lock := newGateLock(&resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Name: f.name, Namespace: f.ns},
		Client:     f.clientTo(f.server.Host).CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: "client-go"},
	})
	leading := make(chan struct{})
	// The renew deadline is close to the lease duration, so that the
	// release, bounded by the renew deadline too, is still waiting at the
	// gate when leasehold takes the Lease over, a lease duration after the
	// gate shut.
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: lock, LeaseDuration: 2 * time.Second, RenewDeadline: 1800 * time.Millisecond, RetryPeriod: 250 * time.Millisecond,
		ReleaseOnCancel: release, Name: "client-go",
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(lctx context.Context) { close(leading); <-lctx.Done() },
			OnStoppedLeading: func() {},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	cgCtx, stopCG := context.WithCancel(klog.NewContext(ctx, logr.Discard()))
	cgDone := make(chan struct{})
	go func() { defer close(cgDone); le.Run(cgCtx) }()
	defer func() { stopCG(); <-cgDone }()
	wait("client-go to lead", leading)
	lock.shutAfterNextUpdate()
	wait("client-go's next renewal", lock.shut)

	// leasehold takes the Lease once client-go's lease has run out unrenewed.
	st := f.storeTo(f.server.Host)
	acquired := make(chan leasehold.Event, 1)
	lost := make(chan leasehold.Event, 1)
	el, err := leasehold.NewElector(st, f.name, leasehold.Config{Identity: "lh", Timings: kubeTimings, StopOnLoss: true,
		OnEvent: func(e leasehold.Event) {
			switch e.Kind {
			case leasehold.EventAcquired:
				acquired <- e
			case leasehold.EventLost:
				lost <- e
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	elDone := make(chan error, 1)
	go func() {
		elDone <- el.Run(ctx, func(lctx context.Context, _ *leasehold.Lease) error { <-lctx.Done(); return nil })
	}()
	var term leasehold.Event
	select {
	case term = <-acquired:
	case <-ctx.Done():
		t.Fatal("leasehold did not take the Lease over")
	}
	t.Logf("leasehold took the Lease: %s", term.Term)
	if !release {
		// Control: client-go gives up its renewals at the gate and returns
		// without writing; the Lease stays leasehold's.
		wait("client-go to give up its renewals", lock.firstGiveUp)
		wait("client-go's Run to return", cgDone)
		lock.open()
		if got := leaseHolder(t, f); got != term.Term.Holder {
			t.Fatalf("without ReleaseOnCancel the Lease's holder is %q, want leasehold's %q", got, term.Term.Holder)
		}
		select {
		case e := <-lost:
			t.Fatalf("without ReleaseOnCancel leasehold lost its term: %v", e.Err)
		default:
		}
		return
	}
	// client-go's renewals gave up at the gate and it is on its way out:
	// its release's Get waits at the gate. Open it.
	wait("client-go's release", lock.afterGiveUp)
	lock.open()

	var overwritten string
	select {
	case overwritten = <-lock.overwrote:
	case <-cgDone:
		t.Fatal("client-go's Run returned without releasing over leasehold's term: its release timed out at the gate, or client-go has mended its release (then update store/kubernetes's README)")
	case <-ctx.Done():
		t.Fatal("client-go did not release")
	}
	if overwritten != term.Term.Holder {
		t.Fatalf("client-go's release overwrote holder %q, want leasehold's live term's %q", overwritten, term.Term.Holder)
	}
	// A third contender finds the Lease empty and takes it at once.
	st2 := f.storeTo(f.server.Host)
	rec, err := st2.Acquire(ctx, f.name, "third", 3*time.Second, "")
	if err != nil {
		t.Fatalf("the third contender's acquire of the emptied Lease: %v", err)
	}
	var loss *leasehold.Event
	select {
	case e := <-lost:
		loss = &e
		t.Logf("leasehold's holder had already lost its term when the third took it (%v)", e.Err)
	default:
		t.Logf("the third contender holds %s while leasehold's holder still leads %s: two leaders", rec.Term, term.Term)
	}
	if rec.Token <= term.Term.Token {
		t.Fatalf("the third contender's token %d is not above leasehold's %d", rec.Token, term.Term.Token)
	}
	// The fence keeps the older term's writes out once the newer wrote.
	g := fence.NewGuard(nil)
	if err := g.Check(ctx, "invoices", rec.Holder, rec.Token); err != nil {
		t.Fatalf("the fence refused the newer term: %v", err)
	}
	if err := g.Check(ctx, "invoices", term.Term.Holder, term.Term.Token); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("the fence admitted the emptied holder's older token after the newer one: %v", err)
	}
	// leasehold's holder learns at its next renewal.
	if loss == nil {
		select {
		case e := <-lost:
			loss = &e
		case <-ctx.Done():
			t.Fatal("leasehold's holder never learnt that its Lease was emptied")
		}
	}
	if loss.Err == nil {
		t.Fatal("leasehold's holder lost its term without a cause")
	}
	t.Logf("leasehold's holder lost its term: %v", loss.Err)
	<-elDone
}

// leaseHolder reads the Lease's holder.
func leaseHolder(t *testing.T, f *kubeFleet) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	l, err := f.clientTo(f.server.Host).CoordinationV1().Leases(f.ns).Get(ctx, f.name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}
