package mysql

import (
	"context"
	"database/sql"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"
)

// MySQL and MariaDB push nothing to a client: there is no LISTEN/NOTIFY,
// and a client learns of a change only by asking. So Watch is a poller,
// measured against the alternatives (BENCHMARKS.md, the README): one
// goroutine per Store, running only while somebody waits, reads the state
// (holder, epoch, live on the server's clock) of every watched lease in
// one query each WatchInterval, and wakes the watchers of a lease whose
// state changed. A release made through the same Store wakes its watchers
// at once, without waiting for a poll. The expiry of a crashed holder's
// term needs no watch: Acquire's ErrHeld record says how long is left, and
// the waiter's timer is set to it.

// leaseState is what a watcher is told about: a change of any part.
type leaseState struct {
	found  bool
	holder string
	epoch  int64
	live   bool
	// qhead is the position of the first live place of the lease's fair
	// queue (0: none), read only for names queued through this Store: a
	// waiter learns it moved up when the place ahead of it leaves.
	qhead int64
}

type poller struct {
	s *Store

	mu      sync.Mutex
	state   map[string]leaseState // the watched names and their last state
	started bool
	quit    chan struct{}
	done    chan struct{}
	// polls counts queries sent, for tests.
	polls int64
	// wait is the wait before the next poll for a WatchInterval: jitter;
	// a test may replace it before the first Watch.
	wait func(time.Duration) time.Duration
}

func newPoller(s *Store) *poller {
	return &poller{s: s, state: map[string]leaseState{}, quit: make(chan struct{}), done: make(chan struct{}), wait: jitter}
}

// WatchesGrants implements store.GrantWatcher: the poller compares each
// watched lease's state, which a grant changes as a release does. With
// Options.NoWatch there is no watch.
func (s *Store) WatchesGrants() bool { return !s.opts.NoWatch }

// WatchLag implements store.WatchLagger: a waiter in another process learns
// of a release at its next poll, at most 1½ WatchIntervals later (the
// longest jittered wait). With Options.NoWatch there is no watch.
func (s *Store) WatchLag() time.Duration {
	if s.opts.NoWatch {
		return 0
	}
	return s.opts.WatchInterval * 3 / 2
}

// Watch implements store.Watcher. It reads the lease's state at once (the
// baseline against which the poller compares), so no change after Watch
// returns is missed; a change since the caller's own last read wakes the
// caller at the first poll at the latest.
func (s *Store) Watch(ctx context.Context, name string) (<-chan struct{}, error) {
	if err := s.life.Check(ctx); err != nil {
		return nil, err
	}
	op := "watch " + strconv.Quote(name)
	if err := kit.CheckName(op, name); err != nil {
		return nil, err
	}
	if s.opts.NoWatch {
		return nil, kit.Wrap(op, ErrNoWatch)
	}
	st, err := s.readStates(ctx, []string{name})
	if err != nil {
		return nil, s.opErr(op, err)
	}
	ch, err := s.hub.Watch(ctx, name)
	if err != nil {
		return nil, kit.Wrap(op, err)
	}
	s.poll.add(name, st[name])
	return ch, nil
}

// add starts watching name (or compares a fresh read with the state
// watched already), and starts the poller on first use.
func (p *poller) add(name string, fresh leaseState) {
	p.mu.Lock()
	old, ok := p.state[name]
	p.state[name] = fresh
	if !p.started {
		p.started = true
		go p.run()
	}
	p.mu.Unlock()
	if ok && old != fresh {
		// Changed since the poller last looked: its older watchers have
		// not been told yet.
		p.s.hub.Notify(name)
	}
	p.s.bells.watch(name, fresh)
}

// update is a doorbell's read of name: the watchers are woken if it
// changed since the poller last looked.
func (p *poller) update(name string, fresh leaseState) {
	p.mu.Lock()
	old, ok := p.state[name]
	if ok {
		p.state[name] = fresh
	}
	p.mu.Unlock()
	if !ok {
		return // no longer watched
	}
	if old != fresh {
		p.s.hub.Notify(name)
	}
	p.s.bells.watch(name, fresh)
}

