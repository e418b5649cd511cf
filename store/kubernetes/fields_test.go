package kubernetes_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"

	k8sstore "github.com/leasehold/leasehold/store/kubernetes"
)

// notOwned is l with everything leasehold writes taken out: the five spec
// fields client-go's LeaseLock writes, leasehold's annotations, and what the
// server changes on every write (resourceVersion, managedFields). What is
// left must survive every write of leasehold's.
func notOwned(l *coordinationv1.Lease) *coordinationv1.Lease {
	c := l.DeepCopy()
	c.Spec.HolderIdentity = nil
	c.Spec.LeaseDurationSeconds = nil
	c.Spec.AcquireTime = nil
	c.Spec.RenewTime = nil
	c.Spec.LeaseTransitions = nil
	for k := range c.Annotations {
		if strings.HasPrefix(k, "leasehold.dev/") {
			delete(c.Annotations, k)
		}
	}
	c.ResourceVersion = ""
	c.ManagedFields = nil
	return c
}

// lostFields compares the fields leasehold does not own before and after a
// write, and describes what changed ("" if nothing did).
func lostFields(before, after *coordinationv1.Lease) string {
	b, a := notOwned(before), notOwned(after)
	if reflect.DeepEqual(b, a) {
		return ""
	}
	bj, _ := json.Marshal(b)
	aj, _ := json.Marshal(a)
	return "fields leasehold does not own changed:\n before: " + string(bj) + "\n after:  " + string(aj)
}

// TestWritesKeepForeignFields: every write of the store (acquire, renew,
// release, acquire again, force release) starts from the object it read and
// keeps every field it does not own: spec.preferredHolder and spec.strategy,
// which Kubernetes' coordinated leader election writes and reads, and the
// labels, annotations and ownerReferences others put there. The negative
// control writes the Lease as a fresh object with the same five fields, as
// the store used to, and the check must catch it.
func TestWritesKeepForeignFields(t *testing.T) {
	ns := namespace(t)
	st := openStore(t, apiserver(t).AdminConfig(), ns)
	leases := adminClient(t).CoordinationV1().Leases(ns)
	strategy := coordinationv1.OldestEmulationVersion
	orig := putLease(t, ns, "coordinated", func(l *coordinationv1.Lease) {
		l.Labels = map[string]string{"app.kubernetes.io/name": "demo"}
		l.Annotations = map[string]string{"example.com/note": "not leasehold's"}
		l.OwnerReferences = []metav1.OwnerReference{{
			APIVersion: "v1", Kind: "ConfigMap", Name: "owner",
			UID: "0f6c3a5e-8d3b-4b59-9a3e-2b1f6c1d7e44",
		}}
		l.Spec.Strategy = &strategy
		l.Spec.PreferredHolder = ptr("node-b")
	})
	// The test means something only if the server keeps the fields.
	if orig.Spec.Strategy == nil || *orig.Spec.Strategy != strategy || orig.Spec.PreferredHolder == nil || *orig.Spec.PreferredHolder != "node-b" {
		t.Fatalf("the API server did not keep strategy and preferredHolder as written (is the CoordinatedLeaderElection feature gate on?): spec %+v", orig.Spec)
	}

	get := func() *coordinationv1.Lease {
		t.Helper()
		l, err := leases.Get(ctxT(t), "coordinated", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	check := func(op string) *coordinationv1.Lease {
		t.Helper()
		l := get()
		if d := lostFields(orig, l); d != "" {
			t.Errorf("after %s: %s", op, d)
		}
		return l
	}

	rec, err := st.Acquire(ctxT(t), "coordinated", "node-a", 2*time.Second, "addr=10.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	if l := check("Acquire"); l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != "node-a" {
		t.Fatalf("Acquire did not write the holder: spec %+v", l.Spec)
	}
	if _, err := st.Renew(ctxT(t), rec.Term, 3*time.Second); err != nil {
		t.Fatal(err)
	}
	if l := check("Renew"); *l.Spec.LeaseDurationSeconds != 3 {
		t.Fatalf("Renew did not write the duration: spec %+v", l.Spec)
	}
	if err := st.Release(ctxT(t), rec.Term); err != nil {
		t.Fatal(err)
	}
	check("Release")
	rec, err = st.Acquire(ctxT(t), "coordinated", "node-a", 2*time.Second, "")
	if err != nil {
		t.Fatal(err)
	}
	check("Acquire after Release")
	if _, err := st.ForceRelease(ctxT(t), "coordinated"); err != nil {
		t.Fatal(err)
	}
	last := check("ForceRelease")

	// Negative controls. The write the store used to make: the object it
	// read with a fresh spec of the five fields; then a fresh object with
	// only leasehold's annotations. The check must name what each lost.
	oldWrite := last.DeepCopy()
	oldWrite.Spec = coordinationv1.LeaseSpec{
		HolderIdentity:       ptr("node-a"),
		LeaseDurationSeconds: ptr(int32(2)),
		AcquireTime:          &metav1.MicroTime{Time: time.Now()},
		RenewTime:            &metav1.MicroTime{Time: time.Now()},
		LeaseTransitions:     ptr(int32(rec.Token + 1)),
	}
	last = negativeControl(t, leases, orig, oldWrite, `"strategy"`, `"preferredHolder"`)
	freshObject := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{
		Name: last.Name, Namespace: ns, ResourceVersion: last.ResourceVersion,
		Annotations: map[string]string{k8sstore.AnnotationMetadata: "x", k8sstore.AnnotationMetadataToken: "1"},
	}}
	negativeControl(t, leases, orig, freshObject, `"labels"`, `"ownerReferences"`, `example.com/note`)
}

// negativeControl writes l, and checks that lostFields reports each of lost
// as present before and gone after.
func negativeControl(t *testing.T, leases coordinationv1client.LeaseInterface, orig, l *coordinationv1.Lease, lost ...string) *coordinationv1.Lease {
	t.Helper()
	got, err := leases.Update(ctxT(t), l, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	d := lostFields(orig, got)
	i := strings.Index(d, " after: ")
	if i < 0 {
		t.Fatalf("negative control: the check did not notice a write that lost %v", lost)
	}
	before, after := d[:i], d[i:]
	for _, want := range lost {
		if !strings.Contains(before, want) || strings.Contains(after, want) {
			t.Errorf("negative control: the write lost %s, and the check did not say so: %s", want, d)
		}
	}
	return got
}
