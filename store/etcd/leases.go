package etcd

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/etcd/internal/etcdapi"
)

// This file keeps the etcd leases a Store handle granted: which term each
// one carries, whether a keep-alive for it may still be on its way to etcd,
// and the pool of leases that carry no key and may back the handle's next
// grant. The rules that make reuse safe are in the package doc ("Reusing etcd
// leases"); in short:
//
//   - A lease carries at most one key at a time. It enters the pool only after
//     a Release through this handle deleted its term's key (the delete's
//     previous value names this lease), or after an attempt that wrote nothing.
//   - This handle sends a keep-alive for a lease on behalf of term t only while
//     its table says the lease carries t. Once the lease has gone back to the
//     pool, or on to another term, t's late renewals get ErrNotHeld without a
//     keep-alive. Another handle never keeps alive a lease it did not grant
//     (see Store.adopt).
//   - A lease is pooled only if every keep-alive this handle sent for it was
//     answered: an unanswered one could still be applied by etcd, and must not
//     land on the next term.

// ownLease is what a handle knows of an etcd lease it granted.
type ownLease struct {
	_ [0]func() // not comparable: spares the binary an equality function

	secs int64 // the TTL asked for at grant, in whole seconds: the pool's key
	// term is the term whose key the lease carries; zero while the lease is
	// pooled or an acquire is trying with it.
	term   store.Term
	pooled bool
	// inflight counts keep-alives sent for the lease on behalf of term and
	// not yet returned; tainted records that one of them (or of an acquire's)
	// returned without etcd's answer, so etcd may still apply it later.
	inflight int
	tainted  bool
	// aliveUntil is a lower bound of the lease's expiry on this host's clock:
	// the send time of its last answered grant or keep-alive plus the TTL etcd
	// answered.
	aliveUntil time.Time
	// fromPlace: the lease was a queue place's, and carries the term that
	// place became (grantPlace). Freed, it goes back to the place pool.
	fromPlace bool
}

const (
	// maxPooled bounds the leases a handle keeps for reuse; more are revoked.
	maxPooled = 128
	// maxOwnLeases bounds the table. When it is full, the entries of leases
	// not in the pool are dropped: a term whose entry is gone is renewed by
	// moving its key to a new lease (adopt) and its lease is revoked, not
	// pooled, on release. Dropping an entry never allows a keep-alive.
	maxOwnLeases = 1 << 16
	// poolMinLeft is how much life a pooled lease must have left to be used
	// (at most half its TTL): its keep-alive is sent alongside the acquiring
	// transaction, which must land while the lease is alive.
	poolMinLeft = time.Second
)

// freshSlack is how much of its TTL a pooled lease may have lost and still
// back a grant without a keep-alive: the grant's Remaining is then what the
// lease has left (the core shortens the term by the shortfall), and one
// keep-alive every freshSlack of reuse restores it. An eighth of the TTL, at
// least 100 ms.
func freshSlack(ttl time.Duration) time.Duration { return max(ttl/8, 100*time.Millisecond) }

// trackLease records a lease this handle just granted for an acquire.
func (s *Store) trackLease(id etcdapi.LeaseID, secs int64, aliveUntil time.Time) {
	s.termsMu.Lock()
	defer s.termsMu.Unlock()
	if len(s.leases) >= maxOwnLeases {
		for lid, l := range s.leases {
			if !l.pooled {
				delete(s.leases, lid)
			}
		}
	}
	s.leases[id] = &ownLease{secs: secs, aliveUntil: aliveUntil}
}

// takePooled removes and returns the most recently pooled lease for secs
// that has enough life left; the ones it finds too old are revoked.
func (s *Store) takePooled(secs int64, now time.Time) (etcdapi.LeaseID, time.Time, bool) {
	s.termsMu.Lock()
	var stale []etcdapi.LeaseID
	defer func() {
		s.termsMu.Unlock()
		for _, id := range stale {
			s.revokeLater(id)
		}
	}()
	ids := s.pool[secs]
	for len(ids) > 0 {
		id := ids[len(ids)-1]
		ids = ids[:len(ids)-1]
		l := s.leases[id]
		if l == nil || !l.pooled {
			continue // dropped meanwhile
		}
		if l.aliveUntil.Sub(now) < min(poolMinLeft, time.Duration(secs)*time.Second/2) {
			delete(s.leases, id)
			stale = append(stale, id)
			continue
		}
		l.pooled = false
		s.setPool(secs, ids)
		return id, l.aliveUntil, true
	}
	s.setPool(secs, ids)
	return 0, time.Time{}, false
}

