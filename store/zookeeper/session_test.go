package zookeeper

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/faultproxy"
	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/storetest"
)

// proxied starts a fault proxy in front of the shared server, closed when t
// ends.
func proxied(t *testing.T) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.New(shared(t).Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// TestLimitsProbed: Open learns the shortest session the server grants
// (two ticks of the test server's 100 ms), and the resolution is a tick; the
// core refuses timings whose margin is not above it.
func TestLimitsProbed(t *testing.T) {
	st := openStore(t, uniqueRoot("limits"))
	lim := st.Limits()
	if lim.MinLeaseDuration != 200*time.Millisecond || lim.TimeResolution != 100*time.Millisecond {
		t.Fatalf("Limits() = %+v, want MinLeaseDuration 200ms (2 ticks) and TimeResolution 100ms (a tick)", lim)
	}
	if st.maxSession != 2*time.Minute {
		t.Fatalf("probed maxSessionTimeout %v, want the test server's 2m", st.maxSession)
	}
	tight := leasehold.Timings{LeaseDuration: time.Second, RenewDeadline: 950 * time.Millisecond, RenewInterval: 300 * time.Millisecond}
	if err := tight.ValidateFor(st); !errors.Is(err, leasehold.ErrInvalidConfig) || !strings.Contains(err.Error(), "resolution") {
		t.Fatalf("timings with a 50ms margin on a 100ms tick: %v, want refused for the store's time resolution", err)
	}
	ok := leasehold.Timings{LeaseDuration: time.Second, RenewDeadline: 800 * time.Millisecond, RenewInterval: 300 * time.Millisecond}
	if err := ok.ValidateFor(st); err != nil {
		t.Fatalf("timings with a 200ms margin: %v", err)
	}
}

// TestTTLBounds: a ttl outside the sessions the ensemble grants is refused
// with the server setting named.
func TestTTLBounds(t *testing.T) {
	st := openStore(t, uniqueRoot("ttl"))
	ctx := testCtx(t, 20*time.Second)
	_, err := st.Acquire(ctx, "job", "a", 100*time.Millisecond, "")
	if !errors.Is(err, store.ErrInvalid) || !strings.Contains(err.Error(), "minSessionTimeout") {
		t.Fatalf("Acquire with a ttl below the shortest session: %v, want ErrInvalid naming minSessionTimeout", err)
	}
	_, err = st.Acquire(ctx, "job", "a", 3*time.Minute, "")
	if !errors.Is(err, store.ErrInvalid) || !strings.Contains(err.Error(), "maxSessionTimeout") {
		t.Fatalf("Acquire with a ttl above the longest session: %v, want ErrInvalid naming maxSessionTimeout", err)
	}
	if _, err := st.Get(ctx, "job"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("after refused acquires Get: %v, want ErrNotFound", err)
	}
	// One session per ttl: terms of different ttls live in different sessions.
	a, err := st.Acquire(ctx, "a", "h", time.Second, "")
	if err != nil {
		t.Fatal(err)
	}
	b, err := st.Acquire(ctx, "b", "h", 2*time.Second, "")
	if err != nil {
		t.Fatal(err)
	}
	st.mu.Lock()
	ea, eb := st.byTerm[a.Term], st.byTerm[b.Term]
	st.mu.Unlock()
	if ea.sess == eb.sess || ea.sess.d.timeout() != time.Second || eb.sess.d.timeout() != 2*time.Second {
		t.Fatalf("sessions: %v (%v) and %v (%v); want two, of 1s and 2s", ea.sess.conn.SessionID(), ea.sess.d.timeout(), eb.sess.conn.SessionID(), eb.sess.d.timeout())
	}
}

// TestSessionExpiresWhileHolding: the holder's connection goes silent (a
// partition between it and the server). Its renewals fail; it stops
// trusting its term at its own deadline; ZooKeeper expires the session no
// earlier than a session timeout after the holder's last renewal was sent,
// and only then does the rival lead, with a higher token. After the
// partition heals, the old term's renewal is refused: the session expired.
func TestSessionExpiresWhileHolding(t *testing.T) {
	root := uniqueRoot("expire")
	px := proxied(t)
	hst := openStore(t, root, px.Addr())
	rst := openStore(t, root)
	l := storetest.NewLedger(t)
	h := startElector(t, l, "h", hst)
	storetest.WaitFor(t, 20*time.Second, "h leads", func() bool { who, _ := l.Leading(); return who != "" })
	hWho, hTok := l.Leading()
	storetest.WaitFor(t, 10*time.Second, "h renews", func() bool { return h.Renewals() >= 2 })
	startElector(t, l, "r", rst)
	l.Note("cutting the holder off from the server")
	cut := time.Now()
	px.Blackhole()
	storetest.WaitFor(t, 30*time.Second, "the rival leads", func() bool {
		who, _ := l.Leading()
		return strings.HasPrefix(who, "r-")
	})
	took := time.Since(cut)
	rWho, rTok := l.Leading()
	l.Note("%s leads with token %d, %v after the cut", rWho, rTok, took)
	if rTok <= hTok {
		t.Fatalf("rival token %d not above the cut-off holder's %d", rTok, hTok)
	}
	// The rival can lead only once the session expired: at least a session
	// timeout (3s) after the holder's last touch, which was before the cut.
	if took < 2*time.Second {
		t.Fatalf("the rival led %v after the cut: sooner than the holder could have stopped trusting", took)
	}
	px.Heal()
	old := store.Term{Name: "leader", Holder: hWho, Token: hTok}
	storetest.WaitFor(t, 30*time.Second, "the old term's renewal is refused after healing", func() bool {
		_, err := hst.Renew(testCtx(t, 3*time.Second), old, 3*time.Second)
		return errors.Is(err, store.ErrNotHeld)
	})
}

// TestCloseSevers: Close does not release: the closed handle's term stays
// live until ZooKeeper expires its session, and then ends.
func TestCloseSevers(t *testing.T) {
	root := uniqueRoot("close")
	a, err := Open(testCtx(t, 20*time.Second), Config{Servers: []string{shared(t).Addr()}, Root: root})
	if err != nil {
		t.Fatal(err)
	}
	b := openStore(t, root)
	ctx := testCtx(t, 30*time.Second)
	held, err := a.Acquire(ctx, "job", "a", time.Second, "")
	if err != nil {
		t.Fatal(err)
	}
	closed := time.Now()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if r, err := b.Get(ctx, "job"); err != nil || r.Term != held.Term || !r.Live() {
		t.Fatalf("right after Close, Get = %+v, %v; want the closed handle's term live", r, err)
	}
	waitFor(t, 20*time.Second, "the term ends once its session expires", func() bool {
		r, err := b.Get(ctx, "job")
		return err == nil && !r.Live()
	})
	if gone := time.Since(closed); gone < 900*time.Millisecond {
		t.Fatalf("the term ended %v after Close, before its session could expire (1s)", gone)
	}
	next, err := b.Acquire(ctx, "job", "b", time.Second, "")
	if err != nil || next.Token <= held.Token {
		t.Fatalf("Acquire after the expiry: %+v, %v; want a token above %d", next, err, held.Token)
	}
}

// TestDeadlineEndsTerm: a holder whose process lives on but stops renewing
// (its client keeps the session alive) loses its term at its deadline: the
// handle deletes the node itself.
func TestDeadlineEndsTerm(t *testing.T) {
	root := uniqueRoot("deadline")
	a := openStore(t, root)
	b := openStore(t, root)
	ctx := testCtx(t, 30*time.Second)
	sent := time.Now()
	held, err := a.Acquire(ctx, "job", "a", 500*time.Millisecond, "")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the term ends at its deadline", func() bool {
		r, err := b.Get(ctx, "job")
		return err == nil && !r.Live()
	})
	if d := time.Since(sent); d < 500*time.Millisecond {
		t.Fatalf("the term ended %v after it was acquired, before its ttl", d)
	}
	if a.ctl.conn.State() == 0 {
		t.Fatal("the holder's client is disconnected: this test is about a live client")
	}
	if _, err := a.Renew(ctx, held.Term, 500*time.Millisecond); !errors.Is(err, store.ErrNotHeld) {
		t.Fatalf("Renew after the deadline: %v, want ErrNotHeld", err)
	}
}

