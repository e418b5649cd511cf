package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/store/zookeeper/zktest"
)

// The package's tests share one standalone server, started on first use
// and killed when they end; the ensemble tests start their own.
var (
	sharedOnce sync.Once
	sharedSrv  *zktest.Server
	sharedErr  error
	sharedDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if sharedSrv != nil {
		sharedSrv.Kill()
	}
	if sharedDir != "" {
		os.RemoveAll(sharedDir)
	}
	os.Exit(code)
}

// shared returns the package's standalone server (tick 100 ms: sessions
// from 200 ms to 2 minutes).
func shared(t testing.TB) *zktest.Server {
	t.Helper()
	sharedOnce.Do(func() {
		sharedDir, sharedErr = os.MkdirTemp("", "leasehold-zk-test-")
		if sharedErr == nil {
			sharedSrv, sharedErr = zktest.StartServer(zktest.Options{Dir: sharedDir})
		}
		if sharedErr == nil {
			// The tests' roots live under /lh-test, open to all: a store
			// creates the paths above its root with its own ACL, and the
			// first test there must not lock the others out.
			sharedErr = createOpen(sharedSrv.Addr(), "/lh-test")
		}
	})
	if errors.Is(sharedErr, zktest.ErrNotInstalled) {
		testenv.Missing(t, "ZooKeeper", zktest.HowToInstall+" ("+sharedErr.Error()+")")
	}
	if sharedErr != nil {
		t.Fatal(sharedErr)
	}
	return sharedSrv
}

// createOpen creates path p, open to anyone, on the server at addr.
func createOpen(addr, p string) error {
	c, events, err := zk.Connect([]string{addr}, 10*time.Second, zk.WithLogInfo(false), zk.WithLogger(nopLogger{}))
	if err != nil {
		return err
	}
	defer c.Close()
	go drain(events)
	if _, err := c.Create(p, nil, zk.FlagPersistent, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
		return fmt.Errorf("create %s: %w", p, err)
	}
	return nil
}

var rootSeq atomic.Int64

// uniqueRoot is a root path no other test uses.
func uniqueRoot(what string) string {
	return fmt.Sprintf("/lh-test/%s-%d-%d", what, os.Getpid(), rootSeq.Add(1))
}

func testCtx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// openStore opens a store on servers (the shared server when none is given)
// under root, closed when t ends.
func openStore(t testing.TB, root string, servers ...string) *Store {
	t.Helper()
	if len(servers) == 0 {
		servers = []string{shared(t).Addr()}
	}
	st, err := Open(testCtx(t, 20*time.Second), Config{Servers: servers, Root: root})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// rawConn is a plain go-zookeeper/zk client of servers, closed when t ends.
func rawConn(t testing.TB, servers ...string) *zk.Conn {
	t.Helper()
	if len(servers) == 0 {
		servers = []string{shared(t).Addr()}
	}
	c, events, err := zk.Connect(servers, 10*time.Second, zk.WithLogInfo(false), zk.WithLogger(nopLogger{}))
	if err != nil {
		t.Fatal(err)
	}
	go drain(events)
	t.Cleanup(c.Close)
	deadline := time.Now().Add(20 * time.Second)
	for c.State() != zk.StateHasSession {
		if time.Now().After(deadline) {
			t.Fatalf("no session with %v within 20s", servers)
		}
		time.Sleep(10 * time.Millisecond) // polling the client's state
	}
	return c
}

// deleteTree deletes p and everything under it.
func deleteTree(c *zk.Conn, p string) error {
	kids, _, err := c.Children(p)
	if errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, k := range kids {
		if err := deleteTree(c, strings.TrimSuffix(p, "/")+"/"+k); err != nil {
			return err
		}
	}
	err = c.Delete(p, -1)
	if errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	return err
}

// ageProofs moves back the last proof of life of each of st's term
// sessions, as if it had been sent ttl ago.
func ageProofs(st *Store, ttl time.Duration) {
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, sess := range st.pool {
		sess.proven = time.Now().Add(-ttl)
	}
}
