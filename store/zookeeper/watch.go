package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/leasehold/leasehold/store"
)

// watchLoop keeps one ZooKeeper watch for a name while this handle has
// watchers of it (the Hub fans its wake-ups out).
type watchLoop struct {
	armed  chan struct{} // closed once the first watch is set
	cancel context.CancelFunc
}

// watchArmTimeout bounds how long Watch waits for the first ZooKeeper watch
// to be set, so that a candidate whose server does not answer polls instead.
const watchArmTimeout = 5 * time.Second

// Watch implements store.Watcher. A waiter watches its predecessor: the
// contender node a new node would queue behind, which is the last one
// (leasehold's own contenders never queue, so with only leasehold clients it
// is the holder's node; behind foreign queued contenders the lease is free
// for leasehold only once the last of them is gone). Only that node's
// deletion wakes the waiter, not every contender that comes and goes. A
// lease with no contender wakes its waiters on the next change of its
// children; a lease never created, when its path appears.
//
// Watch returns once the ZooKeeper watch is set (or fails after a few
// seconds), so every change after it returns is seen. The client sets its
// watches again after a reconnect, and a watch lost with an expired control
// session is set again, with a wake-up, on a fresh look; the channel stays
// open until ctx ends or the store closes.
func (s *Store) Watch(ctx context.Context, name string) (<-chan struct{}, error) {
	if err := s.life.Check(ctx); err != nil {
		return nil, err
	}
	if err := kit.CheckName("watch", name); err != nil {
		return nil, err
	}
	ch, err := s.hub.Watch(ctx, name)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	wl := s.watches[name]
	if wl == nil && !s.life.Closed() {
		lctx, cancel := context.WithCancel(context.Background())
		wl = &watchLoop{armed: make(chan struct{}), cancel: cancel}
		s.watches[name] = wl
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.watchLoop(lctx, name, wl)
		}()
	}
	s.mu.Unlock()
	if wl == nil {
		return nil, store.ErrClosed
	}
	t := time.NewTimer(watchArmTimeout)
	defer t.Stop()
	select {
	case <-wl.armed:
		return ch, nil
	case <-ctx.Done():
		return ch, nil // the hub closes ch
	case <-s.life.Done():
		return nil, store.ErrClosed
	case <-t.C:
		return nil, kit.Errorf(fmt.Sprintf("watch %q", name), "no watch set within %v", watchArmTimeout)
	}
}

// watchIdle stops a name's loop once its last watcher is gone (the hub's
// Idle).
func (s *Store) watchIdle(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hub.Count(name) > 0 {
		return
	}
	if wl := s.watches[name]; wl != nil {
		wl.cancel()
		delete(s.watches, name)
	}
}

func (s *Store) watchLoop(ctx context.Context, name string, wl *watchLoop) {
	defer wl.cancel()
	go func() {
		select {
		case <-s.life.Done():
			wl.cancel()
		case <-ctx.Done():
		}
	}()
	p := s.Path(name)
	conn := s.ctl.conn
	armed := false
	for ctx.Err() == nil {
		ev, sole, fired, err := s.setWatch(ctx, conn, p)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			// A wake-up: something may have changed unseen. Look again a
			// tick later.
			s.hub.Notify(name)
			t := time.NewTimer(max(s.tick(), 100*time.Millisecond))
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			continue
		}
		if !armed {
			armed = true
			close(wl.armed)
		}
		if fired {
			s.hub.Notify(name)
			continue
		}
		select {
		case <-ctx.Done():
			return
		case e := <-ev:
			// A change, or the watch ended with the session: either way,
			// wake the waiters and look again. The deletion of the node
			// waited on, when it was the only contender (the holder's),
			// most likely freed the lease: the next Acquire tries at once.
			// (Not the deletion of a node behind the holder: a contender
			// that gave up, or a refused speculative create.)
			if sole && e.Type == zk.EventNodeDeleted {
				s.markFree(name)
			}
			s.hub.Notify(name)
		}
	}
}

// setWatch sets the watch Watch describes. sole says the node watched is
// the only contender; fired says the watched change happened already (the
// node to watch is gone): look again.
func (s *Store) setWatch(ctx context.Context, conn *zk.Conn, p string) (_ <-chan zk.Event, sole, fired bool, _ error) {
	type w struct {
		kids []string
		ok   bool
		ev   <-chan zk.Event
	}
	r, err := call(ctx, func() (w, error) { k, _, ev, err := conn.ChildrenW(p); return w{k, true, ev}, err })
	if errors.Is(err, zk.ErrNoNode) {
		r, err = call(ctx, func() (w, error) { ok, _, ev, err := conn.ExistsW(p); return w{nil, ok, ev}, err })
		if err != nil {
			return nil, false, false, err
		}
		return r.ev, false, r.ok, nil // created meanwhile: look again
	}
	if err != nil {
		return nil, false, false, err
	}
	all := contenders(r.kids)
	if len(all) == 0 {
		return r.ev, false, false, nil
	}
	// The children watch just set fires on the next contender's arrival too;
	// leave it be (the client keeps one watch per path) and wait on the
	// predecessor's.
	tail := p + "/" + all[len(all)-1].name
	x, err := call(ctx, func() (w, error) { ok, _, ev, err := conn.ExistsW(tail); return w{nil, ok, ev}, err })
	if err != nil {
		return nil, false, false, err
	}
	return x.ev, len(all) == 1, !x.ok, nil
}

