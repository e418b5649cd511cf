package kubernetes

import (
	"context"
	"fmt"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"

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
	if err := s.check(); err != nil {
		return nil, err
	}
	o, err := objectFor(name)
	if err != nil {
		return nil, err
	}
	var last *view
	rv := ""
	cur, err := s.leases.Get(ctx, o.obj, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		// Watch from now: a Lease created since the read arrives as an
		// event, synthetic or not.
	case err != nil:
		return nil, fmt.Errorf("leasehold/kubernetes: watch %q: %w", name, err)
	default:
		v := s.observe(cur, s.now())
		last, rv = &v, cur.ResourceVersion
	}
	w, err := s.leases.Watch(ctx, metav1.ListOptions{
		FieldSelector:   fields.OneTermEqualSelector("metadata.name", o.obj).String(),
		ResourceVersion: rv,
	})
	if err != nil {
		return nil, fmt.Errorf("leasehold/kubernetes: watch %q: %w", name, err)
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		w.Stop()
		return nil, store.ErrClosed
	}
	s.wg.Add(1)
	s.mu.Unlock()

	out := make(chan struct{}, 1)
	go func() {
		defer s.wg.Done()
		defer close(out)
		defer w.Stop()
		wake := func() {
			select {
			case out <- struct{}{}:
			default:
			}
		}
		for {
			select {
			case <-ctx.Done():
				return
			case <-s.done:
				return
			case ev, ok := <-w.ResultChan():
				if !ok {
					return
				}
				switch ev.Type {
				case watch.Added, watch.Modified:
					l, ok := ev.Object.(*coordinationv1.Lease)
					if !ok {
						return
					}
					// Note the sighting: a renewal seen here starts this
					// store's clock for the new version now, not at the
					// next read, so that a contender judges expiry from
					// when the version reached it, as a client-go contender
					// polling as often would (it is still no earlier than
					// the write: the event follows it).
					s.observe(l, s.now())
					v := specView(l)
					if last == nil || ev.Type == watch.Added || v.holder != last.holder || v.token != last.token {
						wake()
					}
					last = &v
				case watch.Deleted:
					last = nil
					wake()
				case watch.Bookmark:
				default: // watch.Error: the watch is broken
					return
				}
			}
		}
	}()
	return out, nil
}

// Close implements store.Store: it ends the store's watches and waits for
