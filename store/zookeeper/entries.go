package zookeeper

// The handle's own contender nodes (entries) and the term sessions that carry them.

import (
	"context"
	"sync"
	"time"

	"github.com/leasehold/leasehold/store"
)

// An entry is a contender node this handle created (or tried to create):
// a granted term, or an attempt whose node is still to be deleted. Its
// deadline is when the handle ends it on its own: the send time of the last
// successful acquire or renewal plus its ttl. The entry's timer deletes the
// node then, unless a renewal moved the deadline; a term whose process
// stopped is ended by ZooKeeper instead, when its session times out.
type entry struct {
	_ [0]func() // not comparable: spares the binary an equality function

	s      *Store
	prefix string // the node's name before its sequence: unique per attempt
	name   string
	holder string
	meta   string
	sess   *session

	mu        sync.Mutex // serializes renewals and the reaper
	node      string     // the node's name ("" while unknown)
	sessionID int64      // the session the node lives in (0 while unknown)
	token     int64
	ttl       time.Duration
	deadline  time.Time
	granted   bool
	done      bool // the node is gone (or the store closed): nothing more to do
	timer     *time.Timer
}

// term is the entry's term (valid once granted).
func (e *entry) term() store.Term { return store.Term{Name: e.name, Holder: e.holder, Token: e.token} }

// schedule sets the entry's timer to reap it at its deadline. Called with
// e.mu held.
func (e *entry) schedule(at time.Time) {
	if e.timer != nil {
		e.timer.Stop()
	}
	e.timer = time.AfterFunc(time.Until(at), func() { e.s.spawn(func() { e.s.reap(e) }) })
}

// stop stops the entry's timer (on Close).
func (e *entry) stop() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.timer != nil {
		e.timer.Stop()
	}
	e.done = true
}

// sessionFor returns the handle's term session for ttl, opening it if need
// be. A session carries the terms of every name and holder with that
// ttl; ZooKeeper fixes a session's timeout when it opens it.
func (s *Store) sessionFor(ctx context.Context, ttl time.Duration) (*session, error) {
	s.mu.Lock()
	sess := s.pool[ttl]
	s.mu.Unlock()
	if sess != nil {
		return sess, nil
	}
	cctx, cancel := context.WithTimeout(ctx, s.cfg.DialTimeout)
	defer cancel()
	sess, err := s.connect(cctx, ttl)
	if err != nil {
		return nil, err
	}
	if granted := sess.d.timeout(); granted < ttl {
		sess.close(false)
		return nil, kit.Invalid("acquire", "ttl %v is above the longest session the ensemble grants, %v (its maxSessionTimeout): a term lives as long as its session", ttl, granted)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.life.Closed() {
		sess.close(false)
		return nil, store.ErrClosed
	}
	if other := s.pool[ttl]; other != nil {
		sess.close(false) // opened concurrently: keep one
		return other, nil
	}
	s.pool[ttl] = sess
	sess.hbStop = make(chan struct{})
	stop := sess.hbStop
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.heartbeat(sess, stop)
	}()
	return sess, nil
}

// heartbeat touches a term session every half tick while it carries nodes:
// a follower reports the sessions it heard from to the leader every half
// tick, so the leader, which expires sessions, never dates the session's
// last sign of life more than a tick early (see Limits). The client's own
// pings come only every third of the session timeout.
func (s *Store) heartbeat(sess *session, stop <-chan struct{}) {
	t := time.NewTicker(max(s.tick()/2, 5*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		s.mu.Lock()
		busy := sess.carries > 0
		s.mu.Unlock()
		if busy {
			sess.conn.Exists(s.root) //nolint:errcheck // a touch; its answer does not matter
		}
	}
}

// retire takes sess out of the pool after a request on it whose outcome is
// unknown: a contender node may yet be created on it, late. New terms go on
// a new session; this one is closed (closeSession, ordered after anything
// still queued on it, so a late node dies with it) once it carries nothing.
func (s *Store) retire(sess *session) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sess.retired {
		return
	}
	sess.retired = true
	if s.pool[sess.asked] == sess {
		delete(s.pool, sess.asked)
	}
	s.retired = append(s.retired, sess)
	s.closeIdleLocked(sess)
}

// carry counts a node more (n = 1) or less (n = -1) on sess. Called with
// s.mu held.
func (s *Store) carryLocked(sess *session, n int) {
	sess.carries += n
	if n < 0 {
		s.closeIdleLocked(sess)
	}
}

func (s *Store) closeIdleLocked(sess *session) {
	if !sess.retired || sess.carries > 0 || s.life.Closed() {
		return
	}
	for i, r := range s.retired {
		if r == sess {
			s.retired = append(s.retired[:i], s.retired[i+1:]...)
			break
		}
	}
	if sess.hbStop != nil {
		close(sess.hbStop)
		sess.hbStop = nil
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		sess.close(false)
	}()
}
