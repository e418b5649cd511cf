package etcd

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
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

	"github.com/leasehold/leasehold/internal/freeport"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/storetest"
)

// grantLeaseholdRole creates, as root, the role a leasehold user needs:
// read and write on its key prefix, nothing else. It is what the package doc
// tells operators to run with etcdctl.
func grantLeaseholdRole(t *testing.T, root *clientv3.Client, user, password, prefix string) {
	t.Helper()
	ctx := testCtx(t, 10*time.Second)
	if _, err := root.RoleAdd(ctx, "leasehold"); err != nil {
		t.Fatalf("role add: %v", err)
	}
	if _, err := root.RoleGrantPermission(ctx, "leasehold", prefix, clientv3.GetPrefixRangeEnd(prefix), clientv3.PermissionType(clientv3.PermReadWrite)); err != nil {
		t.Fatalf("grant permission: %v", err)
	}
	var err error
	if password == "" {
		_, err = root.UserAddWithOptions(ctx, user, "", &clientv3.UserAddOptions{NoPassword: true})
	} else {
		_, err = root.UserAdd(ctx, user, password)
	}
	if err != nil {
		t.Fatalf("user add: %v", err)
	}
	if _, err := root.UserGrantRole(ctx, user, "leasehold"); err != nil {
		t.Fatalf("grant role: %v", err)
	}
}

// enableAuth adds the root user (with rootPassword, or none for certificate
// auth) and turns authentication on.
func enableAuth(t *testing.T, root *clientv3.Client, rootPassword string) {
	t.Helper()
	ctx := testCtx(t, 10*time.Second)
	var err error
	if rootPassword == "" {
		_, err = root.UserAddWithOptions(ctx, "root", "", &clientv3.UserAddOptions{NoPassword: true})
	} else {
		_, err = root.UserAdd(ctx, "root", rootPassword)
	}
	if err != nil {
		t.Fatalf("add root: %v", err)
	}
	if _, err := root.UserGrantRole(ctx, "root", "root"); err != nil {
		t.Fatalf("grant root role: %v", err)
	}
	if _, err := root.AuthEnable(ctx); err != nil {
		t.Fatalf("auth enable: %v", err)
	}
}

