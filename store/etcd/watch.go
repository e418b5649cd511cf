package etcd

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold/leasehold/store"
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
// Watch returns is seen. If the client switches members, clientv3 resumes the
// watch from the revision after the last one seen. The channel closes when ctx
// ends, the store closes, or the watch breaks (for instance when the member
// loses its raft leader); the caller then polls and may watch again.
func (s *Store) Watch(ctx context.Context, name string) (<-chan struct{}, error) {
	if err := s.life.Check(ctx); err != nil {
		return nil, err
	}
	if err := kit.CheckName("watch", name); err != nil {
		return nil, err
	}
	pfx := s.lockPrefix(name)
	wctx, cancel := context.WithCancel(ctx)
	// clientv3.Watch returns once the server created the watch (or it
	// failed), which can take long on a member cut off from its cluster:
	// bound it. The created notice is then the first response.
	timer := time.NewTimer(watchCreateTimeout)
	defer timer.Stop()
	created := make(chan clientv3.WatchChan, 1)
	go func() {
		created <- s.cli.Watch(rctx(wctx), pfx, clientv3.WithPrefix(), clientv3.WithCreatedNotify())
	}()
	var wch clientv3.WatchChan
	select {
	case wch = <-created:
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
	select {
	case wr, ok := <-wch:
		if !ok || wr.Err() != nil || !wr.Created {
			cancel()
			err := errors.New("watch closed before it was created")
			if ok && wr.Err() != nil {
				err = wr.Err()
			}
			return nil, fmt.Errorf("leasehold/etcd: watch %q: %w", name, err)
		}
	case <-timer.C:
		cancel()
		return nil, fmt.Errorf("leasehold/etcd: watch %q: not created within %v", name, watchCreateTimeout)
	case <-s.life.Done():
		cancel()
		return nil, store.ErrClosed
	}
	out := make(chan struct{}, 1)
	s.spawn(func() {
		defer close(out)
		defer cancel()
		for {
			select {
			case <-s.life.Done():
				return
			case wr, ok := <-wch:
				if !ok || wr.Canceled || wr.Err() != nil {
					return
				}
				for _, ev := range wr.Events {
					if isContender(pfx, ev.Kv.Key) {
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
