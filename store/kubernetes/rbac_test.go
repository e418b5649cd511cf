package kubernetes_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/leasehold/leasehold/store"
	k8sstore "github.com/leasehold/leasehold/store/kubernetes"
	"github.com/leasehold/leasehold/store/storetest"
)

const deployDir = "../../deploy/kubernetes"

// yamlDocs returns the documents of a multi-document YAML file with their kinds.
func yamlDocs(t testing.TB, path string) map[string][]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	docs := map[string][]byte{}
	for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(b), -1) {
		var head struct{ Kind string }
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if head.Kind == "" {
			continue // comments only
		}
		if _, dup := docs[head.Kind]; dup {
			t.Fatalf("%s: two documents of kind %s", path, head.Kind)
		}
		docs[head.Kind] = []byte(doc)
	}
	return docs
}

// strict decodes a document, refusing fields the type does not have.
func strict(t testing.TB, doc []byte, obj any) {
	t.Helper()
	if err := yaml.UnmarshalStrict(doc, obj); err != nil {
		t.Fatalf("decode %T: %v", obj, err)
	}
}

// applyRBAC creates the shipped ServiceAccount, Role and RoleBinding in ns
// and returns a client config with a token of that service account.
func applyRBAC(t testing.TB, ns string) *rest.Config {
	t.Helper()
	return applyRBACRole(t, ns, func(*rbacv1.Role) {})
}

