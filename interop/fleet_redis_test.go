package interop_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/bsm/redislock"
	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/faultproxy"
	"github.com/leasehold/leasehold/interop/fleet"
	lhredis "github.com/leasehold/leasehold/store/redis"
)

// Timings of the Redis fleet: both kinds hold a 1 s lease, renew it every
// 200 ms, and try every 100 ms while they wait. A leasehold holder trusts
// its term 600 ms after its last successful renewal was sent; a redislock
// holder until its own deadline, the send of its last successful refresh
// plus the TTL (Redis expires the key no earlier).
const (
	redisTTL   = time.Second
	redisRenew = 200 * time.Millisecond
	redisRetry = 100 * time.Millisecond
)

var redisTimings = leasehold.Timings{
	LeaseDuration: redisTTL,
	RenewDeadline: 600 * time.Millisecond,
	RenewInterval: redisRenew,
	RetryPeriod:   redisRetry,
}

// redisFleet is one Redis fleet's setup.
type redisFleet struct {
	e       *env
	name    string
	key     string
	proxies map[string]*faultproxy.Proxy
}

func newRedisFleet(t *testing.T) *redisFleet {
	e := newEnv(t)
	f := &redisFleet{e: e, name: "fleet", proxies: map[string]*faultproxy.Proxy{}}
	f.key = e.store().LockKey(f.name)
	return f
}

// proxy makes who's proxy to Redis.
func (f *redisFleet) proxy(who string) *faultproxy.Proxy {
	p := newProxy(f.e.t, f.e.addr)
	f.proxies[who] = p
	return p
}

// node is a leasehold Elector whose store handle goes through its own proxy.
func (f *redisFleet) node(who string, seed uint64) *fleet.Node {
	p := f.proxy(who)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := lhredis.Open(ctx, "redis://"+p.Addr()+"/0?prefix="+f.e.prefix)
	if err != nil {
		f.e.t.Fatal(err)
	}
	f.e.t.Cleanup(func() { st.Close() })
	return &fleet.Node{Name: who, Store: st, Lease: f.name, Timings: redisTimings,
		Hold: holdFor(seed, 300*time.Millisecond, 900*time.Millisecond), Cool: 200 * time.Millisecond}
}

// peer is a redislock user through its own proxy: it obtains the key (one
// SET NX PX per try, every redisRetry), refreshes it every redisRenew, and
// leads until a refresh says the lock is gone or its own deadline passes;
// it releases after its hold. With ignoreLoss (the negative control) it
// leads for its whole hold whatever happens.
func (f *redisFleet) peer(who string, seed uint64, ignoreLoss bool) fleet.Member {
	p := f.proxy(who)
	client := goredis.NewClient(&goredis.Options{Addr: p.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true,
		DialTimeout: redisRenew, PoolSize: 2})
	f.e.t.Cleanup(func() { client.Close() })
	rl := redislock.New(client)
	hold := holdFor(seed, 300*time.Millisecond, 900*time.Millisecond)
	if ignoreLoss {
		hold = holdFor(seed, 2*time.Second, 3*time.Second)
	}
	call := func(ctx context.Context) (context.Context, context.CancelFunc) {
		return context.WithTimeout(ctx, redisRenew)
	}
	return func(ctx context.Context, rec *fleet.Recorder) error {
		for ctx.Err() == nil {
			waited := rec.Waiting(who, fleet.Peer)
			var lock *redislock.Lock
			var deadline time.Time
			for ctx.Err() == nil {
				sent := time.Now()
				cctx, cancel := call(ctx)
				l, err := rl.Obtain(cctx, f.key, redisTTL, nil) // one try
				cancel()
				if err == nil {
					lock, deadline = l, sent.Add(redisTTL)
					break
				}
				fleet.Pause(ctx, redisRetry)
			}
			if lock == nil {
				waited(false)
				return nil
			}
			waited(true)
			term := rec.Begin(who, "redislock", fleet.Peer, 0)
			if !ignoreLoss {
				rec.SetDeadline(term, deadline)
			}
			end := time.Now().Add(hold())
			how := "released"
		leading:
			for {
				fleet.Pause(ctx, min(redisRenew, time.Until(end)))
				now := time.Now()
				switch {
				case ctx.Err() != nil:
					how = "stopped"
					break leading
				case !now.Before(end):
					break leading
				case !ignoreLoss && !now.Before(deadline):
					how = "lost" // its own deadline passed without a refresh
					break leading
				}
				sent := time.Now()
				cctx, cancel := call(ctx)
				err := lock.Refresh(cctx, redisTTL, nil)
				cancel()
				switch {
				case err == nil:
					deadline = sent.Add(redisTTL)
					if !ignoreLoss {
						rec.SetDeadline(term, deadline)
					}
				case errors.Is(err, redislock.ErrNotObtained) && !ignoreLoss:
					how = "lost"
					break leading
				}
			}
			rec.End(term, time.Now(), how)
			if how == "released" {
				cctx, cancel := call(context.WithoutCancel(ctx))
				lock.Release(cctx)
				cancel()
			}
			fleet.Pause(ctx, 200*time.Millisecond)
		}
		return nil
	}
}

