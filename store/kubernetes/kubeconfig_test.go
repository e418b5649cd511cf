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
