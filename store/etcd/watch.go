package etcd

import (
	"context"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/store/etcd/internal/etcdapi"
)

// WatchesGrants implements store.GrantWatcher: a grant puts a contender key
// under the watched prefix, which wakes the watch as a delete does.
func (s *Store) WatchesGrants() bool { return true }

// Watch implements store.Watcher. It watches the name's contender prefix and
// wakes on every key created or deleted there: a grant, a release, an etcd
// tool queueing, and the delete etcd makes when a crashed holder's lease
// expires. Watch returns only once etcd has created the watch (a watch from
// the revision after the server's current one, so it starts in etcd's synced
// group and an event reaches it in about one round trip, with no wait for the
// 100 ms resync of watchers that start in the past); every change after
// Watch returns is seen. The channel closes when ctx ends, the store closes,
// or the watch breaks (for instance when the member loses its raft leader or
// the connection to it fails); the caller then polls and may watch again.
func (s *Store) Watch(ctx context.Context, name string) (<-chan struct{}, error) {
	if err := s.life.Check(ctx); err != nil {
		return nil, err
	}
	if err := kit.CheckName("watch", name); err != nil {
		return nil, err
	}
	pfx := s.lockPrefix(name)
	wctx, cancel := context.WithCancel(ctx)
	// Watch returns once the server created the watch (or it failed), which
	// can take long on a member cut off from its cluster: bound it.
	timer := time.NewTimer(watchCreateTimeout)
	defer timer.Stop()
	type result struct {
		ch   <-chan etcdapi.WatchEvent
		from int64
		err  error
	}
	created := make(chan result, 1)
	go func() {
		ch, from, err := s.cli.Watch(rctx(wctx), pfx)
		created <- result{ch, from, err}
	}()
	var wch <-chan etcdapi.WatchEvent
	var from int64
	select {
	case r := <-created:
		if r.err != nil {
			cancel()
			if err := s.life.Check(ctx); err != nil {
				return nil, err
			}
			return nil, fmt.Errorf("leasehold/etcd: watch %q: %w", name, r.err)
		}
		wch, from = r.ch, r.from
	case <-timer.C:
	case <-s.life.Done():
	}
	if wch == nil {
		cancel()
		<-created
		if err := s.life.Check(ctx); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("leasehold/etcd: watch %q: not created within %v", name, watchCreateTimeout)
	}
	out := make(chan struct{}, 1)
	w := s.addWatch(name, from)
	s.spawn(func() {
		defer close(out)
		defer cancel()
		defer s.endWatch(name, w)
		for {
			select {
			case <-s.life.Done():
				return
			case wr, ok := <-wch:
				if !ok || wr.Canceled || wr.Err != nil {
					return
				}
				// What the events prove of a place is known before the
				// watcher wakes, so that its Acquire finds it.
				s.followEvents(w, wr.Events)
				for _, ev := range wr.Events {
					if isContender(pfx, ev.Key) {
						select {
						case out <- struct{}{}:
						default:
						}
						break
					}
				}
			}
		}
	})
	return out, nil
}

// watchCreateTimeout bounds how long Watch waits for etcd to create a watch, so
// that a candidate on a member cut off from the cluster falls back to polling.
const watchCreateTimeout = 3 * time.Second