// TestUnknownOutcomeCleaned: an acquire whose answer is lost (the
// connection goes silent after the request left) may create its node late.
// The handle retires the session, deletes the node at the attempt's
// deadline, and closes the session once it carries nothing: no node of the
// attempt outlives it, and the lease is free again.
func TestUnknownOutcomeCleaned(t *testing.T) {
	root := uniqueRoot("unknown")
	px := proxied(t)
	st := openStore(t, root, px.Addr())
	watcher := openStore(t, root)
	conn := rawConn(t)
	ctx := testCtx(t, 30*time.Second)
	// Open the term session first, so the request that is lost is the
	// create itself.
	warm, err := st.Acquire(ctx, "warm", "h", time.Second, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Release(ctx, warm.Term); err != nil {
		t.Fatal(err)
	}
	// The lease's path exists, so the acquire is one list and one multi.
	first, err := watcher.Acquire(ctx, "job", "w", time.Second, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := watcher.Release(ctx, first.Term); err != nil {
		t.Fatal(err)
	}
	// Cut the connection after the acquire's first look, before its create.
	testHookBeforeCreate = px.Blackhole
	defer func() { testHookBeforeCreate = nil }()
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = st.Acquire(short, "job", "h", time.Second, "")
	cancel()
	testHookBeforeCreate = nil
	if err == nil || errors.Is(err, store.ErrHeld) {
		t.Fatalf("Acquire through a silent connection: %v, want an error of unknown outcome", err)
	}
	attempted := time.Now()
	px.Heal()
	p := st.Path("job")
	seen := false
	waitFor(t, 20*time.Second, "no node of the lost attempt is left", func() bool {
		n := len(contenderNames(t, conn, p))
		seen = seen || n > 0
		return n == 0 && time.Since(attempted) > 1500*time.Millisecond
	})
	if !seen {
		t.Fatal("the lost attempt's node never appeared: the test did not lose a create's answer")
	}
	rec, err := watcher.Acquire(ctx, "job", "w", time.Second, "")
	if err != nil {
		t.Fatalf("the lease after the lost attempt: %+v, %v; want it free", rec, err)
	}
}