// applyRBACRole is applyRBAC with the Role changed by edit first.
func applyRBACRole(t testing.TB, ns string, edit func(*rbacv1.Role)) *rest.Config {
	t.Helper()
	c := adminClient(t)
	ctx := context.Background()
	docs := yamlDocs(t, filepath.Join(deployDir, "rbac.yaml"))
	var sa corev1.ServiceAccount
	var role rbacv1.Role
	var rb rbacv1.RoleBinding
	strict(t, docs["ServiceAccount"], &sa)
	strict(t, docs["Role"], &role)
	strict(t, docs["RoleBinding"], &rb)
	edit(&role)
	if len(docs) != 3 {
		t.Fatalf("rbac.yaml has kinds %v, want ServiceAccount, Role and RoleBinding", keys(docs))
	}
	if _, err := c.CoreV1().ServiceAccounts(ns).Create(ctx, &sa, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create service account: %v", err)
	}
	if _, err := c.RbacV1().Roles(ns).Create(ctx, &role, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create role: %v", err)
	}
	if _, err := c.RbacV1().RoleBindings(ns).Create(ctx, &rb, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create role binding: %v", err)
	}
	expiry := int64(3600)
	tr, err := c.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa.Name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token request: %v", err)
	}
	cfg := apiserver(t).Config(tr.Status.Token)
	// The service account and its binding reach the server's caches a
	// moment after they are created: wait until a read is authorized.
	asSA := mustClient(t, cfg)
	eventually(t, 30*time.Second, 50*time.Millisecond, "service account authorized to read leases", func() (bool, error) {
		_, err := asSA.CoordinationV1().Leases(ns).Get(ctx, "probe", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	return cfg
}

// roleStore is what the minimal Role supports: the store, its watch, its
// queue, and forced release; not List.
type roleStore interface {
	store.Store
	store.Watcher
	store.ForceReleaser
	store.Queuer
}

func keys(m map[string][]byte) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

// TestRBAC proves the shipped least-privilege Role enough: the conformance
// suite (acquire, renew, release, get, watch, queue) runs as a service account
// bound only to it, with the server in RBAC authorization mode. It also
// checks that the credential is really that narrow.
func TestRBAC(t *testing.T) {
	apiserver(t)
	t.Run("Conformance", func(t *testing.T) {
		storetest.Run(t, storetest.Harness{
			New: func(t *testing.T) func() (store.Store, error) {
				ns := namespace(t)
				cfg := applyRBAC(t, ns)
				return func() (store.Store, error) {
					st, err := k8sstore.New(storeConfig(t, cfg, ns))
					// List needs the "list" verb, which the Role leaves out
					// on purpose: offer the suite only what the Role allows.
					return struct{ roleStore }{st}, err
				}
			},
			MinTTL: k8sstore.MinTTL,
		})
	})
	t.Run("NothingMore", func(t *testing.T) {
		ns := namespace(t)
		cfg := applyRBAC(t, ns)
		c := mustClient(t, cfg)
		ctx := context.Background()
		st := openStore(t, cfg, ns)
		rec, err := st.Acquire(ctx, "job", "node-a", 5*time.Second, "")
		if err != nil {
			t.Fatalf("Acquire under the Role: %v", err)
		}
		checks := map[string]error{}
		_, checks["list leases"] = c.CoordinationV1().Leases(ns).List(ctx, metav1.ListOptions{})
		_, checks["patch a lease"] = c.CoordinationV1().Leases(ns).Patch(ctx, "job", types.MergePatchType, []byte(`{"metadata":{"labels":{"x":"y"}}}`), metav1.PatchOptions{})
		checks["delete all leases"] = c.CoordinationV1().Leases(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
		_, checks["read config maps"] = c.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
		_, checks["read leases in another namespace"] = c.CoordinationV1().Leases("default").Get(ctx, "job", metav1.GetOptions{})
		for what, err := range checks {
			if !apierrors.IsForbidden(err) {
				t.Errorf("%s: err = %v, want Forbidden", what, err)
			}
		}
		other := namespace(t) // no Role there
		elsewhere := openStore(t, cfg, other)
		_, err = elsewhere.Acquire(ctx, "job", "node-a", 5*time.Second, "")
		if !k8sstore.IsForbidden(err) {
			t.Errorf("Acquire in a namespace without the Role: err = %v, want Forbidden", err)
		}
		if err := st.Release(ctx, rec.Term); err != nil {
			t.Errorf("Release under the Role: %v", err)
		}
	})
}

// TestQueueWithoutDelete: under a Role without the "delete" verb (the one
// shipped before the queue), the last place's Dequeue still succeeds and
// leaves the queue object behind, empty; the queue goes on working. Under
// the shipped Role the object is deleted (the negative control).
func TestQueueWithoutDelete(t *testing.T) {
	apiserver(t)
	for _, withDelete := range []bool{false, true} {
		ns := namespace(t)
		cfg := applyRBACRole(t, ns, func(r *rbacv1.Role) {
			if !withDelete {
				r.Rules[0].Verbs = slices.DeleteFunc(r.Rules[0].Verbs, func(v string) bool { return v == "delete" })
			}
		})
		st := openStore(t, cfg, ns)
		if n, err := st.Enqueue(ctxT(t), "job", "node-a", time.Minute); err != nil || n != 0 {
			t.Fatalf("Enqueue: %d, %v; want 0 ahead", n, err)
		}
		if err := st.Dequeue(ctxT(t), "job", "node-a"); err != nil {
			t.Fatalf("delete allowed %v: Dequeue of the last place: %v", withDelete, err)
		}
		places, exists := queuePlaces(t, ns, "job")
		if exists == withDelete || len(places) != 0 {
			t.Fatalf("delete allowed %v: queue object exists %v with places %v", withDelete, exists, places)
		}
		if n, err := st.Enqueue(ctxT(t), "job", "node-b", time.Minute); err != nil || n != 0 {
			t.Fatalf("delete allowed %v: Enqueue after the queue emptied: %d, %v; want 0 ahead", withDelete, n, err)
		}
	}
}

// TestDeployExamples checks the shipped manifests: they decode strictly into
// their types and the API server accepts them (dry run), and the Deployment
// uses the service account that rbac.yaml binds.
func TestDeployExamples(t *testing.T) {
	c := adminClient(t)
	ns := namespace(t)
	ctx := context.Background()
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldValidation: "Strict"}
	rbac := yamlDocs(t, filepath.Join(deployDir, "rbac.yaml"))
	var sa corev1.ServiceAccount
	strict(t, rbac["ServiceAccount"], &sa)
	docs := yamlDocs(t, filepath.Join(deployDir, "deployment.yaml"))
	var d appsv1.Deployment
	strict(t, docs["Deployment"], &d)
	if _, err := c.AppsV1().Deployments(ns).Create(ctx, &d, dry); err != nil {
		t.Fatalf("API server refuses deployment.yaml: %v", err)
	}
	if d.Spec.Template.Spec.ServiceAccountName != sa.Name {
		t.Errorf("deployment runs as service account %q, rbac.yaml binds %q", d.Spec.Template.Spec.ServiceAccountName, sa.Name)
	}
	var cmd []string
	for _, ct := range d.Spec.Template.Spec.Containers {
		cmd = append(cmd, ct.Command...)
	}
	joined := strings.Join(cmd, " ")
	for _, want := range []string{" run ", "--store=kubernetes://", "--identity=$(POD_NAME)"} {
		if !strings.Contains(joined, want) {
			t.Errorf("deployment command %q lacks %q", joined, want)
		}
	}
}
