package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/leasehold/leasehold/store"
	lhzk "github.com/leasehold/leasehold/store/zookeeper"
	"github.com/leasehold/leasehold/store/zookeeper/zktest"
)

// zkEnv is one standalone ZooKeeper server started for the run from the
// installed package (as store/zookeeper's tests start it: 100 ms tick,
// fsync off), and a leasehold store on it. Every library runs on the same
// server, each lock on a path of its own under the run's root.
type zkEnv struct {
	dir  string
	srv  *zktest.Server
	st   *lhzk.Store
	root string
	ver  string
}

func startZooKeeper(ctx context.Context, runID string) (*zkEnv, error) {
	dir, err := os.MkdirTemp("", "lhbench-zk-")
	if err != nil {
		return nil, err
	}
	e := &zkEnv{dir: dir, root: "/lhbench-" + runID}
	e.srv, err = zktest.StartServer(zktest.Options{Dir: dir})
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	e.ver = "ZooKeeper (standalone, 100 ms tick, fsync off)"
	if out, err := e.srv.Command("srvr"); err == nil {
		if first, _, _ := strings.Cut(out, "\n"); strings.HasPrefix(first, "Zookeeper version: ") {
			v, _, _ := strings.Cut(strings.TrimPrefix(first, "Zookeeper version: "), ",")
			e.ver = "ZooKeeper " + v + " (standalone, Debian's package, 100 ms tick, fsync off)"
		}
	}
	e.st, err = lhzk.Open(ctx, lhzk.Config{Servers: []string{e.srv.Addr()}, Root: e.root})
	if err != nil {
		e.close()
		return nil, err
	}
	return e, nil
}

func (e *zkEnv) version() string { return e.ver }

// close kills the server this bench started, by its PID.
func (e *zkEnv) close() {
	if e.st != nil {
		e.st.Close()
	}
	if e.srv != nil {
		e.srv.Kill()
	}
	os.RemoveAll(e.dir)
}

// conn opens a client session as a zk.Lock user would: one per process.
func (e *zkEnv) conn(ctx context.Context, ttl time.Duration) (*zk.Conn, error) {
	c, events, err := zk.Connect([]string{e.srv.Addr()}, ttl, zk.WithLogInfo(false), zk.WithLogger(quietZK{}))
	if err != nil {
		return nil, err
	}
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				return nil, errors.New("zk: client closed")
			}
			if ev.State == zk.StateHasSession {
				go func() {
					for range events {
					}
				}()
				return c, nil
			}
		case <-ctx.Done():
			c.Close()
			return nil, ctx.Err()
		}
	}
}

type quietZK struct{}

func (quietZK) Printf(string, ...any) {}

func (e *zkEnv) libs(handoffTTL time.Duration) []*lib {
	return []*lib{
		e.perContender(func(st store.Store) *lib {
			return lhLockLib("zookeeper", st, handoffTTL, "watch on the predecessor node")
		}),
		{
			name: "zk.Lock", store: "zookeeper", peer: true, kind: "lock",
			config: fmt.Sprintf("github.com/go-zookeeper/zk v1.0.4 Lock, one session per contender (%v timeout), a new Lock per acquisition", handoffTTL),
			newContender: func(ctx context.Context, lockName string, s setup) (contender, error) {
				if s.ttl == 0 {
					s.ttl = handoffTTL
				}
				c, err := e.conn(ctx, s.ttl)
				if err != nil {
					return nil, err
				}
				return &zkLockC{conn: c, path: e.root + "/peer/" + lockName}, nil
			},
		},
		e.perContender(func(st store.Store) *lib {
			return lhElectorLib("zookeeper", st, handoffTTL, "watch on the predecessor node")
		}),
	}
}

// perContender makes each contender of the library mk builds use a Store,
// and so a session, of its own, as zk.Lock's contenders have theirs and as
// separate processes would.
func (e *zkEnv) perContender(mk func(st store.Store) *lib) *lib {
	return perContender(e.st, func(ctx context.Context) (store.Store, error) {
		return lhzk.Open(ctx, lhzk.Config{Servers: []string{e.srv.Addr()}, Root: e.root})
	}, mk)
}

// fairLibs are leasehold's fair Lock and Elector, a Store per contender.
func (e *zkEnv) fairLibs(handoffTTL time.Duration) []*lib {
	return fairLibsEach("zookeeper", handoffTTL, "watch on the predecessor node", e.perContender)
}

// zkLockC is a contender on go-zookeeper/zk's Lock. zk.Lock takes no
// context: an acquire that must give up is ended by closing its session
// (the contender is done then).
type zkLockC struct {
	conn *zk.Conn
	path string
}

func (c *zkLockC) acquire(ctx context.Context) (held, error) {
	l := zk.NewLock(c.conn, c.path, zk.WorldACL(zk.PermAll))
	done := make(chan error, 1)
	go func() { done <- l.Lock() }()
	select {
	case err := <-done:
		if err != nil {
			return nil, err
		}
	case <-ctx.Done():
		c.conn.Close()
		<-done
		return nil, ctx.Err()
	}
	h := &peerHeld{rel: func(context.Context) error { return l.Unlock() }}
	h.clock.mark()
	return h, nil
}

func (c *zkLockC) close() { c.conn.Close() }

// floorLib is the raw hand-off on ZooKeeper: delete the lock node; the
// waiter's exists watch fires; the waiter creates the node (ephemeral, no
// sequence) and holds.
func (e *zkEnv) floorLib() *lib {
	return &lib{
		name: floorName, store: "zookeeper", kind: "floor",
		config: "Delete -> exists watch fires -> Create ephemeral node (no sequence, no token)",
		newContender: func(ctx context.Context, lockName string, s setup) (contender, error) {
			ttl := s.ttl
			if ttl == 0 {
				ttl = 15 * time.Second
			}
			c, err := e.conn(ctx, ttl)
			if err != nil {
				return nil, err
			}
			p := e.root + "/raw"
			if _, err := c.Create(p, nil, zk.FlagPersistent, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
				if !errors.Is(err, zk.ErrNoNode) {
					c.Close()
					return nil, err
				}
				if _, err := c.Create(e.root, nil, zk.FlagPersistent, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
					c.Close()
					return nil, err
				}
				if _, err := c.Create(p, nil, zk.FlagPersistent, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
					c.Close()
					return nil, err
				}
			}
			return &rawZKC{conn: c, path: p + "/" + lockName}, nil
		},
	}
}

type rawZKC struct {
	conn *zk.Conn
	path string
}

func (c *rawZKC) acquire(ctx context.Context) (held, error) {
	for {
		_, err := c.conn.Create(c.path, nil, zk.FlagEphemeral, zk.WorldACL(zk.PermAll))
		if err == nil {
			h := &peerHeld{rel: func(context.Context) error { return c.conn.Delete(c.path, -1) }}
			h.clock.mark()
			return h, nil
		}
		if !errors.Is(err, zk.ErrNodeExists) {
			return nil, err
		}
		ok, _, ev, err := c.conn.ExistsW(c.path)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		select {
		case <-ev:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (c *rawZKC) close() { c.conn.Close() }
