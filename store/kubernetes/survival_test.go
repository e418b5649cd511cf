package kubernetes_test

import (
	"errors"
	"strconv"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/leasehold/leasehold/store"
	k8sstore "github.com/leasehold/leasehold/store/kubernetes"
	"github.com/leasehold/leasehold/store/storetest"
)

// TestDeletedLeaseTokenKeepsRising (issue 13, hole 1): a Lease deleted (kubectl
// delete lease) and created again by a process that never saw it used to
// restart its token at 1. The lease's high-water mark, a second object the
// deletion leaves alone, keeps it rising.
func TestDeletedLeaseTokenKeepsRising(t *testing.T) {
	ns := namespace(t)
	cfg := apiserver(t).AdminConfig()
	st := openStore(t, cfg, ns)
	var last int64
	for range 3 {
		rec, err := st.Acquire(ctxT(t), "job", "node-a", 2*time.Second, "")
		if err != nil {
			t.Fatal(err)
		}
		last = rec.Token
	}
	leases := adminClient(t).CoordinationV1().Leases(ns)
	if err := leases.Delete(ctxT(t), "job", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	fresh := openStore(t, cfg, ns) // a process started after the deletion
	rec, err := fresh.Acquire(ctxT(t), "job", "node-b", 2*time.Second, "")
	if err != nil {
		t.Fatal(err)
	}
	if rec.Token != last+1 {
		t.Fatalf("a new process's token after the Lease was deleted = %d, want %d (above the %d granted before)", rec.Token, last+1, last)
	}
	l, err := leases.Get(ctxT(t), "job", metav1.GetOptions{})
	if err != nil || l.Spec.LeaseTransitions == nil || int64(*l.Spec.LeaseTransitions) != rec.Token {
		t.Fatalf("the re-created Lease: %+v, %v; want leaseTransitions %d", l, err, rec.Token)
	}
	hw, err := leases.Get(ctxT(t), k8sstore.HighWaterName("job"), metav1.GetOptions{})
	if err != nil || hw.Annotations[k8sstore.AnnotationHighWater] != strconv.FormatInt(rec.Token, 10) || hw.Annotations[k8sstore.AnnotationHighWaterOf] != "job" {
		t.Fatalf("high-water object: %+v, %v; want it to hold %d for job", hw, err, rec.Token)
	}
}

// TestHighWaterObjectIsNotALease: the mark is not listed, and a lease name that
// names it is refused rather than taken as a free lease.
func TestHighWaterObjectIsNotALease(t *testing.T) {
	ns := namespace(t)
	st := openStore(t, apiserver(t).AdminConfig(), ns)
	if _, err := st.Acquire(ctxT(t), "job", "node-a", 2*time.Second, ""); err != nil {
		t.Fatal(err)
	}
	recs, err := st.List(ctxT(t))
	if err != nil || len(recs) != 1 || recs[0].Name != "job" {
		t.Fatalf("List = %+v, %v; want only job", recs, err)
	}
	hw := k8sstore.HighWaterName("job")
	if _, err := st.Acquire(ctxT(t), hw, "node-b", 2*time.Second, ""); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("Acquire(%q): err = %v, want ErrInvalid", hw, err)
	}
	if _, err := st.Get(ctxT(t), hw); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("Get(%q): err = %v, want ErrInvalid", hw, err)
	}
}

// kubernetesLosses are the losses the README speaks of, for the conformance
// suite.
func kubernetesLosses() []storetest.Loss {
	del := func(t *testing.T, open func() (store.Store, error), names ...string) {
		st, err := open()
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		ns := st.(*k8sstore.Store).Namespace()
		for _, n := range names {
			if err := adminClient(t).CoordinationV1().Leases(ns).Delete(ctxT(t), n, metav1.DeleteOptions{}); err != nil {
				t.Fatalf("delete Lease %s/%s: %v", ns, n, err)
			}
		}
	}
	return []storetest.Loss{
		{
			Name: "Lease deleted",
			Lose: func(t *testing.T, open func() (store.Store, error), name string) error {
				del(t, open, name)
				return nil
			},
			Survives: true,
		},
		{
			// Both objects gone: only a handle that saw the old tokens
			// (each store remembers the highest it saw) stays above them.
			Name: "Lease and its high-water mark deleted",
			Lose: func(t *testing.T, open func() (store.Store, error), name string) error {
				del(t, open, name, k8sstore.HighWaterName(name))
				return nil
			},
			Survives: false,
		},
	}
}
