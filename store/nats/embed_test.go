package nats

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/freeport"

	"github.com/nats-io/nats-server/v2/server"
	natsio "github.com/nats-io/nats.go"
)

// This file runs the NATS server's own code inside the test process
// (github.com/nats-io/nats-server/v2/server): a current server with
// JetStream on loopback, its store in a temporary directory.

// natsServer is one embedded server. restart stops it and starts a new one
// on the same port and JetStream directory: a real restart, as far as a
// client and the data on disk can tell.
type natsServer struct {
	t    testing.TB
	opts server.Options
	srv  *server.Server
}

// serverOptions are the options of a standalone JetStream server on a free
// loopback port with its store in dir.
func serverOptions(t testing.TB, dir string) server.Options {
	return server.Options{
		ServerName:         "lh-" + randHex(3),
		Host:               "127.0.0.1",
		Port:               freeport.ForTest(t),
		JetStream:          true,
		StoreDir:           dir,
		JetStreamMaxMemory: 256 << 20,
		JetStreamMaxStore:  1 << 30,
		NoLog:              true,
		NoSigs:             true,
		HTTPPort:           -1,
	}
}

// startServer starts a server with opts changed by tweak (may be nil).
func startServer(t testing.TB, tweak func(*server.Options)) *natsServer {
	t.Helper()
	n := &natsServer{t: t, opts: serverOptions(t, t.TempDir())}
	if tweak != nil {
		tweak(&n.opts)
	}
	if err := n.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.stop)
	return n
}

func (n *natsServer) start() error {
	opts := n.opts // the server keeps and changes its options
	srv, err := server.NewServer(&opts)
	if err != nil {
		return fmt.Errorf("new embedded NATS server: %w", err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(20 * time.Second) {
		srv.Shutdown()
		return fmt.Errorf("embedded NATS server %s not ready within 20s", n.opts.ServerName)
	}
	n.srv = srv
	return nil
}

func (n *natsServer) stop() {
	if n.srv != nil {
		n.srv.Shutdown()
		n.srv.WaitForShutdown()
		n.srv = nil
	}
}

// restart stops the server and starts it again on the same port and store.
func (n *natsServer) restart() {
	n.t.Helper()
	n.stop()
	if err := n.start(); err != nil {
		n.t.Fatalf("restart: %v", err)
	}
}

func (n *natsServer) url() string {
	return fmt.Sprintf("nats://127.0.0.1:%d", n.opts.Port)
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// uniqueBucket is a bucket name no other test uses.
func uniqueBucket(tag string) string {
	return "t-" + strings.ReplaceAll(tag, "/", "-") + "-" + randHex(4)
}

// sharedServer is the one server most tests of this package share, each
// with its own bucket; the first user starts it, TestMain stops it.
var sharedServer *natsServer

func shared(t testing.TB) *natsServer {
	t.Helper()
	if sharedServer == nil {
		dir, err := os.MkdirTemp(packageDir, "shared-")
		if err != nil {
			t.Fatal(err)
		}
		n := &natsServer{t: pkgTB{}, opts: serverOptions(t, dir)}
		if err := n.start(); err != nil {
			t.Fatal(err)
		}
		sharedServer = n
	}
	return sharedServer
}

// pkgTB is the testing.TB of what lives as long as the test binary.
type pkgTB struct{ testing.TB }

func (pkgTB) Helper()                        {}
func (pkgTB) Fatal(args ...any)              { panic(fmt.Sprint(args...)) }
func (pkgTB) Fatalf(format string, a ...any) { panic(fmt.Sprintf(format, a...)) }

var packageDir string

func testCtx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// openStore opens a store on bucket at url, closed when t ends.
func openStore(t testing.TB, url, bucket string) *Store {
	t.Helper()
	st, err := Open(testCtx(t, 20*time.Second), Config{Servers: []string{url}, Options: Options{Bucket: bucket}})
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// connect is a plain client connection, closed when t ends.
func connect(t testing.TB, url string, opts ...natsio.Option) *natsio.Conn {
	t.Helper()
	nc, err := natsio.Connect(url, append([]natsio.Option{natsio.MaxReconnects(-1), natsio.ReconnectWait(100 * time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	return nc
}
