package storekit_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/storekit"
)

// testPKI is a CA made for the test, and a server certificate for
// "kit.test" and a client certificate signed by it, written as PEM files.
type testPKI struct {
	dir                   string
	caFile                string
	serverCert            tls.Certificate
	clientCert, clientKey string
	pool                  *x509.CertPool
}

func newPKI(t *testing.T) *testPKI {
	t.Helper()
	dir := t.TempDir()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "storekit test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	p := &testPKI{dir: dir, caFile: filepath.Join(dir, "ca.pem"), pool: x509.NewCertPool()}
	p.pool.AddCert(ca)
	writePEM(t, p.caFile, "CERTIFICATE", caDER)
	leaf := func(serial int64, usage x509.ExtKeyUsage, names []string) ([]byte, *ecdsa.PrivateKey) {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "leaf"}, DNSNames: names,
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		return der, key
	}
	sDER, sKey := leaf(2, x509.ExtKeyUsageServerAuth, []string{"kit.test"})
	p.serverCert = tls.Certificate{Certificate: [][]byte{sDER}, PrivateKey: sKey}
	cDER, cKey := leaf(3, x509.ExtKeyUsageClientAuth, nil)
	p.clientCert, p.clientKey = filepath.Join(dir, "client.pem"), filepath.Join(dir, "client-key.pem")
	writePEM(t, p.clientCert, "CERTIFICATE", cDER)
	kDER, _ := x509.MarshalECPrivateKey(cKey)
	writePEM(t, p.clientKey, "EC PRIVATE KEY", kDER)
	return p
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// serve starts a loopback TLS server that requires a client certificate
// from the test CA, and returns its address and the result of its handshake.
func (p *testPKI) serve(t *testing.T) (string, <-chan error) {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{
		Certificates: []tls.Certificate{p.serverCert}, ClientCAs: p.pool, ClientAuth: tls.RequireAndVerifyClientCert,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	done := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- err
			return
		}
		defer c.Close()
		done <- c.(*tls.Conn).Handshake()
	}()
	return ln.Addr().String(), done
}

func TestTLSFromURL(t *testing.T) {
	pki := newPKI(t)
	addr, served := pki.serve(t)
	p := kit.Params(mustURL(t, "x://h/?ca_file="+pki.caFile+"&cert_file="+pki.clientCert+"&key_file="+pki.clientKey+"&server_name=kit.test"))
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	p.ApplyTLS(p.TLSFiles(), cfg)
	if err := p.Done(); err != nil {
		t.Fatal(err)
	}
	conn, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		t.Fatalf("handshake with the CA, client certificate and server name from the URL: %v", err)
	}
	conn.Close()
	if err := <-served; err != nil {
		t.Fatalf("server side of the handshake: %v", err)
	}

	// Negative control: without ca_file the system roots do not know the
	// test CA, and the handshake fails.
	addr, _ = pki.serve(t)
	bare, err := storekit.NewTLSConfig(storekit.TLSFiles{ServerName: "kit.test"})
	if err != nil {
		t.Fatal(err)
	}
	if conn, err := tls.Dial("tcp", addr, bare); err == nil {
		conn.Close()
		t.Fatal("a handshake without the test CA succeeded: the test proves nothing")
	}
}

func TestTLSBadFiles(t *testing.T) {
	pki := newPKI(t)
	missing := filepath.Join(pki.dir, "missing.pem")
	for _, c := range []struct{ query, want string }{
		{"ca_file=" + missing, "ca_file: open " + missing},
		{"cacert=" + pki.clientKey, "ca_file: " + pki.clientKey + " holds no PEM certificate"},
		{"cert_file=" + pki.clientCert + "&key_file=" + missing, "client certificate (cert_file"},
		{"cert_file=" + pki.caFile + "&key_file=" + pki.clientKey, "client certificate"},
		{"ca_file=", "parameter ca_file is empty"},
	} {
		p := kit.Params(mustURL(t, "x://h/?"+c.query))
		cfg := &tls.Config{}
		p.ApplyTLS(p.TLSFiles(), cfg)
		err := p.Done()
		if !errors.Is(err, store.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want ErrInvalid saying %q", c.query, err, c.want)
		}
	}
	if _, err := storekit.LoadCertPool(pki.caFile); err != nil {
		t.Errorf("LoadCertPool of the CA: %v", err)
	}
	if _, err := storekit.LoadCertPool(pki.clientKey); err == nil {
		t.Errorf("LoadCertPool of a key file succeeded")
	}
}
