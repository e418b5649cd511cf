package zookeeper

import (
	"errors"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/zookeeper/zktest"
)

// TestTermNodeFence: a multi that checks the term's node applies while the
// term holds, and is refused once it ended, even if the same holder holds
// again (a newer term: another node).
func TestTermNodeFence(t *testing.T) {
	root := uniqueRoot("fence")
	st := openStore(t, root)
	conn := rawConn(t)
	ctx := testCtx(t, 20*time.Second)
	if err := ensurePathRaw(conn, root+"/config", zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	held, err := st.Acquire(ctx, "job", "a", 10*time.Second, "")
	if err != nil {
		t.Fatal(err)
	}
	node, err := st.TermNode(ctx, held.Term)
	if err != nil {
		t.Fatal(err)
	}
	write := func(v string) error {
		_, err := conn.Multi(&zk.CheckVersionRequest{Path: node, Version: 0},
			&zk.SetDataRequest{Path: root + "/config", Data: []byte(v), Version: -1})
		return err
	}
	if err := write("by the live term"); err != nil {
		t.Fatalf("fenced write while the term holds: %v", err)
	}
	if err := st.Release(ctx, held.Term); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Acquire(ctx, "job", "a", 10*time.Second, ""); err != nil {
		t.Fatal(err)
	}
	if err := write("by the old term"); !errors.Is(err, zk.ErrNoNode) {
		t.Fatalf("fenced write of an ended term: %v, want zk.ErrNoNode", err)
	}
	if v, _, _ := conn.Get(root + "/config"); string(v) != "by the live term" {
		t.Fatalf("config = %q: the ended term's write applied", v)
	}
	if _, err := st.TermNode(ctx, held.Term); !errors.Is(err, store.ErrNotHeld) {
		t.Fatalf("TermNode of an ended term: %v, want ErrNotHeld", err)
	}
}

// TestRestartKeepsTokens: the ensemble's zxids, and so the tokens, survive
// a restart of the server (its data directory kept): the next grant's token
// is above every one before. (An ensemble also starts a new epoch, the
// zxid's upper 32 bits, at each leader election: TestEnsembleLeaderKilled.)
func TestRestartKeepsTokens(t *testing.T) {
	if testing.Short() {
		t.Skip("restarts a server")
	}
	srv := zktest.Standalone(t, zktest.Options{})
	root := "/restart"
	st, err := Open(testCtx(t, 20*time.Second), Config{Servers: []string{srv.Addr()}, Root: root})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t, 60*time.Second)
	var last int64
	for i := 0; i < 3; i++ {
		r, err := st.Acquire(ctx, "job", "a", 2*time.Second, "")
		if err != nil {
			t.Fatal(err)
		}
		last = r.Token
		if err := st.Release(ctx, r.Term); err != nil {
			t.Fatal(err)
		}
	}
	st.Close()
	srv.Kill()
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	if err := srv.WaitServing(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	st2 := openStore(t, root, srv.Addr())
	g, err := st2.Get(ctx, "job")
	if err != nil || g.Live() || g.Token != last {
		t.Fatalf("Get after the restart = %+v, %v; want free, with the last token %d", g, err, last)
	}
	r, err := st2.Acquire(ctx, "job", "b", 2*time.Second, "")
	if err != nil {
		t.Fatal(err)
	}
	if r.Token <= last {
		t.Fatalf("token after the restart %#x, want above %#x", r.Token, last)
	}
}