// idle is the hub's Idle: the last watch of name ended.
func (p *poller) idle(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.s.hub.Count(name) == 0 {
		delete(p.state, name)
		p.s.bells.unwatch(name)
	}
}

func (p *poller) stop() {
	p.mu.Lock()
	started := p.started
	p.started = true // no start after stop
	p.mu.Unlock()
	close(p.quit)
	if started {
		<-p.done
	}
}

// run polls while the store is open. With nothing watched it sends nothing.
//
// The waits between polls are jittered, uniform in [½, 1½) × WatchInterval
// (the same rate on average): waiters in other processes learn of a
// release at their own poll, and with a fixed tick each Store's polls keep
// one phase against the others', so the Store whose tick falls just after
// another's is the first to see a release only within the sliver between
// the two, every time (measured with 8 contenders, one Store each: one
// waited up to 194 turns of others at the default 25 ms, 478 at 100 ms,
// where a fair lottery exceeds about 100 once in a thousand).
func (p *poller) run() {
	defer close(p.done)
	every := p.s.opts.WatchInterval
	t := time.NewTimer(p.wait(every))
	defer t.Stop()
	for {
		select {
		case <-p.quit:
			return
		case <-t.C:
		}
		t.Reset(p.wait(every))
		p.mu.Lock()
		names := make([]string, 0, len(p.state))
		for n := range p.state {
			names = append(names, n)
		}
		p.mu.Unlock()
		if len(names) == 0 {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), max(p.s.opts.WatchInterval*10, time.Second))
		go func() { // end the query when the store closes
			select {
			case <-p.quit:
				cancel()
			case <-ctx.Done():
			}
		}()
		fresh, err := p.s.readStates(ctx, names)
		cancel()
		p.mu.Lock()
		p.polls++
		p.mu.Unlock()
		if err != nil {
			// Polled again next tick; the waiters' own timers bound
			// how long they wait meanwhile.
			continue
		}
		var changed, watched []string
		p.mu.Lock()
		for _, n := range names {
			old, ok := p.state[n]
			if !ok {
				continue // no longer watched
			}
			watched = append(watched, n)
			if st := fresh[n]; st != old {
				p.state[n] = st
				changed = append(changed, n)
			}
		}
		p.mu.Unlock()
		for _, n := range changed {
			p.s.hub.Notify(n)
		}
		for _, n := range watched {
			p.s.bells.watch(n, fresh[n])
		}
	}
}

// jitter is d × a uniform random factor in [½, 1½).
func jitter(d time.Duration) time.Duration {
	return d/2 + rand.N(d)
}

// readStates reads the state of names, 500 at most per query.
func (s *Store) readStates(ctx context.Context, names []string) (map[string]leaseState, error) {
	out := make(map[string]leaseState, len(names))
	all := names
	for len(names) > 0 {
		chunk := names[:min(len(names), 500)]
		names = names[len(chunk):]
		args := make([]any, len(chunk))
		for i, n := range chunk {
			args[i] = n
		}
		q := `SELECT l.name, COALESCE(l.holder, ''), l.epoch, l.expires_at > ` + now + ` FROM ` + s.n.table +
			` AS l WHERE l.name IN (?` + strings.Repeat(",?", len(chunk)-1) + `)`
		err := query(ctx, s.db, q, args, func(r *sql.Rows) error {
			var name string
			var st leaseState
			if err := r.Scan(&name, &st.holder, &st.epoch, &st.live); err != nil {
				return err
			}
			st.found = true
			st.live = st.live && st.holder != ""
			out[name] = st
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	if err := s.readQueueHeads(ctx, all, out); err != nil {
		return nil, err
	}
	return out, nil
}

// Polls reports how many watch queries the store has sent (for tests and
// for the README's cost figure).
func (s *Store) Polls() int64 {
	s.poll.mu.Lock()
	defer s.poll.mu.Unlock()
	return s.poll.polls
}
