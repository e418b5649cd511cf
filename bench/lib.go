package main

import (
	"context"
	"sync"
	"time"
)

// A contender is one client of a lock or election library: it can wait for
// the lock (acquire blocks until it holds it or ctx ends) and holds at most
// one term at a time.
type contender interface {
	acquire(ctx context.Context) (held, error)
	close()
}

// held is one held term.
type held interface {
	// release gives the lock back the way the library's users do.
	release(ctx context.Context) error
	// crash stops renewing without releasing, as a killed process would: the
	// term is left for the store to expire. After crash returns no renewal
	// of this term succeeds any more.
	crash()
	// lastRenewal is when the answer to the last successful renewal (or to
	// the acquire, if none) arrived.
	lastRenewal() time.Time
}

// setup says how a scenario wants its contenders.
type setup struct {
	// ttl is the lease duration; zero means the scenario's default for the
	// library (see lib.defaultTTL).
	ttl time.Duration
	// keepAlive renews the term while it is held (failover needs it).
	keepAlive bool
	// identity names the contender.
	identity string
}

// lib is one library on one store.
type lib struct {
	name  string // "leasehold lock", "redislock", ...
	store string // "redis", "postgres", "etcd", "kubernetes"
	// peer is false for leasehold itself.
	peer bool
	// kind is "lock" or "elector": electors are not run in the cycles and
	// contention scenarios.
	kind string
	// config describes the settings used, for the report.
	config string
	// lockName is the name of the lock a scenario uses; each scenario
	// sets it before creating contenders.
	newContender func(ctx context.Context, lockName string, s setup) (contender, error)
}

func (l *lib) key() string { return l.store + "/" + l.name }

// renewClock records the arrival time of the last successful renewal.
type renewClock struct {
	mu   sync.Mutex
	last time.Time
}

func (r *renewClock) mark() {
	now := time.Now()
	r.mu.Lock()
	if now.After(r.last) {
		r.last = now
	}
	r.mu.Unlock()
}

func (r *renewClock) get() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last
}

// refresher renews a term every interval with renew (a peer library's
// refresh call) until stopped. stop waits for a renewal in flight to finish,
// so that after it returns no renewal can succeed.
type refresher struct {
	clock   renewClock
	stopc   chan struct{}
	done    chan struct{}
	once    sync.Once
	renewed func() // optional hook
}

func startRefresher(interval time.Duration, renew func(ctx context.Context) error) *refresher {
	r := &refresher{stopc: make(chan struct{}), done: make(chan struct{})}
	r.clock.mark()
	go func() {
		defer close(r.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-r.stopc:
				return
			case <-t.C:
			}
			ctx, cancel := context.WithTimeout(context.Background(), interval)
			err := renew(ctx)
			cancel()
			if err == nil {
				r.clock.mark()
			}
		}
	}()
	return r
}

func (r *refresher) stop() {
	r.once.Do(func() { close(r.stopc) })
	<-r.done
}