func (s *Store) setPool(secs int64, ids []etcdapi.LeaseID) {
	if len(ids) == 0 {
		delete(s.pool, secs)
	} else {
		s.pool[secs] = ids
	}
}

// pooledCount is the number of pooled leases; termsMu is held.
func (s *Store) pooledCount() int {
	n := 0
	for _, ids := range s.pool {
		n += len(ids)
	}
	return n
}

// putPool puts lease id, which carries no key, in the pool if the table
// says it carried term t (the zero Term: an acquire attempt's lease that
// nothing was written with), no keep-alive for it is unanswered or in flight,
// the pool has room and the store is open; otherwise it forgets and revokes
// it. A lease with no entry (granted by another handle, or dropped from a full
// table) is revoked; one whose entry has moved on to another term is left
// alone. aliveUntil (if later than what the table has) and tainted are what
// the caller just learned. The check and the change are one step under
// termsMu, so no keep-alive or acquire slips in between.
func (s *Store) putPool(id etcdapi.LeaseID, t store.Term, aliveUntil time.Time, tainted bool) {
	closed := s.life.Closed()
	s.termsMu.Lock()
	l := s.leases[id]
	if l == nil || l.pooled || l.term != t {
		s.termsMu.Unlock()
		if l == nil {
			s.revokeLater(id) // not (or no longer) in the table: ours to give back
		}
		return
	}
	l.tainted = l.tainted || tainted
	if aliveUntil.After(l.aliveUntil) {
		l.aliveUntil = aliveUntil
	}
	keep := !closed && !l.tainted && l.inflight == 0 && s.pooledCount() < maxPooled
	if keep && l.fromPlace {
		// A place's lease goes back among place leases: a place lease is
		// never pooled as a term lease.
		s.dropLocked(id)
		s.termsMu.Unlock()
		s.poolPlaceLease(id, l.secs, l.aliveUntil)
		return
	}
	if keep {
		l.term, l.pooled = store.Term{}, true
		s.pool[l.secs] = append(s.pool[l.secs], id)
	} else {
		s.dropLocked(id)
	}
	s.termsMu.Unlock()
	if !keep {
		s.revokeLater(id)
	}
}

// dropLocked forgets lease id (and takes it out of the pool); termsMu is held.
func (s *Store) dropLocked(id etcdapi.LeaseID) {
	l := s.leases[id]
	if l == nil {
		return
	}
	delete(s.leases, id)
	if l.pooled {
		ids := s.pool[l.secs]
		for i, p := range ids {
			if p == id {
				ids = append(ids[:i:i], ids[i+1:]...)
				break
			}
		}
		s.setPool(l.secs, ids)
	}
}

// revokeLease forgets lease id and revokes it in the background.
func (s *Store) revokeLease(id etcdapi.LeaseID) {
	s.termsMu.Lock()
	s.dropLocked(id)
	s.termsMu.Unlock()
	s.revokeLater(id)
}

// bindLease records that lease id now carries term t's key (after a grant or
// a move of t's key onto it), with the given lower bound of its expiry.
// tainted is set if a keep-alive sent for it went unanswered.
func (s *Store) bindLease(id etcdapi.LeaseID, t store.Term, aliveUntil time.Time, tainted bool) {
	s.termsMu.Lock()
	defer s.termsMu.Unlock()
	if l := s.leases[id]; l != nil {
		l.term, l.pooled = t, false
		l.tainted = l.tainted || tainted
		if aliveUntil.After(l.aliveUntil) {
			l.aliveUntil = aliveUntil
		}
	}
}

// carries reports whether this handle's table says lease id carries term t.
func (s *Store) carries(id etcdapi.LeaseID, t store.Term) bool {
	s.termsMu.Lock()
	defer s.termsMu.Unlock()
	l := s.leases[id]
	return l != nil && !l.pooled && l.term == t
}

// releasedTerm settles lease id after term t's key was deleted from it by a
// Release through this handle: back to the pool if the table says it carried
// t (see putPool), else revoked. (A lease the delete's previous value names
// carried t's key at that moment, so it is in no pool: leases there carry no
// key.)
func (s *Store) releasedTerm(id etcdapi.LeaseID, t store.Term) {
	s.putPool(id, t, time.Time{}, false)
}

