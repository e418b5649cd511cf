package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/registry"
)

// loopbackListener accepts connections on 127.0.0.1 and closes them at
// once, counting them: proof that an opener dialled the URL's host.
func loopbackListener(t *testing.T) (addr string, conns *atomic.Int64) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	conns = new(atomic.Int64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			c.Close()
		}
	}()
	t.Cleanup(func() { l.Close(); <-done })
	return l.Addr().String(), conns
}

// registryURL is a store URL of scheme for d that stays on this host: the
// descriptor's example, with a network store's host replaced by a listener of
// the test's own, a local store's file put in a temporary directory, and a
// Kubernetes-style store pointed at a kubeconfig naming a loopback server.
// check is then run after the store was opened, or refused.
func registryURL(t *testing.T, d *store.Descriptor, scheme string) (raw string, check func(t *testing.T)) {
	t.Helper()
	u, err := url.Parse(d.ExampleURL)
	if err != nil {
		t.Fatalf("%s: example URL %q: %v", d.Name, d.ExampleURL, err)
	}
	u.Scheme = scheme
	switch d.Reach {
	case store.ReachNetwork:
		addr, conns := loopbackListener(t)
		u.Host = addr
		return u.String(), func(t *testing.T) {
			if conns.Load() == 0 {
				t.Errorf("%s: nothing dialled %s: the URL did not reach the store's opener", u.Redacted(), addr)
			}
		}
	case store.ReachLocal:
		path := filepath.Join(t.TempDir(), "leases.db")
		u.Path = path
		return u.String(), func(t *testing.T) {
			if _, err := os.Stat(path); err != nil {
				t.Errorf("%s: the store's opener created no file: %v", u, err)
			}
		}
	case store.ReachAPI:
		addr, _ := loopbackListener(t)
		kc := filepath.Join(t.TempDir(), "kubeconfig")
		cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://%s", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: test}}]
contexts: [{name: x, context: {cluster: c, user: u, namespace: default}}]
current-context: x
`, addr)
		if err := os.WriteFile(kc, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		q := u.Query()
		q.Set("kubeconfig", kc)
		u.RawQuery = q.Encode()
		return u.String(), func(*testing.T) {}
	}
	t.Fatalf("%s: reach %d", d.Name, d.Reach)
	return "", nil
}

// TestRegistryOpensThroughCLI: every scheme of the registry is known to the
// command's --store: it reaches its store's opener, which opens the store or
// refuses it as a store error (exit 69), never as an unknown scheme. A store
// added to the registry is covered without a line here.
func TestRegistryOpensThroughCLI(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "") // a kubeconfig, not the pod's account
	for _, d := range registry.All() {
		for _, scheme := range d.Schemes {
			t.Run(scheme, func(t *testing.T) {
				raw, check := registryURL(t, d, scheme)
				var out, errb bytes.Buffer
				env := testEnv(&out, &errb, nil)
				start := time.Now()
				st, err := (&storeFlag{raw: raw, timeout: 2 * time.Second}).open(context.Background(), env)
				var se *StoreError
				switch {
				case err == nil:
					st.Close()
				case errors.As(err, &se):
					t.Logf("%s refused after %v: %v", scheme, time.Since(start).Round(time.Millisecond), err)
				default:
					t.Fatalf("%s: %v; want the store opened, or a StoreError from its opener", raw, err)
				}
				check(t)
			})
		}
	}
}

// TestRegistryAcceptedByVerify: verify's URL parsing accepts every scheme of
// the registry (--plan parses and schedules without running), or refuses it
// for a reason that names what to do: a store whose server the URL does not
// locate needs --allow-remote.
func TestRegistryAcceptedByVerify(t *testing.T) {
	for _, d := range registry.All() {
		for _, scheme := range d.Schemes {
			t.Run(scheme, func(t *testing.T) {
				raw, _ := registryURL(t, d, scheme)
				run := func(extra ...string) (int, string) {
					var out, errb bytes.Buffer
					code := Main(context.Background(), append([]string{"verify", "--plan", "--seed", "7", "--store", raw}, extra...), nil, &out, &errb)
					return code, out.String() + errb.String()
				}
				code, msg := run()
				if d.Reach == store.ReachAPI {
					if code != ExitUsage || !strings.Contains(msg, "--allow-remote") {
						t.Errorf("verify --plan --store %s: exit %d, %q; want a usage error naming --allow-remote", raw, code, msg)
					}
					code, msg = run("--allow-remote")
				}
				if code != ExitOK || !strings.Contains(msg, "fault schedule of seed 7") {
					t.Errorf("verify --plan --store %s: exit %d, %q; want the schedule", raw, code, msg)
				}
			})
		}
	}
}

// The negative control: a scheme no store registered is refused by both.
func TestUnregisteredSchemeRefused(t *testing.T) {
	var out, errb bytes.Buffer
	_, err := (&storeFlag{raw: "consul://127.0.0.1:8500/x"}).open(context.Background(), testEnv(&out, &errb, nil))
	var ue *UsageError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), `unknown store scheme "consul"`) {
		t.Errorf("--store consul://: %v; want a usage error naming the scheme", err)
	}
	code := Main(context.Background(), []string{"verify", "--plan", "--store", "consul://127.0.0.1:8500/x"}, nil, &out, &errb)
	if code != ExitUsage || !strings.Contains(errb.String(), "cannot run against consul://") {
		t.Errorf("verify --store consul://: exit %d, %q; want a usage error naming the scheme", code, errb.String())
	}
}
