package kubernetes_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/store"
	k8sstore "github.com/leasehold/leasehold/store/kubernetes"
)

// openWith opens kubernetes://ns?kubeconfig=kc (kc "" for none) outside a
// pod, unless the test set the in-cluster variables itself.
func openWith(t *testing.T, ns, kc string) (*k8sstore.Store, error) {
	t.Helper()
	u := &url.URL{Scheme: k8sstore.Scheme, Host: ns}
	if kc != "" {
		u.RawQuery = url.Values{"kubeconfig": {kc}}.Encode()
	}
	st, err := k8sstore.OpenURL(ctxT(t), u)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { st.Close() })
	return st.(*k8sstore.Store), nil
}

// writeKubeconfig writes a kubeconfig for the test server whose user is
// given as YAML lines (indented under "user:"), and returns its path.
func writeKubeconfig(t *testing.T, dir, user string) string {
	t.Helper()
	srv := apiserver(t)
	text := fmt.Sprintf(`apiVersion: v1
kind: Config
preferences: {}
clusters:
- name: test
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: user
  user:
%s
contexts:
- name: ctx
  context:
    cluster: test
    user: user
current-context: ctx
`, srv.Host, srv.CAFile, user)
	path := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// getWorks checks that st reaches the server as someone allowed to read
// Leases: Get of a lease that does not exist says so.
func getWorks(t *testing.T, st *k8sstore.Store, how string) {
	t.Helper()
	if _, err := st.Get(ctxT(t), "nothing"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("%s: Get = %v, want ErrNotFound", how, err)
	}
}

func notInPod(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBECONFIG", "")
}

// TestKubeconfigExecPlugin: a user whose credential comes from an exec
// plugin (as on EKS, GKE, AKS). The plugin runs once while its credential
// lasts, and again for every request once it has expired.
func TestKubeconfigExecPlugin(t *testing.T) {
	notInPod(t)
	srv := apiserver(t)
	ns := namespace(t)
	for _, tc := range []struct {
		name, expiry string
		runs         func(int) bool
	}{
		{"Lasting", "", func(n int) bool { return n == 1 }},
		{"Expired", `,"expirationTimestamp":"2000-01-01T00:00:00Z"`, func(n int) bool { return n >= 3 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			count := filepath.Join(dir, "runs")
			plugin := filepath.Join(dir, "plugin.sh")
			script := fmt.Sprintf(`#!/bin/sh
case "$KUBERNETES_EXEC_INFO" in *'"interactive":false'*) ;; *) echo "no exec info: $KUBERNETES_EXEC_INFO" >&2; exit 1;; esac
[ "$PLUGIN_ENV" = from-kubeconfig ] || { echo "env not passed" >&2; exit 1; }
echo run >> %s
echo '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"%s"%s}}'
`, count, srv.AdminToken, tc.expiry)
			if err := os.WriteFile(plugin, []byte(script), 0o700); err != nil {
				t.Fatal(err)
			}
			kc := writeKubeconfig(t, dir, `    exec:
      apiVersion: client.authentication.k8s.io/v1
      command: ./plugin.sh
      interactiveMode: Never
      env:
      - name: PLUGIN_ENV
        value: from-kubeconfig`)
			st, err := openWith(t, ns, kc)
			if err != nil {
				t.Fatal(err)
			}
			for range 3 {
				getWorks(t, st, "exec plugin")
			}
			b, _ := os.ReadFile(count)
			if n := strings.Count(string(b), "run"); !tc.runs(n) {
				t.Errorf("the plugin ran %d times for 3 requests", n)
			}
		})
	}
	t.Run("WrongVersion", func(t *testing.T) {
		dir := t.TempDir()
		plugin := filepath.Join(dir, "plugin.sh")
		script := "#!/bin/sh\necho '{\"apiVersion\":\"client.authentication.k8s.io/v1beta1\",\"kind\":\"ExecCredential\",\"status\":{\"token\":\"x\"}}'\n"
		if err := os.WriteFile(plugin, []byte(script), 0o700); err != nil {
			t.Fatal(err)
		}
		kc := writeKubeconfig(t, dir, "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: "+plugin)
		st, err := openWith(t, ns, kc)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Get(ctxT(t), "nothing"); err == nil || !strings.Contains(err.Error(), "not an ExecCredential client.authentication.k8s.io/v1") {
			t.Errorf("plugin answering another apiVersion: Get = %v, want an error saying so", err)
		}
	})
}

// TestKubeconfigUsers: the other kinds of kubeconfig user: a token file
// (named relative to the kubeconfig), impersonation, a user with nothing
// (anonymous, which the server refuses), and ones that are refused before
// any request.
func TestKubeconfigUsers(t *testing.T) {
	notInPod(t)
	srv := apiserver(t)
	ns := namespace(t)

	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "token"), []byte(srv.AdminToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := openWith(t, ns, writeKubeconfig(t, dir, "    tokenFile: token"))
	if err != nil {
		t.Fatal(err)
	}
	getWorks(t, st, "tokenFile")

	st, err = openWith(t, ns, writeKubeconfig(t, t.TempDir(), "    token: "+srv.AdminToken+"\n    as: nobody\n    as-groups: [nothing]"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Get(ctxT(t), "nothing"); !k8sstore.IsForbidden(err) {
		t.Errorf("admin impersonating a user without rights: Get = %v, want Forbidden", err)
	}

	for user, want := range map[string]string{
		"    auth-provider:\n      name: gcp":               `auth-provider "gcp" is not supported`,
		"    token: x\n    username: u\n    password: p":    "a token and a user name and password together",
		"    client-certificate: c.pem":                     "needs both the certificate and its key",
		"    tokenFile: missing":                            "token file",
		"    exec:\n      apiVersion: v1\n      command: x": `apiVersion "v1"`,
		"    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: x\n      interactiveMode: Always": "wants a terminal",
	} {
		_, err := openWith(t, ns, writeKubeconfig(t, t.TempDir(), user))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("user %q: OpenURL = %v, want an error containing %q", user, err, want)
		}
	}
}

// TestInCluster: in a pod the store uses the service account's token and
// CA, and the pod's namespace; a rotated token is read again, at once when
// the server answers 401 with the old one.
func TestInCluster(t *testing.T) {
	srv := apiserver(t)
	ns := namespace(t)
	dir := t.TempDir()
	ca, err := os.ReadFile(srv.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, text string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("ca.crt", string(ca))
	write("namespace", ns+"\n")
	write("token", srv.AdminToken)
	t.Cleanup(k8sstore.SetInCluster(dir, time.Hour))
	u, _ := url.Parse(srv.Host)
	host, port, _ := net.SplitHostPort(u.Host)
	t.Setenv("KUBERNETES_SERVICE_HOST", host)
	t.Setenv("KUBERNETES_SERVICE_PORT", port)
	t.Setenv("POD_NAMESPACE", "")

	st, err := openWith(t, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if st.Namespace() != ns {
		t.Errorf("namespace %q, want the pod's, %q", st.Namespace(), ns)
	}
	getWorks(t, st, "in-cluster")

	// The file now holds a token the server does not know: a store that
	// read the good one keeps using it within the hour ...
	write("token", "not-a-token")
	getWorks(t, st, "in-cluster, token rotated on disk")
	// ... and a store that reads the bad one is refused (401).
	st2, err := openWith(t, "", "")
	if err != nil {
		t.Fatal(err)
	}
	var ae *k8sstore.APIError
	if _, err := st2.Get(ctxT(t), "nothing"); !errors.As(err, &ae) || ae.Code != 401 {
		t.Fatalf("in-cluster with an unknown token: Get = %v, want 401", err)
	}
	// Rotated to a good token: the 401 made the store read the file again
	// at once, though the hour has not passed.
	write("token", srv.AdminToken)
	getWorks(t, st2, "in-cluster, after a 401 and a rotation")

	t.Setenv("POD_NAMESPACE", "from-env")
	if st, err := openWith(t, "", ""); err != nil || st.Namespace() != "from-env" {
		t.Errorf("POD_NAMESPACE set: namespace %v, %v; want from-env", st, err)
	}
	os.Remove(filepath.Join(dir, "token"))
	if _, err := openWith(t, "", ""); err == nil || !strings.Contains(err.Error(), "token file") {
		t.Errorf("in a pod without a token: OpenURL = %v, want an error naming the token file", err)
	}
}

// TestKubeconfigClientCert: a user who authenticates with a client
// certificate, given inline (base64 data) or as files relative to the
// kubeconfig; a certificate the server's CA did not sign does not
// authenticate.
func TestKubeconfigClientCert(t *testing.T) {
	notInPod(t)
	srv := apiserver(t)
	ns := namespace(t)
	certPEM, keyPEM, err := srv.ClientCert("cert-admin", "system:masters")
	if err != nil {
		t.Fatal(err)
	}
	b64 := func(b []byte) string { return base64.StdEncoding.EncodeToString(b) }
	st, err := openWith(t, ns, writeKubeconfig(t, t.TempDir(), "    client-certificate-data: "+b64(certPEM)+"\n    client-key-data: "+b64(keyPEM)))
	if err != nil {
		t.Fatal(err)
	}
	getWorks(t, st, "client certificate data")

	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "c.pem"), certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "k.pem"), keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	st, err = openWith(t, ns, writeKubeconfig(t, dir, "    client-certificate: c.pem\n    client-key: k.pem"))
	if err != nil {
		t.Fatal(err)
	}
	getWorks(t, st, "client certificate files")

	// Negative control: a certificate the server's client CA did not sign.
	foreign := selfSigned(t)
	st, err = openWith(t, ns, writeKubeconfig(t, t.TempDir(), "    client-certificate-data: "+b64(foreign.cert)+"\n    client-key-data: "+b64(foreign.key)))
	if err != nil {
		t.Fatal(err)
	}
	// The server ignores it and takes the request for an anonymous one.
	if _, err := st.Get(ctxT(t), "nothing"); !k8sstore.IsForbidden(err) || !strings.Contains(err.Error(), `"system:anonymous"`) {
		t.Errorf("a certificate the server's CA did not sign: Get = %v, want Forbidden for system:anonymous", err)
	}
}

type pemPair struct{ cert, key []byte }

// selfSigned makes a self-signed client certificate for "intruder" in
// system:masters.
func selfSigned(t *testing.T) pemPair {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(7),
		Subject:      pkix.Name{CommonName: "intruder", Organization: []string{"system:masters"}},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pemPair{
		cert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		key:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}),
	}
}