// endedTerm is called when term t is known not to be live (a renewal or
// release got ErrNotHeld): if lease id carries t in this handle's table, it
// carries no live key now, so it is forgotten and revoked. The check and the
// removal are one step under termsMu: once the lease is out of the table no
// Release can pool it and no Acquire can take it, so the revocation can only
// end what t left behind.
func (s *Store) endedTerm(id etcdapi.LeaseID, t store.Term) {
	s.termsMu.Lock()
	l := s.leases[id]
	ours := l != nil && !l.pooled && l.term == t
	if ours {
		s.dropLocked(id)
	}
	s.termsMu.Unlock()
	if ours {
		s.revokeLater(id)
	}
}

// keepAliveFor sends a keep-alive for lease id on behalf of term t, if and
// only if this handle's table says the lease carries t (ok false otherwise:
// nothing was sent). An answer that did not come back taints the lease.
func (s *Store) keepAliveFor(ctx context.Context, id etcdapi.LeaseID, t store.Term) (ttl int64, ok bool, err error) {
	s.termsMu.Lock()
	l := s.leases[id]
	if l == nil || l.pooled || l.term != t {
		s.termsMu.Unlock()
		return 0, false, nil
	}
	l.inflight++
	s.termsMu.Unlock()
	sent := time.Now()
	ttl, clean, err := s.keepAlive(ctx, id)
	s.termsMu.Lock()
	l.inflight--
	if !clean {
		l.tainted = true
	}
	if err == nil && sent.Add(time.Duration(ttl)*time.Second).After(l.aliveUntil) {
		l.aliveUntil = sent.Add(time.Duration(ttl) * time.Second)
	}
	s.termsMu.Unlock()
	return ttl, true, err
}

// keepAlive renews lease id once, as clientv3's KeepAliveOnce does (one
// request per attempt, retried while ctx lasts on Unavailable and Internal
// errors), and also reports whether every attempt that may have reached etcd
// came back with etcd's answer: a retried request may still be applied after
// a later one was answered, and a lease with such a request outstanding is
// never reused. A lease etcd does not know (or has expired) is
// etcdapi.ErrLeaseNotFound.
func (s *Store) keepAlive(ctx context.Context, id etcdapi.LeaseID) (ttl int64, clean bool, err error) {
	clean = true
	for attempt := 0; ; attempt++ {
		ttl, sent, err := s.keepAliveAttempt(ctx, id)
		if err == nil {
			if ttl <= 0 {
				return 0, clean, etcdapi.ErrLeaseNotFound
			}
			return ttl, clean, nil
		}
		if sent {
			clean = false
		}
		if ctx.Err() != nil {
			return 0, clean, contextError(ctx, err)
		}
		if c := etcdapi.CodeOf(err); c != etcdapi.Unavailable && c != etcdapi.Internal {
			return 0, clean, err
		}
		// Back off a little: stream creation waits for a ready connection,
		// but an Internal error can repeat at once.
		t := time.NewTimer(time.Duration(min(attempt+1, 10)) * 10 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return 0, clean, ctx.Err()
		case <-t.C:
		}
	}
}

// keepAliveAttempt sends one keep-alive request on its own stream and waits
// for its answer. sent reports whether the request may have left.
func (s *Store) keepAliveAttempt(ctx context.Context, id etcdapi.LeaseID) (ttl int64, sent bool, err error) {
	ttl, err = s.cli.KeepAliveOnce(ctx, id)
	return ttl, !errors.Is(err, etcdapi.ErrNotSent), err
}

// pooledLeases takes every lease out of the pool and the table (for Close).
func (s *Store) pooledLeases() []etcdapi.LeaseID {
	s.termsMu.Lock()
	defer s.termsMu.Unlock()
	return drainPool(s.pool, s.leases)
}

// drainPool empties pool (leases by TTL) and removes its leases from table,
// the handle's record of them; it returns the leases that were pooled.
func drainPool[V any](pool map[int64][]etcdapi.LeaseID, table map[etcdapi.LeaseID]V) []etcdapi.LeaseID {
	var ids []etcdapi.LeaseID
	for _, p := range pool {
		for _, id := range p {
			delete(table, id)
			ids = append(ids, id)
		}
	}
	clear(pool)
	return ids
}

// kaConn is a long-lived LeaseKeepAlive stream that the acquire path sends
// the keep-alive of a pooled lease on: one message on an open stream instead
// of a new stream per keep-alive (which costs a stream set-up, and with
// user/password authentication an Authenticate request, on every call).
// etcd's server handles a stream's requests one at a time, in order, and
// answers each (a lease it does not know with TTL 0), so answers are matched
// to requests in order, per lease ID. Renew keeps using a stream per
// keep-alive: a renewal of an expired lease waits in etcd until the lease is
// revoked, and must not hold up the requests queued behind it.
type kaConn struct {
	stream  etcdapi.KeepAliveStream
	cancel  context.CancelFunc
	sendMu  sync.Mutex // a gRPC stream takes one Send at a time
	mu      sync.Mutex
	broken  bool
	pending map[etcdapi.LeaseID][]chan keepAliveResult
}