// TestAuthLeastPrivilege: on an etcd with user/password auth, a user whose
// only role is read/write on its prefix runs the whole conformance suite
// (so grants, keep-alives, revocations, watches and fenced reads all work
// with that role), is refused outside its prefix, and a wrong password is a
// clear error that does not repeat the password.
func TestAuthLeastPrivilege(t *testing.T) {
	t.Parallel() // a member of its own; the suite mostly waits on leases
	m := startMember(t, defaultOpts())
	root := newClient(t, m.clientURL)
	const prefix = "apps/billing/"
	grantLeaseholdRole(t, root, "lh", "s3cret-lh", prefix)
	enableAuth(t, root, "rootpw")
	host := strings.TrimPrefix(m.clientURL, "http://")

	t.Run("Conformance", func(t *testing.T) {
		storetest.Run(t, storetest.Harness{
			New: func(t *testing.T) func() (store.Store, error) {
				sub := url.QueryEscape(uniquePrefix("auth"))
				u, _ := url.Parse(fmt.Sprintf("etcd://lh:s3cret-lh@%s/?prefix=%s%s", host, prefix, sub))
				return func() (store.Store, error) { return OpenURL(testCtx(t, 10*time.Second), u) }
			},
			MinTTL: MinTTL,
		})
	})

	t.Run("RevokeWorksWithTheRole", func(t *testing.T) {
		u, _ := url.Parse(fmt.Sprintf("etcd://lh:s3cret-lh@%s/apps/billing/revoke", host))
		st, err := OpenURL(testCtx(t, 10*time.Second), u)
		if err != nil {
			t.Fatal(err)
		}
		es := st.(*Store)
		defer st.Close()
		ctx := testCtx(t, 10*time.Second)
		rec, err := st.Acquire(ctx, "job", "node-a", 30*time.Second, "")
		if err != nil {
			t.Fatal(err)
		}
		ti, _ := es.recall(rec.Term)
		if err := st.Release(ctx, rec.Term); err != nil {
			t.Fatal(err)
		}
		// The released term's lease waits in the handle's pool for its next
		// grant; Close revokes it.
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
		rootCli := authClient(t, m.clientURL, "root", "rootpw")
		// etcd answers TTL -1 for a lease it does not know.
		if ttl, err := rootCli.TimeToLive(ctx, clientv3.LeaseID(ti.lease)); err != nil || ttl.TTL != -1 {
			t.Fatalf("after Release and Close by the least-privileged user, lease %x has TTL %v (%v); want it revoked", ti.lease, ttl.TTL, err)
		}
	})

	t.Run("OutsideThePrefix", func(t *testing.T) {
		_, err := Open(testCtx(t, 10*time.Second), Config{Endpoints: []string{m.clientURL}, Prefix: "apps/payroll/", Username: "lh", Password: "s3cret-lh"})
		if !errors.Is(err, ErrPermissionDenied) {
			t.Fatalf("Open outside the role's prefix: %v, want permission denied", err)
		}
	})

	t.Run("WrongPassword", func(t *testing.T) {
		u, _ := url.Parse(fmt.Sprintf("etcd://lh:not-the-password@%s/apps/billing/", host))
		_, err := OpenURL(testCtx(t, 10*time.Second), u)
		if !errors.Is(err, ErrAuthFailed) {
			t.Fatalf("Open with a wrong password: %v, want authentication failed", err)
		}
		if strings.Contains(err.Error(), "not-the-password") {
			t.Fatalf("error repeats the password: %v", err)
		}
		if !strings.Contains(err.Error(), `"lh"`) {
			t.Fatalf("error does not name the user: %v", err)
		}
	})

	t.Run("NoCredentials", func(t *testing.T) {
		_, err := Open(testCtx(t, 10*time.Second), Config{Endpoints: []string{m.clientURL}, Prefix: prefix})
		if !errors.Is(err, ErrUserEmpty) {
			t.Fatalf("Open without credentials on an auth-enabled etcd: %v, want user name empty", err)
		}
	})
}

func authClient(t *testing.T, endpoint, user, password string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, Username: user, Password: password, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// TestUnreachable: endpoints where nothing listens fail Open within the dial
// timeout with ErrUnreachable, naming the endpoints; a store whose cluster
// goes away answers with an error when the caller's context ends.
func TestUnreachable(t *testing.T) {
	port := freeport.ForTest(t) // nothing listens there now
	ep := fmt.Sprintf("127.0.0.1:%d", port)
	start := time.Now()
	_, err := Open(context.Background(), Config{Endpoints: []string{ep}, DialTimeout: time.Second})
	if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), ep) {
		t.Fatalf("Open on %s: %v, want ErrUnreachable naming the endpoint", ep, err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("Open took %v with a 1s dial timeout", d)
	}

	m := startMember(t, defaultOpts())
	st := openStore(t, uniquePrefix("gone"), m.clientURL)
	if _, err := st.Acquire(testCtx(t, 10*time.Second), "job", "node-a", 5*time.Second, ""); err != nil {
		t.Fatal(err)
	}
	m.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err = st.Acquire(ctx, "job", "node-b", 5*time.Second, "")
	if err == nil || errors.Is(err, store.ErrHeld) || errors.Is(err, store.ErrInvalid) {
		t.Fatalf("Acquire with the cluster gone: %v, want an outcome-unknown error", err)
	}
	w, err := st.Watch(ctx, "job")
	if err == nil {
		t.Fatalf("Watch with the cluster gone returned a channel (%v), want an error", w)
	}
}

