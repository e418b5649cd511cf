package etcd

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/freeport"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// This file runs etcd's own server code inside the test process (package
// embed): no install, no network beyond loopback.

// member is one embedded etcd member.
type member struct {
	name      string
	cfg       *embed.Config
	etcd      *embed.Etcd
	clientURL string // http://127.0.0.1:port
	peerURL   string // the advertised peer URL (a proxy's, in a cluster with proxies)
	proxy     *peerProxy
	stopped   bool
}

// memberOpts are the knobs the tests turn.
type memberOpts struct {
	tickMs, electionMs uint
	fsync              bool
	tweak              func(*embed.Config)
}

func defaultOpts() memberOpts {
	// 100 ms ticks and a 600 ms election timeout make etcd's minimum lease
	// TTL 1 s (1.5 election timeouts, rounded up), so tests can use 1 s leases.
	return memberOpts{tickMs: 100, electionMs: 600}
}

func mustURL(t testing.TB, s string) url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return *u
}

func newMemberConfig(t testing.TB, name string, o memberOpts, clientPort, peerPort int, advertisePeer string) *embed.Config {
	cfg := embed.NewConfig()
	cfg.Name = name
	cfg.Dir = t.TempDir()
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cfg.TickMs = o.tickMs
	cfg.ElectionMs = o.electionMs
	cfg.UnsafeNoFsync = !o.fsync
	curl := mustURL(t, fmt.Sprintf("http://127.0.0.1:%d", clientPort))
	cfg.ListenClientUrls = []url.URL{curl}
	cfg.AdvertiseClientUrls = []url.URL{curl}
	cfg.ListenPeerUrls = []url.URL{mustURL(t, fmt.Sprintf("http://127.0.0.1:%d", peerPort))}
	cfg.AdvertisePeerUrls = []url.URL{mustURL(t, advertisePeer)}
	cfg.ListenMetricsUrls = nil
	if o.tweak != nil {
		o.tweak(cfg)
	}
	return cfg
}

// startMember starts a one-member cluster and waits until it serves.
func startMember(t testing.TB, o memberOpts) *member {
	t.Helper()
	cp, pp := freeport.ForTest(t), freeport.ForTest(t)
	peer := fmt.Sprintf("http://127.0.0.1:%d", pp)
	cfg := newMemberConfig(t, "solo", o, cp, pp, peer)
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	m := &member{name: cfg.Name, cfg: cfg, peerURL: peer}
	if cfg.ClientTLSInfo.Empty() {
		m.clientURL = fmt.Sprintf("http://127.0.0.1:%d", cp)
	} else {
		m.clientURL = fmt.Sprintf("https://127.0.0.1:%d", cp)
	}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatalf("start embedded etcd: %v", err)
	}
	m.etcd = e
	t.Cleanup(m.stop)
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		t.Fatalf("embedded etcd failed: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("embedded etcd not ready within 30s")
	}
	return m
}

func (m *member) stop() {
	if m.stopped {
		return
	}
	m.stopped = true
	m.etcd.Close()
}

// sharedMember is the one member most tests (and the examples) of this
// package share, each under its own key prefix; the first user starts it, and
// TestMain stops it. sharedMu guards it: parallel tests share it too.
var (
	sharedMu     sync.Mutex
	sharedMember *member
)

func shared(t testing.TB) *member {
	t.Helper()
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if sharedMember == nil {
		sharedMember = startMember(pkgTB{}, defaultOpts())
	}
	return sharedMember
}

// exampleEndpoint is the client URL of the shared embedded etcd, for the
// examples (as etcd's own examples call exampleEndpoints()).
func exampleEndpoint() string { return shared(pkgTB{}).clientURL }

// pkgTB is the testing.TB of things that live as long as the test binary:
// its temporary directories and cleanups are TestMain's, its failures panic.
type pkgTB struct{ testing.TB }

func (pkgTB) Helper()                        {}
func (pkgTB) Fatal(args ...any)              { panic(fmt.Sprint(args...)) }
func (pkgTB) Fatalf(format string, a ...any) { panic(fmt.Sprintf(format, a...)) }
func (pkgTB) Cleanup(f func())               { packageCleanups = append(packageCleanups, f) }
func (pkgTB) TempDir() string {
	d, err := os.MkdirTemp(packageDir, "member-")
	if err != nil {
		panic(err)
	}
	return d
}

var (
	packageDir      string
	packageCleanups []func()
)

// uniquePrefix returns a key prefix no other test uses.
func uniquePrefix(tag string) string {
	var b [6]byte
	rand.Read(b[:])
	return "t-" + tag + "-" + hex.EncodeToString(b[:]) + "/"
}

// client returns an etcd client on endpoints, closed when t ends.
func newClient(t testing.TB, endpoints ...string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// openStore opens a store on endpoints under prefix, closed when t ends.
func openStore(t testing.TB, prefix string, endpoints ...string) *Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	open := Open
	if testOnClientv3 {
		open = openV3
	}
	st, err := open(ctx, Config{Endpoints: endpoints, Prefix: prefix})
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func testCtx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
