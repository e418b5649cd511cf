package chaos

import (
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/store/kubernetes"
)

// TestKubeNodeURL: a kubernetes:// URL whose kubeconfig names a server on
// this host is proxied (kubeEndpoint gives its address, the default port
// 443 when it names none), and each node gets a URL naming a kubeconfig of
// its own whose server is the node's proxy; a remote server is not proxied.
func TestKubeNodeURL(t *testing.T) {
	dir := t.TempDir()
	kc := filepath.Join(dir, "config")
	if err := os.WriteFile(kc, []byte(`
current-context: here
clusters:
- {name: local, cluster: {server: "https://127.0.0.1:6443", certificate-authority: ca.crt}}
- {name: local443, cluster: {server: "https://127.0.0.1"}}
- {name: remote, cluster: {server: "https://kube.example:6443"}}
users:
- {name: admin, user: {token: secret}}
contexts:
- {name: here, context: {cluster: local, user: admin, namespace: ns}}
- {name: here443, context: {cluster: local443, user: admin}}
- {name: there, context: {cluster: remote, user: admin}}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	u := func(ctx string) *url.URL {
		q := url.Values{"kubeconfig": {kc}}
		if ctx != "" {
			q.Set("context", ctx)
		}
		return &url.URL{Scheme: "kubernetes", Host: "chaos", RawQuery: q.Encode()}
	}
	for ctx, want := range map[string]string{"": "127.0.0.1:6443", "here443": "127.0.0.1:443", "there": ""} {
		if got := kubeEndpoint(u(ctx)); got != want {
			t.Errorf("context %q: kubeEndpoint = %q, want %q", ctx, got, want)
		}
	}

	path := filepath.Join(dir, "nodes", "4000.yaml")
	nu, err := kubeNodeURL(u(""), "127.0.0.1:4000", path)
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := url.Parse(nu)
	if err != nil {
		t.Fatal(err)
	}
	q := parsed.Query()
	if parsed.Host != "chaos" || q.Get("kubeconfig") != path || q.Get("context") != "here" {
		t.Fatalf("node URL %s; want namespace chaos, kubeconfig %s, context here", nu, path)
	}
	server, name, err := kubernetes.KubeconfigServer(path, "")
	if err != nil || server != "https://127.0.0.1:4000" || name != "here" {
		t.Errorf("node kubeconfig: server %q, context %q, %v; want the proxy and context here", server, name, err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), filepath.Join(dir, "ca.crt")) || !strings.Contains(string(b), "secret") {
		t.Errorf("node kubeconfig lacks the absolute CA path or the token:\n%s", b)
	}
	if _, err := kubeNodeURL(u("nope"), "127.0.0.1:4000", path); err == nil {
		t.Error("an unknown context: no error")
	}
}