// List implements store.Lister: the record of every lease path under the
// root that leasehold has created a contender in, ordered by name. Paths
// only other clients used are not listed.
func (s *Store) List(ctx context.Context) ([]store.Record, error) {
	if err := s.life.Check(ctx); err != nil {
		return nil, err
	}
	conn := s.ctl.conn
	if _, err := call(ctx, func() (string, error) { return conn.Sync(s.root) }); err != nil {
		return nil, kit.Wrap("list", s.life.ClosedOr(describe(err)))
	}
	var names []string
	var walk func(p, name string) error
	walk = func(p, name string) error {
		type got struct {
			data []byte
			kids []string
		}
		g, err := call(ctx, func() (got, error) {
			d, _, err := conn.Get(p)
			if err != nil {
				return got{}, err
			}
			k, _, err := conn.Children(p)
			return got{d, k}, err
		})
		if errors.Is(err, zk.ErrNoNode) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read %s: %w", p, describe(err))
		}
		if name != "" && isRecord(g.data) && store.ValidateName(name) == nil {
			names = append(names, name)
		}
		for _, k := range g.kids {
			if _, ok := sequence(k); ok || (p == "/" && k == "zookeeper") {
				continue
			}
			child := strings.TrimSuffix(p, "/") + "/" + k
			cname := k
			if name != "" {
				cname = name + "/" + k
			}
			if err := walk(child, cname); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(s.root, ""); err != nil {
		return nil, kit.Wrap("list", s.life.ClosedOr(err))
	}
	sort.Strings(names)
	out := make([]store.Record, 0, len(names))
	for _, n := range names {
		r, err := s.get(ctx, conn, n, false)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, kit.Wrap(fmt.Sprintf("list: get %q", n), s.life.ClosedOr(err))
		}
		out = append(out, r)
	}
	return out, nil
}

// ForceRelease implements store.ForceReleaser: it deletes the holder's
// node, whoever created it (a leasehold term, a zk.Lock, a Curator mutex),
// with the version it read. A leasehold holder's renewals then get
// ErrNotHeld; a foreign holder is not told (zk.Lock has no notice of loss).
func (s *Store) ForceRelease(ctx context.Context, name string) (store.Record, error) {
	if err := s.life.Check(ctx); err != nil {
		return store.Record{}, err
	}
	if err := kit.CheckName("force release", name); err != nil {
		return store.Record{}, err
	}
	op := fmt.Sprintf("force release %q", name)
	conn := s.ctl.conn
	p := s.Path(name)
	if _, err := call(ctx, func() (string, error) { return conn.Sync(p) }); err != nil && !errors.Is(err, zk.ErrNoNode) {
		return store.Record{}, kit.Wrap(op, s.life.ClosedOr(describe(err)))
	}
	for attempt := 0; attempt < 8; attempt++ {
		rec, err := s.get(ctx, conn, name, false)
		if err != nil {
			return store.Record{}, kit.Wrap(op, s.life.ClosedOr(err))
		}
		if rec.Holder == "" {
			return rec, kit.Wrap(op, store.ErrNotHeld)
		}
		kids, err := call(ctx, func() ([]string, error) { k, _, err := conn.Children(p); return k, err })
		if err != nil {
			return store.Record{}, kit.Wrap(op, s.life.ClosedOr(describe(err)))
		}
		all := contenders(kids)
		if len(all) == 0 {
			continue
		}
		head := p + "/" + all[0].name
		type ex struct {
			ok   bool
			stat *zk.Stat
		}
		x, err := call(ctx, func() (ex, error) { ok, st, err := conn.Exists(head); return ex{ok, st}, err })
		if err != nil {
			return store.Record{}, kit.Wrap(op, s.life.ClosedOr(describe(err)))
		}
		if !x.ok || x.stat.Czxid != rec.Token {
			continue // the holder changed meanwhile
		}
		_, err = call(ctx, func() (struct{}, error) { return struct{}{}, conn.Delete(head, x.stat.Version) })
		if errors.Is(err, zk.ErrNoNode) || errors.Is(err, zk.ErrBadVersion) {
			continue
		}
		if err != nil {
			return store.Record{}, kit.Wrap(op, s.life.ClosedOr(describe(err)))
		}
		return rec, nil
	}
	return store.Record{}, kit.Errorf(op, "the holder kept changing")
}
