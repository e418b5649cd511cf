package kubernetes

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/leasehold/leasehold/store"
)

// Watch implements store.Watcher with a Kubernetes watch on the one Lease
// object (field selector metadata.name), started from the version it reads
// first, so that it reports changes after that version and no synthetic
// event for the current state. The channel receives a value when the
// Lease's holder or token changes or the object is created or deleted;
// renewals do not wake it, but each version it delivers counts as seen (the
// store's clock for that version starts then, see observe). It is closed when ctx ends, the store is closed,
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
		v := s.observe(cur, s.now())
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
	s.mu.Lock()
	if s.life.Closed() {
		s.mu.Unlock()
		cancel()
		body.Close()
		return nil, store.ErrClosed
	}
	s.wg.Add(2)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		select {
		case <-s.life.Done():
			cancel()
		case <-wctx.Done():
		}
	}()

	out := make(chan struct{}, 1)
	go func() {
		defer s.wg.Done()
		defer close(out)
		defer body.Close()
		defer cancel()
		wake := func() {
			select {
			case out <- struct{}{}:
			default:
			}
		}
		dec := json.NewDecoder(body)
		for {
			var ev watchEvent
			if err := dec.Decode(&ev); err != nil {
				return // the watch ended, or ctx or the store did
			}
			switch ev.Type {
			case "ADDED", "MODIFIED":
				var l lease
				if err := json.Unmarshal(ev.Object, &l); err != nil {
					return
				}
				// Note the sighting: a renewal seen here starts this store's
				// clock for the new version now, not at the next read, so
				// that a contender judges expiry from when the version
				// reached it, as a client-go contender polling as often
				// would (it is still no earlier than the write: the event
				// follows it).
				s.observe(&l, s.now())
				v := specView(&l)
				if last == nil || ev.Type == "ADDED" || v.holder != last.holder || v.token != last.token {
					wake()
				}
				last = &v
			case "DELETED":
				last = nil
				wake()
			case "BOOKMARK":
			default: // ERROR: the watch is broken
				return
			}
		}
	}()
	return out, nil
}
