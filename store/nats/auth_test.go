package nats

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"

	"github.com/leasehold/leasehold/store"
)

// leastPermissions are the subjects a leasehold user needs on bucket b and
// its fair queues' bucket (the README lists them): publish, then subscribe.
func leastPermissions(b string) ([]string, []string) {
	q := QueueBucket(b)
	return []string{
			"$KV." + b + ".>",
			"$JS.API.STREAM.INFO.KV_" + b,
			"$JS.API.STREAM.MSG.GET.KV_" + b,
			"$JS.API.CONSUMER.CREATE.KV_" + b + ".>",
			"$JS.API.CONSUMER.DELETE.KV_" + b + ".>",
			"$JS.FC.KV_" + b + ".>",
			"$KV." + q + ".>",
			"$JS.API.STREAM.INFO.KV_" + q,
			"$JS.API.STREAM.MSG.GET.KV_" + q,
			"$JS.API.DIRECT.GET.KV_" + q,
			"$JS.API.STREAM.PURGE.KV_" + q,
			"$JS.API.CONSUMER.CREATE.KV_" + q + ".>",
			"$JS.API.CONSUMER.DELETE.KV_" + q + ".>",
			"$JS.FC.KV_" + q + ".>",
		},
		[]string{"_INBOX.>"}
}

func without(list []string, x string) []string {
	return slices.DeleteFunc(slices.Clone(list), func(s string) bool { return s == x })
}

