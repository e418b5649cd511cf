package kubernetes

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestKubeconfigMerge: $KUBECONFIG's files merge as kubectl merges them:
// the first file to name a cluster, user or context wins, the first
// current-context wins, files that do not exist are skipped, and relative
// paths are relative to the file that names them.
func TestKubeconfigMerge(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	write := func(dir, text string) string {
		t.Helper()
		p := filepath.Join(dir, "config")
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	pa := write(a, `
clusters:
- name: shared
  cluster: {server: "https://a.example:6443", certificate-authority: ca.crt}
users:
- name: shared
  user: {tokenFile: tok}
contexts:
- name: only-a
  context: {cluster: shared, user: shared, namespace: from-a}
`)
	pb := write(b, `
current-context: only-b
clusters:
- name: shared
  cluster: {server: "https://b.example:6443"}
- name: b
  cluster: {server: "https://b.example:6443", certificate-authority: /abs/ca.crt}
contexts:
- name: only-a
  context: {cluster: b, namespace: from-b}
- name: only-b
  context: {cluster: b}
`)
	t.Setenv("KUBECONFIG", strings.Join([]string{filepath.Join(a, "missing"), pa, pb}, string(os.PathListSeparator)))
	kc, err := loadKubeconfig("")
	if err != nil {
		t.Fatal(err)
	}
	if kc.currentContext != "only-b" {
		t.Errorf("current-context %q, want only-b (the first one set)", kc.currentContext)
	}
	if got := kc.clusters["shared"]; got.Server != "https://a.example:6443" || got.CertificateAuthority != filepath.Join(a, "ca.crt") {
		t.Errorf("cluster shared = %+v; want the first file's, its CA relative to that file", got)
	}
	if got := kc.clusters["b"].CertificateAuthority; got != "/abs/ca.crt" {
		t.Errorf("absolute CA path became %q", got)
	}
	if got := kc.users["shared"].TokenFile; got != filepath.Join(a, "tok") {
		t.Errorf("tokenFile %q, want it relative to the first file", got)
	}
	if got := kc.contexts["only-a"].Namespace; got != "from-a" {
		t.Errorf("context only-a namespace %q, want from-a (the first file's)", got)
	}

	// An explicit path must exist; a $KUBECONFIG of missing files is no
	// kubeconfig at all.
	if _, err := loadKubeconfig(filepath.Join(a, "missing")); err == nil {
		t.Error("a missing explicit kubeconfig: no error")
	}
	t.Setenv("KUBECONFIG", filepath.Join(a, "missing"))
	if _, err := loadKubeconfig(""); err == nil || !strings.Contains(err.Error(), "no kubeconfig found") {
		t.Errorf("only missing files: err = %v, want no kubeconfig found", err)
	}
}

// TestWriteKubeconfig: the copy the chaos harness writes for a node keeps
// the selected context's cluster (its server replaced), user and namespace,
// with the relative paths of the original made absolute, and nothing of the
// other contexts.
func TestWriteKubeconfig(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "config")
	if err := os.WriteFile(src, []byte(`
current-context: other
clusters:
- name: c
  cluster: {server: "https://127.0.0.1:6443", certificate-authority-data: "`+"aGVsbG8="+`", tls-server-name: api}
- name: o
  cluster: {server: "https://o.example"}
users:
- name: u
  user: {client-certificate: c.crt, client-key: c.key, as: someone}
contexts:
- name: mine
  context: {cluster: c, user: u, namespace: ns1}
- name: other
  context: {cluster: o}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	server, name, err := KubeconfigServer(src, "mine")
	if err != nil || server != "https://127.0.0.1:6443" || name != "mine" {
		t.Fatalf("KubeconfigServer = %q, %q, %v", server, name, err)
	}
	if _, name, _ := KubeconfigServer(src, ""); name != "other" {
		t.Errorf("no context: %q, want the current context other", name)
	}
	if _, _, err := KubeconfigServer(src, "nope"); err == nil || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("unknown context: err = %v", err)
	}
	dst := filepath.Join(t.TempDir(), "node.yaml")
	if err := WriteKubeconfig(src, "mine", "https://127.0.0.1:9999", dst); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(dst); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("stat %s: %v, %v; want mode 0600", dst, fi, err)
	}
	kc, err := loadKubeconfig(dst)
	if err != nil {
		t.Fatal(err)
	}
	if kc.currentContext != "mine" || len(kc.contexts) != 1 || len(kc.clusters) != 1 || len(kc.users) != 1 {
		t.Fatalf("copy has current %q, %d contexts, %d clusters, %d users; want mine and one each", kc.currentContext, len(kc.contexts), len(kc.clusters), len(kc.users))
	}
	cl := kc.clusters["c"]
	if cl.Server != "https://127.0.0.1:9999" || string(cl.CertificateAuthorityData) != "hello" || cl.TLSServerName != "api" {
		t.Errorf("cluster = %+v; want the new server, the CA data and the server name kept", cl)
	}
	u := kc.users["u"]
	if u.ClientCertificate != filepath.Join(dir, "c.crt") || u.ClientKey != filepath.Join(dir, "c.key") || u.As != "someone" {
		t.Errorf("user = %+v; want the paths made absolute against the original's directory", u)
	}
	if kc.contexts["mine"].Namespace != "ns1" {
		t.Errorf("namespace %q, want ns1", kc.contexts["mine"].Namespace)
	}
}
