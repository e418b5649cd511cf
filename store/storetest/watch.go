package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/leasehold/leasehold/store"
)

func testWatch(s *suite) {
	a, b := s.store(), s.store()
	w, ok := b.(store.Watcher)
	if !ok {
		s.t.Skip("store has no Watcher capability; waiters poll")
	}
	ttl := s.longTTL()
	held := s.acquire(a, "job", "node-a", ttl)
	ctx, cancel := context.WithCancel(s.ctx())
	ch, err := w.Watch(ctx, "job")
	if err != nil {
		s.t.Fatalf("Watch: %v", err)
	}
	drain(ch)
	if err := a.Release(s.ctx(), held.Term); err != nil {
		s.t.Fatalf("Release: %v", err)
	}
	expectWake(s.t, ch, "release")
	// A grant may wake watchers too, but need not: a waiter has nothing to
	// do while the lease is held, and waking every waiter on every grant
	// doubles the herd under contention.
	cancel()
	timer := time.NewTimer(10 * time.Second)
	defer timer.Stop()
	for {
		select {
		case _, open := <-ch:
			if !open {
				return
			}
		case <-timer.C:
			s.t.Fatal("watch channel not closed after its context ended")
		}
	}
}

// A store.GrantWatcher that says its watch wakes on grants wakes it on the
// first grant of a name and on a grant after a release: a holder learns of a
// hand-over request (a grant) from that watch alone and reads nothing else.
func testWatchGrants(s *suite) {
	a, b := s.store(), s.store()
	gw, ok := b.(store.GrantWatcher)
	if !ok || !gw.WatchesGrants() {
		s.t.Skip("store's watch does not promise to wake on grants; holders read hand-over requests")
	}
	ttl := s.longTTL()
	ctx, cancel := context.WithCancel(s.ctx())
	defer cancel()
	ch, err := gw.Watch(ctx, "job")
	if err != nil {
		s.t.Fatalf("Watch: %v", err)
	}
	drain(ch)
	held := s.acquire(a, "job", "node-a", ttl)
	expectWake(s.t, ch, "the first grant of the name")
	if err := a.Release(s.ctx(), held.Term); err != nil {
		s.t.Fatalf("Release: %v", err)
	}
	expectWake(s.t, ch, "release")
	drain(ch)
	s.acquire(a, "job", "node-b", ttl)
	expectWake(s.t, ch, "a grant after a release")
}

// A Watch call returns, and its channel closes, soon after its context ends,
// whether the context ended before the call or while it was subscribed: the
// caller bounds a subscription by its context (and gives up on one that
// hangs after a retry period), and a store that ignores the context would
// leak a subscription for every give-up.
func testWatchHonoursContext(s *suite) {
	w, ok := s.store().(store.Watcher)
	if !ok {
		s.t.Skip("store has no Watcher capability; waiters poll")
	}
	s.acquire(s.store(), "job", "node-a", s.longTTL())
	closedWithin := func(ch <-chan struct{}, d time.Duration) bool {
		timer := time.NewTimer(d)
		defer timer.Stop()
		for {
			select {
			case _, open := <-ch:
				if !open {
					return true
				}
			case <-timer.C:
				return false
			}
		}
	}
	// Already cancelled: an error, or a channel that is closed at once.
	ctx, cancel := context.WithCancel(s.ctx())
	cancel()
	done := make(chan struct{})
	var ch <-chan struct{}
	var err error
	go func() { ch, err = w.Watch(ctx, "job"); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		s.t.Fatal("Watch with a cancelled context did not return within 10s")
	}
	if err == nil && !closedWithin(ch, 10*time.Second) {
		s.t.Fatal("Watch with a cancelled context returned an open channel that was not closed within 10s")
	}
	// A deadline that passes while subscribed: the channel closes.
	dctx, dcancel := context.WithTimeout(s.ctx(), 200*time.Millisecond)
	defer dcancel()
	ch, err = w.Watch(dctx, "job")
	if err != nil {
		if dctx.Err() == nil {
			s.t.Fatalf("Watch: %v", err)
		}
		return // the deadline passed during the subscription itself
	}
	if !closedWithin(ch, 10*time.Second) {
		s.t.Fatal("watch channel still open 10s after its context's deadline passed")
	}
}

// drain empties a coalesced watch channel after a short settle, so that a
// wake from an earlier change is not mistaken for the next one.
func drain(ch <-chan struct{}) {
	timer := time.NewTimer(50 * time.Millisecond)
	defer timer.Stop()
	for {
		select {
		case <-ch:
		case <-timer.C:
			return
		}
	}
}

func expectWake(t *testing.T, ch <-chan struct{}, after string) {
	t.Helper()
	timer := time.NewTimer(10 * time.Second)
	defer timer.Stop()
	select {
	case _, open := <-ch:
		if !open {
			t.Fatalf("watch channel closed instead of waking after %s", after)
		}
	case <-timer.C:
		t.Fatalf("watch did not wake within 10s after %s", after)
	}
}