// startKeepAlive sends a keep-alive for lease id and returns a function that
// waits for its result. It uses the handle's open keep-alive stream if there
// is one; otherwise it sends on a stream of its own (keepAlive) and opens the
// shared stream in the background for the next call.
func (s *Store) startKeepAlive(ctx context.Context, id etcdapi.LeaseID) func() keepAliveResult {
	s.acquireKeepAlives.Add(1)
	ch := make(chan keepAliveResult, 1)
	c := s.kaConnection()
	go func() {
		if c != nil {
			// Queue the answer's channel and send under sendMu, so that
			// requests and answers for one lease ID keep the same order.
			c.sendMu.Lock()
			c.mu.Lock()
			broken := c.broken
			if !broken {
				c.pending[id] = append(c.pending[id], ch)
			}
			c.mu.Unlock()
			if !broken {
				err := c.stream.Send(id)
				c.sendMu.Unlock()
				if err != nil {
					// The request may or may not have left: fail every
					// pending request (ours included) as unanswered.
					c.fail(err)
				}
				return
			}
			c.sendMu.Unlock()
		}
		ttl, clean, err := s.keepAlive(ctx, id)
		ch <- keepAliveResult{ttl, clean, err}
	}()
	return func() keepAliveResult {
		select {
		case r := <-ch:
			return r
		case <-ctx.Done():
			// The answer, if any, is left behind: the request counts as
			// unanswered.
			return keepAliveResult{clean: false, err: ctx.Err()}
		}
	}
}

// kaConnection returns the open keep-alive stream, or nil while there is
// none; then it starts opening one in the background (once at a time).
func (s *Store) kaConnection() *kaConn {
	s.kaMu.Lock()
	defer s.kaMu.Unlock()
	if s.ka != nil {
		s.ka.mu.Lock()
		broken := s.ka.broken
		s.ka.mu.Unlock()
		if !broken {
			return s.ka
		}
		s.ka = nil
	}
	// Under kaMu: the closed check and kaWG.Add are one step (see kaWG).
	if !s.kaOpening && !s.life.Closed() {
		s.kaOpening = true
		s.kaWG.Go(s.openKeepAliveStream)
	}
	return nil
}

func (s *Store) openKeepAliveStream() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-s.life.Done():
			cancel()
		case <-ctx.Done():
		}
	}()
	stream, err := s.cli.KeepAlive(rctx(ctx))
	s.kaMu.Lock()
	s.kaOpening = false
	if err != nil {
		s.kaMu.Unlock()
		return
	}
	c := &kaConn{stream: stream, cancel: cancel, pending: map[etcdapi.LeaseID][]chan keepAliveResult{}}
	s.ka = c
	s.kaMu.Unlock()
	// This goroutine receives the answers until the stream ends (Close
	// cancels it, and waits for this goroutine).
	for {
		id, ttl, err := stream.Recv()
		if err != nil {
			c.fail(err)
			return
		}
		c.mu.Lock()
		var ch chan keepAliveResult
		if q := c.pending[id]; len(q) > 0 {
			ch = q[0]
			if len(q) == 1 {
				delete(c.pending, id)
			} else {
				c.pending[id] = q[1:]
			}
		}
		c.mu.Unlock()
		switch {
		case ch == nil: // cannot happen: one answer per request
		case ttl <= 0:
			ch <- keepAliveResult{clean: true, err: etcdapi.ErrLeaseNotFound}
		default:
			ch <- keepAliveResult{ttl: ttl, clean: true}
		}
	}
}

// fail marks the stream broken and fails every pending request as
// unanswered: etcd may have applied it.
func (c *kaConn) fail(err error) {
	c.mu.Lock()
	c.broken = true
	pending := c.pending
	c.pending = map[etcdapi.LeaseID][]chan keepAliveResult{}
	c.mu.Unlock()
	c.cancel()
	for _, q := range pending {
		for _, ch := range q {
			ch <- keepAliveResult{clean: false, err: err}
		}
	}
}

// contextError is ctx's error, naming the failure that was being retried.
func contextError(ctx context.Context, err error) error {
	if err == nil || errors.Is(err, ctx.Err()) {
		return ctx.Err()
	}
	return fmt.Errorf("%w (while retrying: %v)", ctx.Err(), err)
}
