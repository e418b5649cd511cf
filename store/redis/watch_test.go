package redis_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	lhredis "github.com/leasehold/leasehold/store/redis"
)

// recv waits up to 10s for a value or a close on ch, and reports which.
func recv(t *testing.T, ch <-chan struct{}, what string) (open bool) {
	t.Helper()
	timer := time.NewTimer(10 * time.Second)
	defer timer.Stop()
	select {
	case _, open = <-ch:
		return open
	case <-timer.C:
		t.Fatalf("nothing on the watch channel within 10s: %s", what)
		return false
	}
}

// TestWatchFanOut: many watches of one store share one subscription per
// channel on one connection; each wakes; one leaving does not end the
// others; Close ends every watch.
func TestWatchFanOut(t *testing.T) {
	addr := redisAddr(t)
	prefix := freshPrefix(t, addr)
	st := openStore(t, storeURL(addr, prefix))
	other := openStore(t, storeURL(addr, prefix))
	ctx := testCtx(t)
	c := admin(t, addr)
	channel := st.LockKey("job") + ":events"

	ctx1, cancel1 := context.WithCancel(ctx)
	w1, err := st.Watch(ctx1, "job")
	if err != nil {
		t.Fatal(err)
	}
	w2, err := st.Watch(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	if n := c.PubSubNumSub(ctx, channel).Val()[channel]; n != 1 {
		t.Errorf("PUBSUB NUMSUB %s = %d with two watches on one store, want 1 (one subscription)", channel, n)
	}
	grantRelease := func(holder string) {
		t.Helper()
		rec, err := other.Acquire(ctx, "job", holder, time.Minute, "")
		if err != nil {
			t.Fatal(err)
		}
		if err := other.Release(ctx, rec.Term); err != nil {
			t.Fatal(err)
		}
	}
	grantRelease("node-a")
	if !recv(t, w1, "release, watch 1") || !recv(t, w2, "release, watch 2") {
		t.Fatal("a watch channel closed instead of waking on a release")
	}

	cancel1()
	for recv(t, w1, "watch 1 after its context ended") {
	}
	grantRelease("node-b")
	if !recv(t, w2, "release, watch 2") {
		t.Fatal("watch 2 closed when watch 1 ended")
	}

	// A new watch joins the existing subscription.
	w3ctx, cancel3 := context.WithCancel(ctx)
	defer cancel3()
	w3, err := st.Watch(w3ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	grantRelease("node-c")
	if !recv(t, w3, "release, watch 3") {
		t.Fatal("watch 3 closed instead of waking")
	}

	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	for recv(t, w2, "watch 2 after Close") {
	}
	for recv(t, w3, "watch 3 after Close") {
	}
	if _, err := st.Watch(ctx, "job"); err == nil {
		t.Error("Watch after Close succeeded")
	}
}

// TestWatchResubscribe: when every watch of a channel has left, the store
// unsubscribes; a later watch subscribes again and is confirmed.
func TestWatchResubscribe(t *testing.T) {
	addr := redisAddr(t)
	prefix := freshPrefix(t, addr)
	st := openStore(t, storeURL(addr, prefix))
	other := openStore(t, storeURL(addr, prefix))
	ctx := testCtx(t)
	c := admin(t, addr)
	channel := st.LockKey("job") + ":events"
	for i := 0; i < 5; i++ {
		wctx, cancel := context.WithCancel(ctx)
		w, err := st.Watch(wctx, "job")
		if err != nil {
			t.Fatal(err)
		}
		rec, err := other.Acquire(ctx, "job", "node-a", time.Minute, "")
		if err != nil {
			t.Fatal(err)
		}
		if err := other.Release(ctx, rec.Term); err != nil {
			t.Fatal(err)
		}
		if !recv(t, w, "release") {
			t.Fatalf("round %d: watch closed instead of waking", i)
		}
		cancel()
		for recv(t, w, "watch after its context ended") {
		}
	}
	// After the last watch left, the subscription goes (polled: the
	// UNSUBSCRIBE is sent as the watch ends, and answered asynchronously).
	deadline := time.Now().Add(10 * time.Second)
	for c.PubSubNumSub(ctx, channel).Val()[channel] != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("still subscribed to %s 10s after the last watch ended", channel)
		}
		timer := time.NewTimer(10 * time.Millisecond)
		<-timer.C
	}
}

// TestWatchHealthCheck: a Redis that stops answering (SIGSTOP, as a
// partition that drops packets would look) ends the watch after about two
// health intervals, instead of leaving it open and deaf. A Redis that
// answers keeps an idle watch open through the pings.
func TestWatchHealthCheck(t *testing.T) {
	restore := lhredis.SetHealthInterval(100 * time.Millisecond)
	defer restore()
	srv := newRedisServer(t)
	st := openStore(t, storeURL(srv.Addr(), "lhtest:health:"))
	ctx := testCtx(t)
	w, err := st.Watch(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	// Idle through several intervals: pings are answered, the watch stays.
	idle := time.NewTimer(time.Second)
	select {
	case _, open := <-w:
		if !open {
			t.Fatal("an idle watch on a healthy Redis was closed")
		}
	case <-idle.C:
	}

	pid := srv.cmd.Process.Pid
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(pid, syscall.SIGCONT)
	for recv(t, w, "watch on a Redis that stopped answering") {
	}
}
