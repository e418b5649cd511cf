package kubernetes_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientset "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/leasehold/leasehold/internal/testenv"
	k8sstore "github.com/leasehold/leasehold/store/kubernetes"
	"github.com/leasehold/leasehold/store/kubernetes/kubetest"
)

// The package's tests share one etcd and kube-apiserver, started on first
// use and stopped by TestMain. Each test works in its own namespace.
var (
	serverOnce sync.Once
	server     *kubetest.Server
	serverErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	server.Stop()
	os.Exit(code)
}

const howToGet = "build them with hack/kube-apiserver/build.sh (10-16 minutes cold, cached after) " +
	"or point " + kubetest.EnvBin + " at a directory holding kube-apiserver and etcd"

// apiserver returns the shared server, starting it on first use. Without the
// binaries the test is skipped loudly (failed in CI); a server that has the
// binaries but does not start fails the test.
func apiserver(t testing.TB) *kubetest.Server {
	t.Helper()
	serverOnce.Do(func() {
		start := time.Now()
		server, serverErr = kubetest.Start(kubetest.Options{})
		if serverErr == nil {
			fmt.Fprintf(os.Stderr, "kubetest: kube-apiserver ready at %s after %v\n", server.Host, time.Since(start).Round(time.Millisecond))
		}
	})
	if errors.Is(serverErr, kubetest.ErrNoBinaries) {
		testenv.Missing(t, "kube-apiserver and etcd ("+serverErr.Error()+")", howToGet)
	}
	if serverErr != nil {
		t.Fatalf("kube-apiserver: %v", serverErr)
	}
	return server
}

func adminClient(t testing.TB) *clientset.Clientset {
	t.Helper()
	return mustClient(t, apiserver(t).AdminConfig())
}

func mustClient(t testing.TB, cfg *rest.Config) *clientset.Clientset {
	t.Helper()
	c, err := clientset.NewForConfig(cfg)
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	return c
}

// storeConfig is the store's Config for a client-go rest.Config, as a
// library user who has one writes it: the server, and the HTTP client
// rest.HTTPClientFor makes (without the request timeout, which would end
// every watch). No client-side rate limit: the tests make many quick calls.
func storeConfig(t testing.TB, cfg *rest.Config, ns string) k8sstore.Config {
	t.Helper()
	c := rest.CopyConfig(cfg)
	c.Timeout = 0
	hc, err := rest.HTTPClientFor(c)
	if err != nil {
		t.Fatalf("HTTPClientFor: %v", err)
	}
	return k8sstore.Config{Server: c.Host, HTTPClient: hc, Namespace: ns, QPS: -1}
}

var nsSeq atomic.Int64

// namespace creates a namespace only this test uses, deleted when it ends.
func namespace(t testing.TB) string {
	t.Helper()
	c := adminClient(t)
	name := strings.ToLower(t.Name())
	name = strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		return '-'
	}, name)
	if len(name) > 40 {
		name = name[:40]
	}
	name = fmt.Sprintf("t%d-%s", nsSeq.Add(1), strings.Trim(name, "-"))
	ctx := context.Background()
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace %s: %v", name, err)
	}
	t.Cleanup(func() {
		c.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return name
}

// openStore opens a store on ns with cfg's credentials.
func openStore(t testing.TB, cfg *rest.Config, ns string) *k8sstore.Store {
	t.Helper()
	st, err := k8sstore.New(storeConfig(t, cfg, ns))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// eventually polls cond every interval until it is true or timeout passes.
func eventually(t testing.TB, timeout, interval time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not true after %v", what, timeout)
		}
		timer := time.NewTimer(interval)
		<-timer.C
	}
}