func TestConfigFromURL(t *testing.T) {
	dir := t.TempDir()
	ca := writeTestPKI(t, dir, "lh")
	good := []struct {
		url       string
		endpoints []string
		prefix    string
		user      string
		tls       bool
	}{
		{"etcd://127.0.0.1:2379", []string{"http://127.0.0.1:2379"}, "", "", false},
		{"etcd://a:1,b:2,c:3/locks", []string{"http://a:1", "http://b:2", "http://c:3"}, "locks/", "", false},
		{"etcd://u:p%40ss@a:1/x/y/", []string{"http://a:1"}, "x/y/", "u", false},
		{"etcd://a:1/ignored?prefix=/abs/", []string{"http://a:1"}, "/abs/", "", false},
		{"etcds://a:1/p", []string{"https://a:1"}, "p/", "", true},
		{"etcd://a:1/p?cacert=" + ca.caFile, []string{"https://a:1"}, "p/", "", true},
		{"etcd://a:1/p?cacert=" + ca.caFile + "&cert=" + ca.certFile + "&key=" + ca.keyFile + "&server_name=etcd.local&dial_timeout=2s", []string{"https://a:1"}, "p/", "", true},
	}
	for _, g := range good {
		u, err := url.Parse(g.url)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := ConfigFromURL(u)
		if err != nil {
			t.Errorf("%s: %v", g.url, err)
			continue
		}
		if strings.Join(cfg.Endpoints, " ") != strings.Join(g.endpoints, " ") || cfg.Prefix != g.prefix || cfg.Username != g.user || (cfg.TLS != nil) != g.tls {
			t.Errorf("%s: got endpoints %v prefix %q user %q tls %v", g.url, cfg.Endpoints, cfg.Prefix, cfg.Username, cfg.TLS != nil)
		}
	}
	bad := []struct{ url, want string }{
		{"redis://a:1", "scheme"},
		{"etcd://a/x", "host:port"},
		{"etcd://:1/x", "host:port"},
		{"etcd://a:1,b:/x", "host:port"},
		{"etcd://a:1/x?colour=red", "unknown option"},
		{"etcd://u@a:1/x", "user and a password"},
		{"etcd://u:hunter2@a:1/x?cert=" + ca.certFile, "cert and key"},
		{"etcd://u:hunter2@a:1/x?dial_timeout=soon", "dial_timeout"},
		{"etcd://u:hunter2@a:1/x?cacert=" + filepath.Join(dir, "missing.pem"), "cacert"},
		{"etcd://u:hunter2@a:1/x?cacert=" + ca.keyFile, "no PEM certificate"},
	}
	for _, b := range bad {
		u, err := url.Parse(b.url)
		if err != nil {
			t.Fatal(err)
		}
		_, err = ConfigFromURL(u)
		if !errors.Is(err, store.ErrInvalid) || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%s: %v, want ErrInvalid mentioning %q", b.url, err, b.want)
		}
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%s: the error shows the password: %v", b.url, err)
		}
	}
}

// testPKI is a CA with one server certificate (127.0.0.1) and client
// certificates, written to files.
type testPKI struct {
	caFile, serverCert, serverKey string
	certFile, keyFile             string // the first client's
	clients                       map[string][2]string
}

func writeTestPKI(t *testing.T, dir string, clients ...string) testPKI {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "leasehold test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	issue := func(serial int64, cn string, server bool) (string, string) {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature,
		}
		if server {
			tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
			tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
		} else {
			tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kder, _ := x509.MarshalECPrivateKey(key)
		return write(cn+".pem", "CERTIFICATE", der), write(cn+"-key.pem", "EC PRIVATE KEY", kder)
	}
	p := testPKI{caFile: write("ca.pem", "CERTIFICATE", caDER), clients: map[string][2]string{}}
	p.serverCert, p.serverKey = issue(2, "etcd-server", true)
	for i, c := range clients {
		cert, key := issue(int64(10+i), c, false)
		p.clients[c] = [2]string{cert, key}
		if i == 0 {
			p.certFile, p.keyFile = cert, key
		}
	}
	return p
}