// exercise runs every operation of the store through the URL raw, with
// another handle (admin) releasing, so that the watch must wake.
func exercise(t *testing.T, raw string, admin *Store) {
	t.Helper()
	ctx := testCtx(t, 30*time.Second)
	u, _ := url.Parse(raw)
	sti, err := OpenURL(ctx, u)
	if err != nil {
		t.Fatalf("open %s: %v", store.RedactURL(u), err)
	}
	st := sti.(*Store)
	defer st.Close()
	name := "perm/" + randHex(3)
	rec, err := st.Acquire(ctx, name, "restricted", 10*time.Second, "m")
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	if _, err := st.Renew(ctx, rec.Term, 10*time.Second); err != nil {
		t.Fatalf("Renew: %v", err)
	}
	if g, err := st.Get(ctx, name); err != nil || g.Term != rec.Term || !g.Live() {
		t.Fatalf("Get: %+v, %v", g, err)
	}
	if recs, err := st.List(ctx); err != nil || len(recs) == 0 {
		t.Fatalf("List: %v, %v", recs, err)
	}
	if err := st.Release(ctx, rec.Term); err != nil {
		t.Fatalf("Release: %v", err)
	}
	// A watch wakes when another holder releases.
	other, err := admin.Acquire(ctx, name, "other", 10*time.Second, "")
	if err != nil {
		t.Fatal(err)
	}
	ch, err := st.Watch(ctx, name)
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	if err := admin.Release(ctx, other.Term); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("the watch did not wake on a release")
	}
	rec, err = st.Acquire(ctx, name, "restricted", 10*time.Second, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.ForceRelease(ctx, name); err != nil {
		t.Fatalf("ForceRelease: %v", err)
	}
	if n, err := st.Enqueue(ctx, name, "restricted", 10*time.Second); err != nil || n != 0 {
		t.Fatalf("Enqueue: %d, %v", n, err)
	}
	// A watch after the handle's first Enqueue also wakes when a place
	// ahead leaves.
	if _, err := admin.Enqueue(ctx, name, "ahead", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if n, err := st.Enqueue(ctx, name, "behind", 10*time.Second); err != nil || n != 2 {
		t.Fatalf("Enqueue behind two: %d, %v", n, err)
	}
	ch, err = st.Watch(ctx, name)
	if err != nil {
		t.Fatalf("Watch with the queue open: %v", err)
	}
	if err := admin.Dequeue(ctx, name, "ahead"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("the watch did not wake when a place ahead left")
	}
	for _, h := range []string{"restricted", "behind"} {
		if err := st.Dequeue(ctx, name, h); err != nil {
			t.Fatalf("Dequeue: %v", err)
		}
	}
}

// TestLeastPermissions: a user allowed only the subjects the README lists
// can do everything with an existing bucket, the queue included; without each of the ones that
// matter, the operation that needs it fails.
func TestLeastPermissions(t *testing.T) {
	bucket := uniqueBucket("perm")
	pub, sub := leastPermissions(bucket)
	users := []*server.User{{Username: "admin", Password: "admin-pw"}}
	add := func(name string, pub []string) {
		users = append(users, &server.User{Username: name, Password: name + "-pw", Permissions: &server.Permissions{
			Publish: &server.SubjectPermission{Allow: pub}, Subscribe: &server.SubjectPermission{Allow: sub},
		}})
	}
	add("lh", pub)
	queue := QueueBucket(bucket)
	broken := map[string]string{
		"no-kv":             "$KV." + bucket + ".>",
		"no-msgget":         "$JS.API.STREAM.MSG.GET.KV_" + bucket,
		"no-info":           "$JS.API.STREAM.INFO.KV_" + bucket,
		"no-consumer":       "$JS.API.CONSUMER.CREATE.KV_" + bucket + ".>",
		"no-queue-kv":       "$KV." + queue + ".>",
		"no-queue-info":     "$JS.API.STREAM.INFO.KV_" + queue,
		"no-queue-consumer": "$JS.API.CONSUMER.CREATE.KV_" + queue + ".>",
		"no-queue-direct":   "$JS.API.DIRECT.GET.KV_" + queue,
		"no-queue-purge":    "$JS.API.STREAM.PURGE.KV_" + queue,
	}
	for user, perm := range broken {
		add(user, without(pub, perm))
	}
	srv := startServer(t, func(o *server.Options) { o.Users = users })
	port := srv.opts.Port
	admin := openStoreURL(t, fmt.Sprintf("nats://admin:admin-pw@127.0.0.1:%d/%s", port, bucket)) // makes the bucket
	// The admin's first queue call makes the fair queues' bucket.
	if _, err := admin.Enqueue(testCtx(t, 10*time.Second), "setup", "admin", time.Second); err != nil {
		t.Fatal(err)
	}
	exercise(t, fmt.Sprintf("nats://lh:lh-pw@127.0.0.1:%d/%s", port, bucket), admin)

	// The restricted user cannot make a bucket (and says so at Open).
	u, _ := url.Parse(fmt.Sprintf("nats://lh:lh-pw@127.0.0.1:%d/%s?connect_timeout=2s", port, uniqueBucket("other")))
	if st, err := OpenURL(testCtx(t, 3*time.Second), u); err == nil {
		st.Close()
		t.Error("the restricted user opened (made) a bucket it has no permission on")
	}

	// Negative controls: each permission taken away breaks what needs it.
	for user, perm := range broken {
		t.Run(user, func(t *testing.T) {
			ctx := testCtx(t, 3*time.Second)
			u, _ := url.Parse(fmt.Sprintf("nats://%s:%s-pw@127.0.0.1:%d/%s?connect_timeout=2s", user, user, port, bucket))
			sti, err := OpenURL(ctx, u)
			if err != nil {
				if user == "no-info" && strings.Contains(err.Error(), "Permissions Violation") {
					t.Logf("without %s: %v", perm, err)
					return // Open reads the bucket's info
				}
				t.Fatalf("open: %v", err)
			}
			defer sti.Close()
			if user == "no-info" {
				t.Fatalf("Open without %s succeeded", perm)
			}
			st := sti.(*Store)
			name := "perm/" + randHex(3)
			_, err = st.Acquire(ctx, name, "x", 5*time.Second, "")
			switch user {
			case "no-consumer":
				if err != nil {
					t.Fatalf("Acquire: %v", err)
				}
				_, err = st.Watch(ctx, name)
			case "no-queue-kv", "no-queue-info", "no-queue-direct": // the queue's open, its writes, its listings
				if err != nil {
					t.Fatalf("Acquire: %v", err)
				}
				_, err = st.Enqueue(ctx, name, "x", 5*time.Second)
			case "no-queue-consumer": // a watch with the queue open
				if err != nil {
					t.Fatalf("Acquire: %v", err)
				}
				if _, err = st.Enqueue(ctx, name, "x", 5*time.Second); err != nil {
					t.Fatalf("Enqueue: %v", err)
				}
				_, err = st.Watch(ctx, name)
			case "no-queue-purge": // the queue's Dequeue needs it
				if err != nil {
					t.Fatalf("Acquire: %v", err)
				}
				if _, err = st.Enqueue(ctx, name, "x", 5*time.Second); err != nil {
					t.Fatalf("Enqueue: %v", err)
				}
				err = st.Dequeue(ctx, name, "x")
			}
			if err == nil {
				t.Fatalf("without %s every operation succeeded: the permission is not needed", perm)
			}
			if !strings.Contains(err.Error(), "Permissions Violation") {
				t.Errorf("the error does not name the violation: %v", err)
			}
			t.Logf("without %s: %v", perm, err)
		})
	}
}

func openStoreURL(t *testing.T, raw string) *Store {
	t.Helper()
	u, _ := url.Parse(raw)
	st, err := OpenURL(testCtx(t, 20*time.Second), u)
	if err != nil {
		t.Fatalf("open %s: %v", store.RedactURL(u), err)
	}
	t.Cleanup(func() { st.Close() })
	return st.(*Store)
}

// TestCredentials: a token (URL and file), an NKey seed file, a
// credentials file (operator mode: a user JWT and seed), and TLS with a
// private CA (ca_file). Each with a negative control: the wrong secret is
// refused.
func TestCredentials(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	refused := func(t *testing.T, raw string) {
		t.Helper()
		u, _ := url.Parse(raw)
		st, err := OpenURL(testCtx(t, 5*time.Second), u)
		if err == nil {
			st.Close()
			t.Fatalf("%s: opened with the wrong credentials", store.RedactURL(u))
		}
		if strings.Contains(err.Error(), "wrong-token") {
			t.Errorf("the error shows the token: %v", err)
		}
	}

	t.Run("token", func(t *testing.T) {
		srv := startServer(t, func(o *server.Options) { o.Authorization = "s3cret-token" })
		b := uniqueBucket("token")
		admin := openStoreURL(t, fmt.Sprintf("nats://127.0.0.1:%d/%s?token=s3cret-token", srv.opts.Port, b))
		exercise(t, fmt.Sprintf("nats://127.0.0.1:%d/%s?token_file=%s", srv.opts.Port, b, write("token", []byte("s3cret-token\n"))), admin)
		refused(t, fmt.Sprintf("nats://127.0.0.1:%d/%s?token=wrong-token&connect_timeout=2s", srv.opts.Port, b))
	})

	t.Run("nkey", func(t *testing.T) {
		kp, _ := nkeys.CreateUser()
		pubKey, _ := kp.PublicKey()
		seed, _ := kp.Seed()
		srv := startServer(t, func(o *server.Options) { o.Nkeys = []*server.NkeyUser{{Nkey: pubKey}} })
		b := uniqueBucket("nkey")
		raw := fmt.Sprintf("nats://127.0.0.1:%d/%s?nkey_file=%s", srv.opts.Port, b, write("user.nk", seed))
		exercise(t, raw, openStoreURL(t, raw))
		other, _ := nkeys.CreateUser()
		otherSeed, _ := other.Seed()
		refused(t, fmt.Sprintf("nats://127.0.0.1:%d/%s?nkey_file=%s&connect_timeout=2s", srv.opts.Port, b, write("other.nk", otherSeed)))
	})

	t.Run("creds", func(t *testing.T) {
		okp, _ := nkeys.CreateOperator()
		opub, _ := okp.PublicKey()
		oc := jwt.NewOperatorClaims(opub)
		if _, err := oc.Encode(okp); err != nil {
			t.Fatal(err)
		}
		akp, _ := nkeys.CreateAccount()
		apub, _ := akp.PublicKey()
		ac := jwt.NewAccountClaims(apub)
		ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1, MaxAckPending: -1, MemoryMaxStreamBytes: -1, DiskMaxStreamBytes: -1}
		ajwt, err := ac.Encode(okp)
		if err != nil {
			t.Fatal(err)
		}
		creds := func(signer nkeys.KeyPair) []byte {
			ukp, _ := nkeys.CreateUser()
			upub, _ := ukp.PublicKey()
			useed, _ := ukp.Seed()
			ujwt, err := jwt.NewUserClaims(upub).Encode(signer)
			if err != nil {
				t.Fatal(err)
			}
			c, err := jwt.FormatUserConfig(ujwt, useed)
			if err != nil {
				t.Fatal(err)
			}
			return c
		}
		skp, _ := nkeys.CreateAccount() // the system account operator mode needs
		spub, _ := skp.PublicKey()
		sjwt, err := jwt.NewAccountClaims(spub).Encode(okp)
		if err != nil {
			t.Fatal(err)
		}
		resolver := &server.MemAccResolver{}
		resolver.Store(apub, ajwt)
		resolver.Store(spub, sjwt)
		srv := startServer(t, func(o *server.Options) {
			o.TrustedOperators = []*jwt.OperatorClaims{oc}
			o.AccountResolver = resolver
			o.SystemAccount = spub
		})
		b := uniqueBucket("creds")
		raw := fmt.Sprintf("nats://127.0.0.1:%d/%s?creds_file=%s", srv.opts.Port, b, write("user.creds", creds(akp)))
		exercise(t, raw, openStoreURL(t, raw))
		stranger, _ := nkeys.CreateAccount() // an account the server does not know
		refused(t, fmt.Sprintf("nats://127.0.0.1:%d/%s?creds_file=%s&connect_timeout=2s", srv.opts.Port, b, write("stranger.creds", creds(stranger))))
	})

	t.Run("tls", func(t *testing.T) {
		caFile, serverCert := testCA(t, dir)
		srv := startServer(t, func(o *server.Options) {
			o.TLSConfig = &tls.Config{Certificates: []tls.Certificate{serverCert}, MinVersion: tls.VersionTLS12}
			o.TLS = true
			o.TLSTimeout = 5
		})
		b := uniqueBucket("tls")
		raw := fmt.Sprintf("nats://127.0.0.1:%d/%s?ca_file=%s", srv.opts.Port, b, caFile)
		exercise(t, raw, openStoreURL(t, raw))
		// Without the CA the system roots do not know the server's certificate.
		refused(t, fmt.Sprintf("nats://127.0.0.1:%d/%s?tls=true&connect_timeout=2s", srv.opts.Port, b))
	})
}

// testCA writes a CA made for the test and returns its file and a server
// certificate for 127.0.0.1 signed by it.
func testCA(t *testing.T, dir string) (string, tls.Certificate) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "leasehold nats test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return caFile, tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}
