package kubernetes_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/leasehold/leasehold"
)

// setPreferred writes spec.strategy and spec.preferredHolder on the Lease obj,
// as Kubernetes' coordinated leader election controller does, retrying on
// the conflicts the holder's renewals cause.
func setPreferred(t *testing.T, ns, obj, preferred string) {
	t.Helper()
	leases := adminClient(t).CoordinationV1().Leases(ns)
	strategy := coordinationv1.OldestEmulationVersion
	for range 20 {
		l, err := leases.Get(ctxT(t), obj, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		l.Spec.Strategy = &strategy
		l.Spec.PreferredHolder = &preferred
		if _, err = leases.Update(ctxT(t), l, metav1.UpdateOptions{}); err == nil {
			return
		} else if !apierrors.IsConflict(err) {
			t.Fatal(err)
		}
	}
	t.Fatal("could not write preferredHolder: 20 conflicts in a row")
}

// electorTerm is what a work function saw of one term.
type electorTerm struct {
	token int64
	cause error
}

func runElector(t *testing.T, ctx context.Context, wg *sync.WaitGroup, e *leasehold.Elector, mu *sync.Mutex, out *[]electorTerm) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		e.Run(ctx, func(wctx context.Context, l *leasehold.Lease) error {
			<-wctx.Done()
			mu.Lock()
			*out = append(*out, electorTerm{l.Token(), context.Cause(wctx)})
			mu.Unlock()
			return nil
		})
	}()
}

// TestPreferredHolderHandsOver: a leasehold holder honours the Lease's
// spec.preferredHolder as client-go's coordinated elector does (it gives the
// term up), only sooner: it drains its work, then transfers the Lease to the
// preferred holder, which leads with a higher token well within a lease
// duration. The preference, now met, is cleared; the strategy is kept. The
// negative control names the holder itself, which changes nothing.
func TestPreferredHolderHandsOver(t *testing.T) {
	ns := namespace(t)
	cfg := apiserver(t).AdminConfig()
	lease := 6 * time.Second
	newElector := func(id string) *leasehold.Elector {
		e, err := leasehold.NewElector(openStore(t, cfg, ns), "coordinated", leasehold.Config{Identity: id, Timings: leasehold.Timings{LeaseDuration: lease}})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	a, b := newElector("node-a"), newElector("node-b")
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	var mu sync.Mutex
	var termsA, termsB []electorTerm
	runElector(t, ctx, &wg, a, &mu, &termsA)
	st := openStore(t, cfg, ns)
	eventually(t, 20*time.Second, 50*time.Millisecond, "node-a to lead", func() (bool, error) {
		r, err := st.Get(ctxT(t), "coordinated")
		return err == nil && r.Holder == a.Identity(), nil
	})
	runElector(t, ctx, &wg, b, &mu, &termsB)
	eventually(t, 10*time.Second, 20*time.Millisecond, "node-b to contend", func() (bool, error) { return b.Status().Contending, nil })

	// Negative control: preferring the holder itself is no request.
	setPreferred(t, ns, "coordinated", a.Identity())
	control := time.Now()
	eventually(t, 3*lease, 100*time.Millisecond, "two renew intervals to pass", func() (bool, error) {
		return time.Since(control) > lease, nil
	})
	if r, err := st.Get(ctxT(t), "coordinated"); err != nil || r.Holder != a.Identity() || r.Token != 1 && len(termsA) != 0 {
		t.Fatalf("with preferredHolder naming the holder itself the lease is %+v, %v; want node-a's term kept", r, err)
	}
	mu.Lock()
	if len(termsA) != 0 {
		t.Fatalf("node-a's term ended with preferredHolder naming itself: %+v", termsA)
	}
	mu.Unlock()

	asked := time.Now()
	setPreferred(t, ns, "coordinated", b.Identity())
	var took time.Duration
	eventually(t, 2*lease, 20*time.Millisecond, "node-b to lead", func() (bool, error) {
		r, err := st.Get(ctxT(t), "coordinated")
		took = time.Since(asked)
		return err == nil && r.Holder == b.Identity() && !leasehold.IsReservation(r), nil
	})
	if took >= lease {
		t.Errorf("node-b led %v after preferredHolder named it: a lease duration (%v) or more", took, lease)
	}
	mu.Lock()
	if len(termsA) != 1 || !errors.Is(termsA[0].cause, leasehold.ErrHandedOver) {
		t.Errorf("node-a's terms %+v, want one, ended with ErrHandedOver", termsA)
	}
	mu.Unlock()
	l, err := adminClient(t).CoordinationV1().Leases(ns).Get(ctxT(t), "coordinated", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if l.Spec.PreferredHolder != nil && *l.Spec.PreferredHolder != "" {
		t.Errorf("preferredHolder %q left in place after it took over; client-go would read it as end of term", *l.Spec.PreferredHolder)
	}
	if l.Spec.Strategy == nil || *l.Spec.Strategy != coordinationv1.OldestEmulationVersion {
		t.Errorf("strategy not kept: %+v", l.Spec.Strategy)
	}
	t.Logf("node-b led %v after preferredHolder named it (lease %v)", took.Round(time.Millisecond), lease)
}
