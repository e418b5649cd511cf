package kubernetes

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync"

	"github.com/leasehold/leasehold/store"
)

// Watch implements store.Watcher with a Kubernetes watch on the one Lease
// object (field selector metadata.name), started from the version it reads
// first, so that it reports changes after that version and no synthetic
// event for the current state. The channel receives a value when the
// Lease's holder or token changes or the object is created or deleted;
// renewals do not wake it, but each version it delivers counts as seen (the
// store's clock for that version starts then, see observe). If this store
// has a place in the lease's queue (Enqueue), the channel also receives a
// value when a place leaves the queue. It is closed when ctx ends, the store is closed,
// or the watch ends (the server ends watches after its request timeout, and
// a version too old to watch from ends it at once).
func (s *Store) Watch(ctx context.Context, name string) (<-chan struct{}, error) {
	if err := s.life.Check(ctx); err != nil {
		return nil, err
	}
	o, err := objectFor(name)
	if err != nil {
		return nil, err
	}
	var last *view
	rv := ""
	cur, err := s.leases.get(ctx, o.obj)
	switch {
	case isNotFound(err):
		// Watch from now: a Lease created since the read arrives as an
		// event, synthetic or not.
	case err != nil:
		return nil, fmt.Errorf("leasehold/kubernetes: watch %q: %w", name, err)
	default:
		v := s.observe(cur, s.now(), false)
		last, rv = &v, cur.Metadata.ResourceVersion
	}
	// The watch lives as long as ctx and the store: its request is
	// cancelled when either ends.
	wctx, cancel := context.WithCancel(ctx)
	body, err := s.leases.watch(wctx, o.obj, rv)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("leasehold/kubernetes: watch %q: %w", name, err)
	}
	// A waiter queued through this store also learns when a place ahead of
	// it leaves: a second watch, on the queue object, from the version this
	// store last read or wrote (so nothing since its Enqueue is missed).
	var qbody io.ReadCloser
	qn := QueueName(o.obj)
	qrv, qlast, queued := s.queueToFollow(qn)
	if queued {
		if qbody, err = s.leases.watch(wctx, qn, qrv); err != nil {
			cancel()
			body.Close()
			return nil, fmt.Errorf("leasehold/kubernetes: watch the queue of %q: %w", name, err)
		}
	}
	s.mu.Lock()
	if s.life.Closed() {
		s.mu.Unlock()
		cancel()
		body.Close()
		if qbody != nil {
			qbody.Close()
		}
		return nil, store.ErrClosed
	}
	s.wg.Add(2)
	s.watched[o.obj]++
	sg := s.sightingLocked(o.obj)
	sg.gap()
	// A watch on a Lease another term holds, after an Acquire through this
	// store was refused or while it has a place queued, is a waiter's:
	// reserve the token its grant will take now, while the watch runs,
	// rather than at the waiter's next refused Acquire (see reserveToken),
	// so that a release soon after the waiter started finds the token
	// reserved and the grant is one write. (Measured with a fair Elector's
	// waiter, whose start takes about ten requests: a release in that time
	// waited for the reservation's two requests in 11 of 20 hand-offs.) A
	// watch of a store that is not waiting only observes (the status page),
	// and writes nothing.
	var r reservation
	reserve := false
	if last != nil && last.holder != "" && last.remaining() > 0 && sg.waiting {
		if r, reserve = s.claimReservationLocked(o.obj, max(last.token, sg.maxToken)); reserve {
			s.wg.Add(1)
		}
	}
	s.mu.Unlock()
	if reserve {
		go func() {
			defer s.wg.Done()
			s.reserve(wctx, o, r)
		}()
	}
	go func() {
		defer s.wg.Done()
		select {
		case <-s.life.Done():
			cancel()
		case <-wctx.Done():
		}
	}()

	out := make(chan struct{}, 1)
	wake := func() {
		select {
		case out <- struct{}{}:
		default:
		}
	}
	go func() {
		defer s.wg.Done()
		defer close(out)
		defer func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.sightingLocked(o.obj).gap()
			if s.watched[o.obj]--; s.watched[o.obj] == 0 {
				delete(s.watched, o.obj)
			}
		}()
		var streams sync.WaitGroup
		defer streams.Wait()
		// Either watch ending ends both: the channel is closed once, when
		// neither can wake it any more.
		defer cancel()
		if qbody != nil {
			streams.Go(func() {
				defer cancel()
				defer qbody.Close()
				follow(qbody, queueEvents(qlast, wake))
			})
		}
		defer body.Close()
		follow(body, func(ev watchEvent) bool {
			switch ev.Type {
			case "ADDED", "MODIFIED":
				var l lease
				if err := json.Unmarshal(ev.Object, &l); err != nil {
					return false
				}
				// Note the sighting: a renewal seen here starts this store's
				// clock for the new version now, not at the next read, so
				// that a contender judges expiry from when the version
				// reached it, as a client-go contender polling as often
				// would (it is still no earlier than the write: the event
				// follows it).
				s.observe(&l, s.now(), true)
				v := specView(&l)
				if last == nil || ev.Type == "ADDED" || v.holder != last.holder || v.token != last.token {
					wake()
				}
				last = &v
			case "DELETED":
				last = nil
				s.forget(o.obj)
				wake()
			case "BOOKMARK":
			default: // ERROR: the watch is broken
				return false
			}
			return true
		})
	}()
	return out, nil
}

// follow decodes the events of a watch and hands each to event, until the
// watch ends (or ctx or the store does) or event returns false.
func follow(body io.Reader, event func(watchEvent) bool) {
	dec := json.NewDecoder(body)
	for {
		var ev watchEvent
		if err := dec.Decode(&ev); err != nil || !event(ev) {
			return
		}
	}
}