// TestTLSClientCertificates: an etcd that requires client certificates, with
// auth on and the certificate's common name as the etcd user (etcd's
// --client-cert-auth). leasehold connects over etcds:// with its own
// certificate and works within its prefix; without a certificate, or with a
// CA that does not vouch for the server, Open fails.
func TestTLSClientCertificates(t *testing.T) {
	dir := t.TempDir()
	pki := writeTestPKI(t, dir, "lh", "root", "stranger")
	o := defaultOpts()
	o.tweak = func(cfg *embed.Config) {
		cfg.ClientTLSInfo.CertFile = pki.serverCert
		cfg.ClientTLSInfo.KeyFile = pki.serverKey
		cfg.ClientTLSInfo.TrustedCAFile = pki.caFile
		cfg.ClientTLSInfo.ClientCertAuth = true
		for i := range cfg.ListenClientUrls {
			cfg.ListenClientUrls[i].Scheme = "https"
			cfg.AdvertiseClientUrls[i].Scheme = "https"
		}
	}
	m := startMember(t, o)
	host := strings.TrimPrefix(m.clientURL, "https://")
	certURL := func(who, prefix string) *url.URL {
		u, _ := url.Parse(fmt.Sprintf("etcds://%s/%s?cacert=%s&cert=%s&key=%s", host, prefix, pki.caFile, pki.clients[who][0], pki.clients[who][1]))
		return u
	}
	// As root (by certificate), create the least-privileged user lh and turn auth on.
	rcfg, err := ConfigFromURL(certURL("root", ""))
	if err != nil {
		t.Fatal(err)
	}
	root, err := clientv3.New(clientv3.Config{Endpoints: rcfg.Endpoints, TLS: rcfg.TLS, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	grantLeaseholdRole(t, root, "lh", "", "svc/")
	enableAuth(t, root, "")

	ctx := testCtx(t, 20*time.Second)
	st, err := OpenURL(ctx, certURL("lh", "svc"))
	if err != nil {
		t.Fatalf("OpenURL with lh's client certificate: %v", err)
	}
	defer st.Close()
	rec, err := st.Acquire(ctx, "job", "node-a", 5*time.Second, "")
	if err != nil {
		t.Fatalf("Acquire over TLS as lh: %v", err)
	}
	if _, err := st.Renew(ctx, rec.Term, 5*time.Second); err != nil {
		t.Fatalf("Renew over TLS as lh: %v", err)
	}
	if err := st.Release(ctx, rec.Term); err != nil {
		t.Fatalf("Release over TLS as lh: %v", err)
	}

	// A certificate whose user has no role is refused at Open.
	if _, err := OpenURL(ctx, certURL("stranger", "svc")); !errors.Is(err, ErrPermissionDenied) {
		t.Fatalf("OpenURL as a user without the role: %v, want permission denied", err)
	}
	// Without a client certificate the TLS handshake fails: nothing answers.
	noCert, _ := url.Parse(fmt.Sprintf("etcds://%s/svc?cacert=%s&dial_timeout=1s", host, pki.caFile))
	if _, err := OpenURL(ctx, noCert); err == nil {
		t.Fatal("OpenURL without a client certificate succeeded")
	}
	// A CA that did not sign the server's certificate: refused.
	other := writeTestPKI(t, t.TempDir(), "lh")
	wrongCA, _ := url.Parse(fmt.Sprintf("etcds://%s/svc?cacert=%s&cert=%s&key=%s&dial_timeout=1s", host, other.caFile, pki.clients["lh"][0], pki.clients["lh"][1]))
	if _, err := OpenURL(ctx, wrongCA); err == nil {
		t.Fatal("OpenURL trusting the wrong CA succeeded")
	}
}

// TestOpenHonoursContextDeadline: Open gives up at its context's deadline
// even when the dial timeout is longer.
func TestOpenHonoursContextDeadline(t *testing.T) {
	ep := fmt.Sprintf("127.0.0.1:%d", freeport.ForTest(t))
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := Open(ctx, Config{Endpoints: []string{ep}, DialTimeout: time.Hour})
	if !errors.Is(err, ErrUnreachable) && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Open with a 300ms context and a 1h dial timeout: %v", err)
	}
	if d := time.Since(mustDeadline(ctx)); d > 10*time.Second {
		t.Fatalf("Open returned %v after its context's deadline", d)
	}
}

func mustDeadline(ctx context.Context) time.Time { d, _ := ctx.Deadline(); return d }
