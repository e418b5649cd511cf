package storekit

import (
	"context"
	"sync"

	"github.com/leasehold/leasehold/store"
)

// Hub fans "this lease may have changed" out to the store's watchers, the
// part of store.Watcher that every store writes the same way: a buffered
// channel per watch that holds at most one pending wake-up (so a slow
// watcher is never blocked on and never misses that a change happened), and
// closed when the watch ends. What produces the notifications (a LISTEN
// connection, a pub/sub subscription, a backend's own writes) stays with
// the store, which calls Notify.
//
// The zero value is ready to use. A Hub's goroutine safety is its own: its
// lock is never held while it calls out (Idle), so a store may call Notify
// and Subscribe under its own lock.
type Hub struct {
	// Idle, if not nil, is called with a key after the last subscription
	// of that key was stopped (not when Close ends them all), without the
	// hub's lock held. A store that subscribes upstream per key (Redis
	// pub/sub) unsubscribes there; since a new subscription may have come in
	// meanwhile, Idle checks Count under the store's own lock, the lock the
	// store also holds when it subscribes. Set it before the first
	// Subscribe.
	Idle func(key string)

	mu     sync.Mutex
	closed bool
	subs   map[string]map[*Subscription]struct{}
}

// Subscription is one watch of one key.
type Subscription struct {
	hub *Hub
	key string
	c   chan struct{}
	// Guarded by hub.mu:
	ended     bool
	stopAfter func() bool // context.AfterFunc's stop, for Watch
}

// C receives a value (coalesced: at most one pending) after each Notify of
// the key, and is closed when the subscription ends.
func (s *Subscription) C() <-chan struct{} { return s.c }

// Stop ends the subscription and closes C. It is idempotent.
func (s *Subscription) Stop() {
	h := s.hub
	h.mu.Lock()
	if s.ended {
		h.mu.Unlock()
		return
	}
	s.ended = true
	close(s.c)
	m := h.subs[s.key]
	delete(m, s)
	idle := len(m) == 0
	if idle {
		delete(h.subs, s.key)
	}
	stop := s.stopAfter
	h.mu.Unlock()
	if stop != nil {
		stop()
	}
	if idle && h.Idle != nil {
		h.Idle(s.key)
	}
}

// Subscribe starts a subscription to key. After Close it returns
// store.ErrClosed.
func (h *Hub) Subscribe(key string) (*Subscription, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, store.ErrClosed
	}
	if h.subs == nil {
		h.subs = map[string]map[*Subscription]struct{}{}
	}
	m := h.subs[key]
	if m == nil {
		m = map[*Subscription]struct{}{}
		h.subs[key] = m
	}
	s := &Subscription{hub: h, key: key, c: make(chan struct{}, 1)}
	m[s] = struct{}{}
	return s, nil
}

// Watch is Subscribe for store.Watcher: the returned channel is closed
// when ctx ends or the hub is closed. It returns ctx's error if ctx has
// already ended, and store.ErrClosed after Close.
func (h *Hub) Watch(ctx context.Context, key string) (<-chan struct{}, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s, err := h.Subscribe(key)
	if err != nil {
		return nil, err
	}
	s.Until(ctx)
	return s.c, nil
}

// Until stops the subscription when ctx ends (Watch is Subscribe and
// Until). It is for a store that must do something between the two, such
// as wait for an upstream subscription to be confirmed. Call it once.
func (s *Subscription) Until(ctx context.Context) {
	stop := context.AfterFunc(ctx, s.Stop)
	h := s.hub
	h.mu.Lock()
	if s.ended {
		h.mu.Unlock()
		stop()
		return
	}
	s.stopAfter = stop
	h.mu.Unlock()
}

// Notify wakes every subscription of key.
func (h *Hub) Notify(key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs[key] {
		wake(s.c)
	}
}

// NotifyAll wakes every subscription: after a reconnect, when anything may
// have changed unseen.
func (h *Hub) NotifyAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, m := range h.subs {
		for s := range m {
			wake(s.c)
		}
	}
}

func wake(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// Count is the number of live subscriptions of key.
func (h *Hub) Count(key string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs[key])
}

// Watched is the number of keys with at least one live subscription: 0
// when nothing is watched, so that a store whose upstream subscription
// covers every key (PostgreSQL's LISTEN on a table's channel) can drop it.
func (h *Hub) Watched() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs)
}

// Close ends every subscription (their channels are closed; Idle is not
// called) and refuses new ones with store.ErrClosed. It is idempotent.
func (h *Hub) Close() {
	h.mu.Lock()
	h.closed = true
	var stops []func() bool
	for _, m := range h.subs {
		for s := range m {
			s.ended = true
			close(s.c)
			if s.stopAfter != nil {
				stops = append(stops, s.stopAfter)
			}
		}
	}
	h.subs = nil
	h.mu.Unlock()
	for _, stop := range stops {
		stop()
	}
}
