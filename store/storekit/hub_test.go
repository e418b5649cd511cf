package storekit_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/storekit"
)

func pending(ch <-chan struct{}) bool {
	select {
	case _, ok := <-ch:
		return ok
	default:
		return false
	}
}

func closed(ch <-chan struct{}) bool {
	select {
	case _, ok := <-ch:
		return !ok
	default:
		return false
	}
}

func TestHubNotify(t *testing.T) {
	var h storekit.Hub
	ctx := t.Context()
	a1, err := h.Watch(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	a2, _ := h.Watch(ctx, "a")
	b, _ := h.Watch(ctx, "b")
	if pending(a1) || pending(b) {
		t.Fatal("a wake-up before any Notify")
	}
	h.Notify("a")
	h.Notify("a") // coalesced with the first
	if !pending(a1) || !pending(a2) {
		t.Errorf("Notify(a) did not wake both watches of a")
	}
	if pending(a1) {
		t.Errorf("two Notify calls left two wake-ups; want one pending at most")
	}
	if pending(b) {
		t.Errorf("Notify(a) woke a watch of b")
	}
	h.NotifyAll()
	if !pending(a1) || !pending(a2) || !pending(b) {
		t.Errorf("NotifyAll did not wake every watch")
	}
	if n := h.Count("a"); n != 2 {
		t.Errorf("Count(a) = %d, want 2", n)
	}
}

func TestHubWatchEndsWithContext(t *testing.T) {
	var h storekit.Hub
	idle := make(chan string, 2)
	h.Idle = func(key string) { idle <- key }
	ctx, cancel := context.WithCancel(t.Context())
	ch, err := h.Watch(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	other, _ := h.Watch(t.Context(), "a")
	cancel()
	for range ch { // ends when the hub closes ch; hangs (test timeout) if it never does
	}
	if n := h.Count("a"); n != 1 {
		t.Errorf("Count(a) = %d after one of two watches ended, want 1", n)
	}
	select {
	case k := <-idle:
		t.Fatalf("Idle(%q) called while a watch of it remains", k)
	default:
	}
	h.Notify("a")
	if !pending(other) {
		t.Errorf("the remaining watch was not woken")
	}
	if _, err := h.Watch(ctx, "a"); !errors.Is(err, context.Canceled) {
		t.Errorf("Watch with an ended context = %v, want context.Canceled", err)
	}
}

func TestHubIdleAndStop(t *testing.T) {
	var h storekit.Hub
	var mu sync.Mutex
	var idle []string
	h.Idle = func(key string) { mu.Lock(); idle = append(idle, key); mu.Unlock() }
	s1, err := h.Subscribe("k")
	if err != nil {
		t.Fatal(err)
	}
	s2, _ := h.Subscribe("k")
	s1.Stop()
	s1.Stop() // idempotent
	if !closed(s1.C()) {
		t.Errorf("Stop did not close C")
	}
	mu.Lock()
	if len(idle) != 0 {
		t.Errorf("Idle called with a subscription left: %v", idle)
	}
	mu.Unlock()
	s2.Stop()
	mu.Lock()
	if len(idle) != 1 || idle[0] != "k" {
		t.Errorf("Idle calls = %v, want [k] after the last Stop", idle)
	}
	mu.Unlock()
	if n := h.Count("k"); n != 0 {
		t.Errorf("Count after every Stop = %d", n)
	}
}

// Watched counts keys, not subscriptions, and is 0 once the last one stops.
func TestHubWatched(t *testing.T) {
	var h storekit.Hub
	if n := h.Watched(); n != 0 {
		t.Fatalf("Watched of a new hub = %d", n)
	}
	a1, _ := h.Subscribe("a")
	a2, _ := h.Subscribe("a")
	b, _ := h.Subscribe("b")
	if n := h.Watched(); n != 2 {
		t.Fatalf("Watched with two subscriptions of a and one of b = %d, want 2", n)
	}
	a1.Stop()
	b.Stop()
	if n := h.Watched(); n != 1 {
		t.Fatalf("Watched with one subscription of a left = %d, want 1", n)
	}
	a2.Stop()
	if n := h.Watched(); n != 0 {
		t.Fatalf("Watched after every Stop = %d, want 0", n)
	}
}

func TestHubClose(t *testing.T) {
	var h storekit.Hub
	idleCalled := false
	h.Idle = func(string) { idleCalled = true }
	w, _ := h.Watch(t.Context(), "a")
	s, _ := h.Subscribe("b")
	h.Close()
	h.Close() // idempotent
	if !closed(w) || !closed(s.C()) {
		t.Errorf("Close left a channel open")
	}
	s.Stop() // after Close: nothing, no panic on a closed channel
	h.Notify("a")
	h.NotifyAll()
	if idleCalled {
		t.Errorf("Close called Idle")
	}
	if _, err := h.Watch(t.Context(), "a"); !errors.Is(err, store.ErrClosed) {
		t.Errorf("Watch after Close = %v, want ErrClosed", err)
	}
	if _, err := h.Subscribe("a"); !errors.Is(err, store.ErrClosed) {
		t.Errorf("Subscribe after Close = %v, want ErrClosed", err)
	}
}

// Notify, Watch, cancellation and Close from many goroutines: run with
// -race, this finds a send on a closed channel or an unguarded map.
func TestHubConcurrent(t *testing.T) {
	var h storekit.Hub
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for range 200 {
				ctx, cancel := context.WithCancel(t.Context())
				ch, err := h.Watch(ctx, string(rune('a'+i%3)))
				if err != nil {
					cancel()
					return // closed
				}
				h.Notify(string(rune('a' + i%3)))
				cancel()
				for range ch {
				}
			}
		})
	}
	wg.Go(func() {
		for range 500 {
			h.NotifyAll()
		}
	})
	wg.Wait()
	h.Close()
}

func TestSubscriptionUntil(t *testing.T) {
	var h storekit.Hub
	s, err := h.Subscribe("k")
	if err != nil {
		t.Fatal(err)
	}
	h.Notify("k") // before Until: kept
	ctx, cancel := context.WithCancel(t.Context())
	s.Until(ctx)
	if !pending(s.C()) {
		t.Errorf("a wake-up before Until was lost")
	}
	cancel()
	for range s.C() { // closed by the end of ctx, or the test hangs
	}
	if h.Count("k") != 0 {
		t.Errorf("Count after ctx ended = %d", h.Count("k"))
	}
	// Until on a stopped subscription does nothing.
	s2, _ := h.Subscribe("k")
	s2.Stop()
	s2.Until(t.Context())
}
