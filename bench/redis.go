package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	goredis "github.com/redis/go-redis/v9"

	lhredis "github.com/leasehold/leasehold/store/redis"
)

// redisEnv is the bench's view of the Redis server: one key prefix of its
// own, one go-redis client shared by the peers, and one leasehold store.
type redisEnv struct {
	addr   string
	prefix string
	client *goredis.Client
	st     *lhredis.Store
}

func openRedis(ctx context.Context, addr, runID string) (*redisEnv, error) {
	e := &redisEnv{addr: addr, prefix: "lhbench:" + runID + ":"}
	e.client = goredis.NewClient(&goredis.Options{Addr: addr})
	if err := e.client.Ping(ctx).Err(); err != nil {
		e.client.Close()
		return nil, fmt.Errorf("redis at %s: %w", addr, err)
	}
	st, err := lhredis.Open(ctx, "redis://"+addr+"/0?prefix="+e.prefix)
	if err != nil {
		e.client.Close()
		return nil, err
	}
	e.st = st
	return e, nil
}

func (e *redisEnv) version(ctx context.Context) string {
	info, err := e.client.InfoMap(ctx, "server").Result()
	if err != nil {
		return "?"
	}
	return "Redis " + info["Server"]["redis_version"]
}

func (e *redisEnv) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	it := e.client.Scan(ctx, 0, e.prefix+"*", 1000).Iterator()
	for it.Next(ctx) {
		e.client.Del(ctx, it.Val())
	}
	e.st.Close()
	e.client.Close()
}

func (e *redisEnv) libs(handoffTTL time.Duration) []*lib {
	return []*lib{
		lhLockLib("redis", e.st, handoffTTL, "pub/sub watch"),
		{
			name: "redislock", store: "redis", peer: true, kind: "lock",
			config: fmt.Sprintf("bsm/redislock v0.9.4, %v TTL, LinearBackoff(10ms) retry (its default is no retry)", handoffTTL),
			newContender: func(ctx context.Context, lockName string, s setup) (contender, error) {
				if s.ttl == 0 {
					s.ttl = handoffTTL
				}
				return &redislockC{c: redislock.New(e.client), key: e.st.LockKey(lockName), s: s}, nil
			},
		},
		{
			name: "redsync", store: "redis", peer: true, kind: "lock",
			config: fmt.Sprintf("go-redsync/redsync v4.18.1, one pool, %v expiry, default retry delay (50-250 ms), tries raised so the wait outlasts the run", handoffTTL),
			newContender: func(ctx context.Context, lockName string, s setup) (contender, error) {
				if s.ttl == 0 {
					s.ttl = handoffTTL
				}
				rs := redsync.New(redsyncgoredis.NewPool(e.client))
				return &redsyncC{rs: rs, key: e.st.LockKey(lockName) + ":redsync", s: s}, nil
			},
		},
	}
}

type redislockC struct {
	c   *redislock.Client
	key string
	s   setup
}

func (c *redislockC) acquire(ctx context.Context) (held, error) {
	if _, ok := ctx.Deadline(); !ok {
		return nil, errors.New("redislock needs a deadline")
	}
	l, err := c.c.Obtain(ctx, c.key, c.s.ttl, &redislock.Options{RetryStrategy: redislock.LinearBackoff(10 * time.Millisecond)})
	if err != nil {
		return nil, err
	}
	h := &peerHeld{rel: func(ctx context.Context) error { return l.Release(ctx) }}
	if c.s.keepAlive {
		h.ref = startRefresher(c.s.ttl/3, func(ctx context.Context) error { return l.Refresh(ctx, c.s.ttl, nil) })
	} else {
		h.clock.mark()
	}
	return h, nil
}

func (c *redislockC) close() {}

type redsyncC struct {
	rs  *redsync.Redsync
	key string
	s   setup
}

func (c *redsyncC) acquire(ctx context.Context) (held, error) {
	m := c.rs.NewMutex(c.key, redsync.WithExpiry(c.s.ttl), redsync.WithTries(1<<20))
	if err := m.LockContext(ctx); err != nil {
		return nil, err
	}
	h := &peerHeld{rel: func(ctx context.Context) error {
		ok, err := m.UnlockContext(ctx)
		if err == nil && !ok {
			err = errors.New("redsync: unlock failed")
		}
		return err
	}}
	if c.s.keepAlive {
		h.ref = startRefresher(c.s.ttl/3, func(ctx context.Context) error {
			ok, err := m.ExtendContext(ctx)
			if err == nil && !ok {
				err = errors.New("redsync: extend failed")
			}
			return err
		})
	} else {
		h.clock.mark()
	}
	return h, nil
}

func (c *redsyncC) close() {}

// peerHeld is a held term of a peer whose renewals the bench drives itself
// (the peer has no keep-alive of its own, or it cannot report its renewals).
type peerHeld struct {
	rel   func(ctx context.Context) error
	ref   *refresher
	clock renewClock
}

func (h *peerHeld) release(ctx context.Context) error {
	if h.ref != nil {
		h.ref.stop()
	}
	return h.rel(ctx)
}

func (h *peerHeld) crash() {
	if h.ref != nil {
		h.ref.stop()
	}
}

func (h *peerHeld) lastRenewal() time.Time {
	if h.ref != nil {
		return h.ref.clock.get()
	}
	return h.clock.get()
}