func (f *redisFleet) faults(seed uint64) *fleet.Faults {
	return &fleet.Faults{Proxies: f.proxies, Every: 150 * time.Millisecond,
		Min: 200 * time.Millisecond, Max: 3 * redisTTL / 2, Seed: seed}
}

// TestFleetRedis: two leasehold electors and two redislock users on one
// Redis key, under delays, resets, partitions and outages of each one's
// connection. No two lead at once, and a waiting leasehold node gets in
// within a few redislock terms.
func TestFleetRedis(t *testing.T) {
	t.Parallel()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	t.Run("mixed", func(t *testing.T) {
		t.Parallel()
		f := newRedisFleet(t)
		members := []fleet.Member{f.node("lh-1", seed+1).Member(), f.node("lh-2", seed+2).Member(),
			f.peer("redislock-1", seed+3, false), f.peer("redislock-2", seed+4, false)}
		res := fleet.Run(context.Background(), fleet.Options{Duration: fleetRun, Faults: f.faults(seed)}, members...)
		requireFleet(t, res, 50, fleetMaxWait)
	})
	t.Run("control-peer-ignores-loss", func(t *testing.T) {
		t.Parallel()
		f := newRedisFleet(t)
		members := []fleet.Member{f.node("lh-1", seed+1).Member(), f.node("lh-2", seed+2).Member(),
			f.peer("redislock-deaf", seed+3, true)}
		res := fleet.Run(context.Background(), controlRun(f.faults(seed+10), "redislock-deaf", redisTTL), members...)
		requireCaught(t, res, "redislock-deaf")
	})
	t.Run("control-leasehold-trusts-past-safeUntil", func(t *testing.T) {
		t.Parallel()
		f := newRedisFleet(t)
		bad := f.node("lh-overtrust", seed+1)
		bad.Overtrust = 2 * redisTTL
		bad.Hold = holdFor(seed, 3*redisTTL, 5*redisTTL) // long terms, so that faults end some
		members := []fleet.Member{bad.Member(), f.peer("redislock-1", seed+3, false), f.peer("redislock-2", seed+4, false)}
		res := fleet.Run(context.Background(), controlRun(f.faults(seed+20), "lh-overtrust", redisTTL), members...)
		requireCaught(t, res, "lh-overtrust")
	})
	t.Run("control-slow-waiter", func(t *testing.T) {
		t.Parallel()
		f := newRedisFleet(t)
		slow := f.node("lh-slow", seed+1)
		slow.Store = hideWatch{slow.Store}
		slow.Timings.RetryPeriod = 900 * time.Millisecond
		slow.Timings.RenewDeadline = 950 * time.Millisecond
		members := []fleet.Member{slow.Member(), f.peer("redislock-1", seed+3, false), f.peer("redislock-2", seed+4, false),
			f.peer("redislock-3", seed+5, false)}
		res := fleet.Run(context.Background(), fleet.Options{Duration: 3 * fleetControlRun, Until: fleet.WaitedOver(fleetMaxWait)}, members...)
		t.Logf("negative control run:\n%s", res.Summary())
		if m := res.MaxWait(); m <= fleetMaxWait {
			t.Errorf("negative control not caught: a leasehold node polling every %v without a watch waited through at most %d redislock terms (per wait %v), within the bound %d",
				slow.Timings.RetryPeriod, m, res.Fairness, fleetMaxWait)
		} else {
			t.Logf("caught: waited through %d peer terms", m)
		}
	})
}

// fleetMaxWait bounds the peer terms a waiting leasehold node waits through.
var fleetMaxWait = 6
