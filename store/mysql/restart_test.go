package mysql_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/faultproxy"
	lhmysql "github.com/leasehold/leasehold/store/mysql"
)

// TestServerRestartMidLease holds a lock through a TCP proxy and cuts it as
// a server restart would: every connection reset, new ones refused. The
// holder must stop trusting its term (its context cancelled at safeUntil)
// while the server, read directly, still shows the term live, that is
// before any rival could take over; and it must get the lock again, with a
// higher token, once connections go through.
func TestServerRestartMidLease(t *testing.T) {
	db := migrated(t)
	cfg := dbConfig(t, db)
	px, err := faultproxy.New(cfg.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	cfg.Addr = px.Addr()
	cfg.Timeout, cfg.ReadTimeout, cfg.WriteTimeout = time.Second, 2*time.Second, 2*time.Second
	st, err := lhmysql.Open(ctxFor(t), cfg, lhmysql.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	direct := openStore(t, db, lhmysql.Options{})
	timings := leasehold.Timings{LeaseDuration: 5 * time.Second, RenewDeadline: 2 * time.Second, RenewInterval: 500 * time.Millisecond, RetryPeriod: 300 * time.Millisecond}
	lk, err := leasehold.NewLock(st, "job", leasehold.Config{Identity: "node-a", Timings: timings, KeepAlive: true})
	if err != nil {
		t.Fatal(err)
	}
	h, err := lk.Acquire(ctxFor(t))
	if err != nil {
		t.Fatal(err)
	}
	px.Refuse(true)
	px.Reset()
	select {
	case <-h.Context().Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the holder kept trusting its term with the server unreachable")
	}
	g, err := direct.Get(ctxFor(t), "job")
	if err != nil {
		t.Fatal(err)
	}
	if g.Term != h.Term() || !g.Live() {
		t.Fatalf("when the holder stopped, the server showed %+v: the term %v must still be live then (the holder stops before a rival can take over)", g, h.Term())
	}
	px.Heal()
	rctx, cancel := context.WithTimeout(ctxFor(t), 30*time.Second)
	defer cancel()
	h2, err := lk.Acquire(rctx)
	if err != nil {
		t.Fatalf("Acquire after the restart: %v", err)
	}
	if h2.Token() <= h.Token() {
		t.Fatalf("token after the restart %d, not above %d", h2.Token(), h.Token())
	}
	h2.Release(ctxFor(t))
	h.Release(ctxFor(t))
}
