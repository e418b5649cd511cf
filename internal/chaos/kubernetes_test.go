package chaos

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientset "k8s.io/client-go/kubernetes"

	"github.com/leasehold/leasehold/internal/testenv"
	k8sstore "github.com/leasehold/leasehold/store/kubernetes"
	"github.com/leasehold/leasehold/store/kubernetes/kubetest"
)

// startKube starts a kube-apiserver of the test's own (with its own etcd, on
// loopback) and makes a namespace for the run. It returns the store URL:
// kubernetes://NAMESPACE?kubeconfig=PATH, the kubeconfig holding the admin
// token.
func startKube(t *testing.T) string {
	t.Helper()
	if _, err := kubetest.BinDir(); err != nil {
		if errors.Is(err, kubetest.ErrNoBinaries) {
			testenv.Missing(t, "kube-apiserver and etcd ("+err.Error()+")",
				"build them with hack/kube-apiserver/build.sh (cached after the first build) or point "+kubetest.EnvBin+" at a directory holding kube-apiserver and etcd")
		}
		t.Fatalf("kubetest: %v", err)
	}
	start := time.Now()
	srv, err := kubetest.Start(kubetest.Options{})
	if err != nil {
		t.Fatalf("kube-apiserver: %v", err)
	}
	t.Cleanup(srv.Stop)
	t.Logf("kube-apiserver ready at %s after %v", srv.Host, time.Since(start).Round(time.Millisecond))

	const ns = "chaos"
	c, err := clientset.NewForConfig(srv.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace %s: %v", ns, err)
	}
	kc, err := srv.Kubeconfig("chaos.kubeconfig", srv.AdminToken, "chaos", ns)
	if err != nil {
		t.Fatal(err)
	}
	return (&url.URL{Scheme: k8sstore.Scheme, Host: ns, RawQuery: url.Values{"kubeconfig": {kc}}.Encode()}).String()
}

// Without AllowRemote, a Kubernetes store is refused: the harness cannot see
// where its kubeconfig points. Network faults are refused either way.
func TestKubernetesStoreNeedsAllowRemoteAndNoNetworkFaults(t *testing.T) {
	c := baseConfig(t, "kubernetes://chaos?kubeconfig=/nonexistent", 20*time.Second)
	_, err := Validate(c)
	if !errors.Is(err, ErrInvalid) || !contains(err, "cannot run against kubernetes:// stores without --allow-remote") {
		t.Fatalf("without AllowRemote: err = %v", err)
	}
	c.AllowRemote = true
	if _, err := Validate(c); err != nil {
		t.Fatalf("with AllowRemote, default faults: %v", err)
	}
	c.Faults = []string{faultPause, faultBlackhole}
	_, err = Validate(c)
	if !errors.Is(err, ErrInvalid) || !contains(err, `fault "blackhole" needs a store reached over the network`) {
		t.Fatalf("blackhole: err = %v", err)
	}
}

func contains(err error, s string) bool {
	return err != nil && strings.Contains(err.Error(), s)
}
