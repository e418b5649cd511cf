package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// Scenario names, as keys of Results.Samples.
const (
	scHandoff    = "handoff"       // ms, release long after the waiter started
	scEarly      = "handoff-early" // ms, release right after the waiter started
	scFailover   = "failover"      // ms from the holder's last successful renewal to the takeover
	scCycles     = "cycles"        // lock+unlock cycles per second, one client
	scContention = "contention"    // cycles per second, 8 contenders
)

type acqResult struct {
	h   held
	at  time.Time
	err error
}

func wait(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// sampleTimeout bounds one blocking acquire in a scenario.
const sampleTimeout = 60 * time.Second

// runHandoff measures n hand-offs between two contenders of l on one lock:
// the waiter is already waiting when the holder releases, delay(i) after the
// waiter's acquire call started. The hand-off is the time from the release
// call to the waiter's acquire returning. The two swap roles each sample.
func runHandoff(ctx context.Context, r *Results, scenario string, l *lib, lockName string, n int, delay func(i int) time.Duration) {
	key := l.key()
	a, err := l.newContender(ctx, lockName, setup{identity: "a"})
	if err != nil {
		r.fail(scenario, key)
		logf("%s %s: %v", scenario, key, err)
		return
	}
	defer a.close()
	b, err := l.newContender(ctx, lockName, setup{identity: "b"})
	if err != nil {
		r.fail(scenario, key)
		logf("%s %s: %v", scenario, key, err)
		return
	}
	defer b.close()
	actx, cancel := context.WithTimeout(ctx, sampleTimeout)
	h, err := a.acquire(actx)
	cancel()
	if err != nil {
		r.fail(scenario, key)
		logf("%s %s: first acquire: %v", scenario, key, err)
		return
	}
	waiter := b
	other := a
	for i := 0; i < n && ctx.Err() == nil; i++ {
		sctx, cancel := context.WithTimeout(ctx, sampleTimeout)
		ch := make(chan acqResult, 1)
		started := time.Now()
		go func() {
			w, err := waiter.acquire(sctx)
			ch <- acqResult{w, time.Now(), err}
		}()
		wait(sctx, time.Until(started.Add(delay(i))))
		rel := time.Now()
		if err := h.release(sctx); err != nil {
			logf("%s %s: release: %v", scenario, key, err)
		}
		res := <-ch
		cancel()
		if res.err != nil {
			r.fail(scenario, key)
			logf("%s %s: waiter: %v", scenario, key, res.err)
			// Start over with a fresh holder.
			actx, cancel := context.WithTimeout(ctx, sampleTimeout)
			h, err = other.acquire(actx)
			cancel()
			if err != nil {
				return
			}
			continue
		}
		if res.at.Before(rel) {
			r.violate(scenario, key)
		}
		r.add(scenario, key, ms(res.at.Sub(rel)))
		h = res.h
		waiter, other = other, waiter
	}
	rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	h.release(rctx)
	cancel()
}

// runFailover measures one crash failover: the holder renews its term until
// it crashes (it stops renewing without releasing, at a random point of its
// renewal interval, after at least one renewal); the waiter was already
// waiting. The failover is the time from the answer to the holder's last
// successful renewal to the waiter's acquire returning. The holder first
// waits a random time up to phase: a sample starts right after the previous
// one's failover, which a server's periodic expiry check decided, so without
// the wait every sample's crash falls at the same phase of that check.
func runFailover(ctx context.Context, r *Results, l *lib, lockName string, ttl, phase time.Duration) {
	key := l.key()
	s := setup{ttl: ttl, keepAlive: true}
	s.identity = "a"
	a, err := l.newContender(ctx, lockName, s)
	if err != nil {
		r.fail(scFailover, key)
		logf("failover %s: %v", key, err)
		return
	}
	defer a.close()
	s.identity = "b"
	b, err := l.newContender(ctx, lockName, s)
	if err != nil {
		r.fail(scFailover, key)
		logf("failover %s: %v", key, err)
		return
	}
	defer b.close()
	sctx, cancel := context.WithTimeout(ctx, sampleTimeout)
	defer cancel()
	if phase > 0 {
		wait(sctx, time.Duration(rand.Int64N(int64(phase))))
	}
	h, err := a.acquire(sctx)
	if err != nil {
		r.fail(scFailover, key)
		logf("failover %s: acquire: %v", key, err)
		return
	}
	first := h.lastRenewal()
	ch := make(chan acqResult, 1)
	go func() {
		w, err := b.acquire(sctx)
		ch <- acqResult{w, time.Now(), err}
	}()
	// Wait for a renewal, then crash at a random point of the interval.
	deadline := time.Now().Add(5 * ttl)
	for !h.lastRenewal().After(first) && time.Now().Before(deadline) && sctx.Err() == nil {
		wait(sctx, 2*time.Millisecond)
	}
	if !h.lastRenewal().After(first) {
		logf("failover %s: no renewal within %v", key, 5*ttl)
	}
	wait(sctx, time.Duration(rand.Int64N(int64(ttl/3))))
	crashAt := time.Now()
	h.crash()
	res := <-ch
	if res.err != nil {
		r.fail(scFailover, key)
		logf("failover %s: waiter: %v", key, res.err)
		return
	}
	last := h.lastRenewal()
	if res.at.Before(crashAt) {
		r.violate(scFailover, key)
	}
	r.add(scFailover, key, ms(res.at.Sub(last)))
	rctx, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	res.h.release(rctx)
	cancel2()
}

// runCycles counts lock+unlock cycles of one client for d.
func runCycles(ctx context.Context, r *Results, l *lib, lockName string, d time.Duration) {
	key := l.key()
	c, err := l.newContender(ctx, lockName, setup{identity: "solo"})
	if err != nil {
		r.fail(scCycles, key)
		logf("cycles %s: %v", key, err)
		return
	}
	defer c.close()
	sctx, cancel := context.WithTimeout(ctx, d+sampleTimeout)
	defer cancel()
	n := 0
	start := time.Now()
	end := start.Add(d)
	for time.Now().Before(end) && sctx.Err() == nil {
		h, err := c.acquire(sctx)
		if err != nil {
			r.fail(scCycles, key)
			logf("cycles %s: acquire: %v", key, err)
			return
		}
		if err := h.release(sctx); err != nil {
			r.fail(scCycles, key)
			logf("cycles %s: release: %v", key, err)
			return
		}
		n++
	}
	r.add(scCycles, key, float64(n)/time.Since(start).Seconds())
}

// contentionRound is one run of k contenders on one lock.
type contentionRound struct {
	Cycles   int     `json:"cycles"`
	Seconds  float64 `json:"seconds"`
	Counts   []int   `json:"counts"`    // acquisitions per contender
	MaxWait  int     `json:"max_wait"`  // most cycles a contender waited for its next turn
	MinShare float64 `json:"min_share"` // smallest count / fair share
	// Repeat is the fraction of turns taken by the contender that had the
	// previous turn (a fair lottery among k: 1/k; the releaser winning its
	// own race against the woken waiters: near 1).
	Repeat float64 `json:"repeat"`
	// MaxWaitAt says where the longest wait was: "first" (before a
	// contender's first turn), "between" (between two turns) or "last"
	// (after its last turn, to the end of the round).
	MaxWaitAt string `json:"max_wait_at"`
}

// runContention runs k contenders of l, each acquiring and releasing in a
// loop for d, and records who got the lock in which order.
func runContention(ctx context.Context, r *Results, l *lib, lockName string, k int, d time.Duration) *contentionRound {
	key := l.key()
	cs := make([]contender, k)
	for i := range cs {
		c, err := l.newContender(ctx, lockName, setup{identity: fmt.Sprintf("c%d", i)})
		if err != nil {
			r.fail(scContention, key)
			logf("contention %s: %v", key, err)
			return nil
		}
		defer c.close()
		cs[i] = c
	}
	var (
		mu     sync.Mutex
		order  []int
		inside atomic.Int32
		wg     sync.WaitGroup
	)
	start := time.Now()
	end := start.Add(d)
	// Waiters still blocked at the end give up a little later; pollers
	// with long intervals (pglock) need their interval.
	sctx, cancel := context.WithDeadline(ctx, end.Add(3*time.Second))
	defer cancel()
	for i, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) && sctx.Err() == nil {
				h, err := c.acquire(sctx)
				if err != nil {
					if sctx.Err() == nil {
						r.fail(scContention, key)
						logf("contention %s: acquire: %v", key, err)
					}
					return
				}
				if inside.Add(1) != 1 {
					r.violate(scContention, key)
				}
				if time.Now().Before(end) {
					mu.Lock()
					order = append(order, i)
					mu.Unlock()
				}
				inside.Add(-1)
				rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				err = h.release(rctx)
				cancel()
				if err != nil {
					r.fail(scContention, key)
					logf("contention %s: release: %v", key, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	cr := &contentionRound{Cycles: len(order), Seconds: d.Seconds(), Counts: make([]int, k)}
	last := make([]int, k)
	for i := range last {
		last[i] = -1
	}
	repeats := 0
	for idx, who := range order {
		if idx > 0 && order[idx-1] == who {
			repeats++
		}
		cr.Counts[who]++
		if w := idx - last[who] - 1; w > cr.MaxWait {
			cr.MaxWait = w
			cr.MaxWaitAt = "between"
			if last[who] < 0 {
				cr.MaxWaitAt = "first"
			}
		}
		last[who] = idx
	}
	for i := range last {
		if w := len(order) - last[i] - 1; w > cr.MaxWait {
			cr.MaxWait = w
			cr.MaxWaitAt = "last"
		}
	}
	fair := float64(len(order)) / float64(k)
	cr.MinShare = 1
	for _, c := range cr.Counts {
		if s := float64(c) / fair; fair > 0 && s < cr.MinShare {
			cr.MinShare = s
		}
	}
	if len(order) == 0 {
		cr.MinShare = 0
	}
	if len(order) > 1 {
		cr.Repeat = float64(repeats) / float64(len(order)-1)
	}
	r.add(scContention, key, float64(len(order))/d.Seconds())
	return cr
}
