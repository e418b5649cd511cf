package mysql_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"errors"

	"github.com/leasehold/leasehold/store"
	lhmysql "github.com/leasehold/leasehold/store/mysql"
)

// writeCA writes a self-signed CA certificate in PEM and returns its path.
func writeCA(t *testing.T) string {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "lh test CA"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestTLSOptions: the URL's TLS parameters become the driver's TLS config
// (ca_file loaded as the only roots, server_name, verification on); and
// against the test server, which has TLS off, tls=true and ca_file fail to
// connect with the driver's TLS error (never silently in plain text), while
// tls=preferred falls back to plain TCP and works. The test server cannot
// show a verified TLS session: MariaDB here runs with have_ssl=DISABLED.
func TestTLSOptions(t *testing.T) {
	ca := writeCA(t)
	u, _ := url.Parse("mysql://u:pw@db.example:3306/app?ca_file=" + ca + "&server_name=mysql.internal")
	cfg, _, _, err := lhmysql.ParseURL(u)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.TLS == nil || cfg.TLS.RootCAs == nil || cfg.TLS.ServerName != "mysql.internal" || cfg.TLS.InsecureSkipVerify || cfg.TLS.MinVersion < tls.VersionTLS12 {
		t.Fatalf("TLS config from ca_file and server_name = %+v; want the CA as roots, that server name, verification on", cfg.TLS)
	}
	u, _ = url.Parse("mysql://u@db.example/app?tls=true")
	if cfg, _, _, err = lhmysql.ParseURL(u); err != nil || cfg.TLS == nil || cfg.TLS.ServerName != "db.example" || cfg.TLS.RootCAs != nil || cfg.Addr != "db.example:3306" {
		t.Fatalf("tls=true = %+v, %v; want system roots, the host as server name, port 3306", cfg.TLS, err)
	}
	u, _ = url.Parse("mysql://u@db.example/app")
	if cfg, _, _, err = lhmysql.ParseURL(u); err != nil || cfg.TLS != nil {
		t.Fatalf("no TLS parameter = %+v, %v; want plain TCP", cfg.TLS, err)
	}

	db := freshDB(t)
	base := "mysql://root@" + dbConfig(t, db).Addr + "/" + db
	for _, q := range []string{"tls=true", "ca_file=" + ca} {
		u, _ := url.Parse(base + "?" + q)
		st, err := lhmysql.OpenURL(ctxFor(t), u)
		if err == nil {
			st.Close()
			t.Fatalf("%s against a server without TLS connected: TLS must not be dropped silently", q)
		}
		if errors.Is(err, store.ErrInvalid) || !strings.Contains(strings.ToLower(err.Error()), "tls") {
			t.Fatalf("%s against a server without TLS: %v, want a connection error about TLS", q, err)
		}
	}
	u, _ = url.Parse(base + "?tls=preferred")
	st, err := lhmysql.OpenURL(ctxFor(t), u)
	if err != nil {
		t.Fatalf("tls=preferred against a server without TLS: %v, want a plain connection", err)
	}
	st.Close()
}
