package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/leasehold/leasehold/store"
)

// Acquire implements store.Store: it creates an ephemeral sequential node
// under the lease's path, in the term session for ttl, and the term is
// granted if that node is the lowest there; its token is the node's czxid.
// Leasehold does not queue: if another contender's node exists, Acquire
// creates nothing and returns that holder's record with ErrHeld; if its new
// node turns out not to be the lowest (a contender created one meanwhile),
// it deletes it again. A handle that saw the lease go free last creates its
// node without looking first (see markFree), and deletes it again likewise. Nodes of the same holder (an earlier term, or an
// attempt whose answer was lost) are deleted in the transaction that creates
// the new node, so the new term replaces them; behind a foreign queued
// contender (zk.Lock, Curator) they are only deleted, since a new node
// would queue behind it. Behind leasehold attempts (which delete their
// nodes at once) Acquire waits for those to go first: a successor replacing
// its reservation must not hand the lock to one of them.
func (s *Store) Acquire(ctx context.Context, name, holder string, ttl time.Duration, metadata string) (store.Record, error) {
	return s.acquireOp(ctx, name, holder, ttl, metadata, false)
}

// acquireOp is Acquire, or with unqueued AcquireUnqueued (queue.go).
func (s *Store) acquireOp(ctx context.Context, name, holder string, ttl time.Duration, metadata string, unqueued bool) (store.Record, error) {
	if err := s.life.Check(ctx); err != nil {
		return store.Record{}, err
	}
	if err := kit.CheckAcquire(name, holder, ttl, metadata); err != nil {
		return store.Record{}, err
	}
	if ttl < s.minSession {
		return store.Record{}, kit.Invalid("acquire", "ttl %v is below the shortest session the ensemble grants, %v (its minSessionTimeout, two ticks by default)", ttl, s.minSession)
	}
	if ttl%time.Millisecond != 0 {
		ttl = ttl.Truncate(time.Millisecond) + time.Millisecond
	}
	op := fmt.Sprintf("acquire %q (%s) for %s", name, s.Path(name), holder)
	sess, err := s.sessionFor(ctx, ttl)
	if err != nil {
		if errors.Is(err, store.ErrInvalid) || errors.Is(err, store.ErrClosed) {
			return store.Record{}, err
		}
		return store.Record{}, kit.Wrap(op, err)
	}
	rec, err := s.acquire(ctx, sess, name, holder, ttl, metadata, unqueued)
	if err != nil {
		return rec, kit.Wrap(op, s.life.ClosedOr(err))
	}
	return rec, nil
}

func (s *Store) acquire(ctx context.Context, sess *session, name, holder string, ttl time.Duration, metadata string, unqueued bool) (store.Record, error) {
	if rec, err, ok := s.grantPlace(ctx, sess, name, holder, ttl, metadata); ok {
		return rec, err
	}
	p := s.Path(name)
	// A lease this handle saw go free last is tried at once, without the
	// look: create's transaction or its listing decides, as after a look
	// (see create), and a node that is not the lowest is deleted again, after
	// which the attempt looks as usual. Only one Acquire takes the hint.
	speculate := s.takeFree(name)
	headsGone := 0
	attempt := 0
	// handedOn: the look found another holder's node gone before its data
	// could be read; the lease changed hands, which is no conflict of ours,
	// so it costs no attempt unless it keeps happening (see maxHeadsGone).
	handedOn := func() {
		if headsGone++; headsGone < maxHeadsGone {
			attempt--
		}
	}
	// heldBy answers with the lease held by node c: ErrHeld with c's record
	// (ok). Not ok: c is zero, or c went before it could be read (handedOn),
	// and the caller looks again. After a create whose node was beaten, c
	// is the node that beat it: answering at once rather than looking again,
	// which can lose the same race while the lease changes hands quickly
	// (measured with 8 contenders in one process taking turns back to back:
	// acquires ran out of attempts, "the lease's contenders kept changing",
	// an error the core must take as an unknown outcome, after which it
	// waits a whole retry period instead of the next release; 4 of 8
	// contenders starved).
	heldBy := func(c contender) (_ store.Record, _ error, ok bool) {
		if c.name == "" {
			return store.Record{}, nil, false
		}
		rec, err := s.describeHead(ctx, sess.conn, name, c)
		if errors.Is(err, zk.ErrNoNode) {
			handedOn()
			return store.Record{}, nil, false
		}
		if err != nil {
			return store.Record{}, err, true
		}
		if unqueued && isPlace(c.name) {
			// A waiter's place is the lowest: it has not taken the lease.
			return rec, store.ErrQueued, true
		}
		return rec, store.ErrHeld, true
	}
	for ; attempt < maxAcquireAttempts; attempt++ {
		sent := time.Now()
		if speculate {
			speculate = false
			rec, retry, beatenBy, err := s.create(ctx, sess, p, name, holder, ttl, metadata, nil, -1, sent)
			if !retry {
				return rec, err
			}
			if rec, err, ok := heldBy(beatenBy); ok {
				return rec, err
			}
			continue
		}
		kids, err := call(ctx, func() ([]string, error) { k, _, err := sess.conn.Children(p); return k, err })
		if err != nil && !errors.Is(err, zk.ErrNoNode) {
			return store.Record{}, describe(err)
		}
		all := contenders(kids)
		var mine, others []contender
		for _, c := range all {
			if isHolders(c.name, holder) {
				mine = append(mine, c)
			} else {
				others = append(others, c)
			}
		}
		var ops []any
		for _, c := range mine {
			ops = append(ops, &zk.DeleteRequest{Path: p + "/" + c.name, Version: -1})
		}
		if len(others) > 0 && len(mine) > 0 && all[0].name == mine[0].name {
			// This holder's node heads the lock (its live term, or a
			// reservation a Transfer made for it) and other nodes are
			// behind it. If they are all leasehold's, they are attempts
			// that found themselves behind and are deleting their nodes
			// (or lost attempts their reapers delete): wait for them, so
			// that deleting this holder's node does not hand the lock to
			// one of them. A foreign node (zk.Lock, Curator) waits its
			// turn instead: see below.
			transient, err := s.onlyLeaseholdNodes(ctx, sess.conn, p, others)
			if err != nil {
				return store.Record{}, err
			}
			if transient {
				if err := s.waitGone(ctx, sess.conn, p+"/"+others[0].name); err != nil {
					return store.Record{}, err
				}
				continue
			}
		}
		if len(others) > 0 {
			if len(mine) > 0 {
				// This holder's earlier nodes: its live term, with a foreign
				// contender queued behind (a new node would queue behind that
				// one), or attempts whose answers were lost, queued behind
				// the holder. The new acquire replaces them all, and is
				// refused.
				if _, err := call(ctx, func() ([]zk.MultiResponse, error) { return sess.conn.Multi(ops...) }); err != nil && !errors.Is(err, zk.ErrNoNode) {
					return store.Record{}, describe(err)
				}
				s.forgetNodes(name, mine)
			}
			if rec, err, ok := heldBy(others[0]); ok {
				return rec, err
			}
			continue // the holder left meanwhile: look again
		}
		rec, retry, beatenBy, err := s.create(ctx, sess, p, name, holder, ttl, metadata, ops, -1, sent)
		if retry {
			if len(mine) > 0 {
				s.forgetNodes(name, mine)
			}
			if rec, err, ok := heldBy(beatenBy); ok {
				return rec, err
			}
			continue
		}
		if err == nil && len(mine) > 0 {
			s.forgetNodes(name, mine)
		}
		return rec, err
	}
	return store.Record{}, errors.New("the lease's contenders kept changing")
}

// maxAcquireAttempts bounds the looks of one Acquire that found the lease
// changing under it (a node that was not the lowest, a transient node to
// wait out); running out is an error, which the core takes as an unknown
// outcome and follows with a whole retry period. maxHeadsGone bounds, apart
// from those, the looks that listed another holder's node but found it gone
// before its data could be read: a lease that changes hands within the two
// round trips of a look (measured with 8 contenders in one process taking
// turns back to back: runs of 8 such looks in a row were common, and the
// 8 attempts that were the only bound starved 4 of 8 contenders).
const (
	maxAcquireAttempts = 8
	maxHeadsGone       = 64
)

// create creates the contender node (deleting the nodes in ops first, in the
// same transaction) and checks that it is the lowest. retry says to look at
// the children again; with it, beatenBy is the lowest node another holder
// had when ours was not the lowest (zero if none was seen). A pathVersion
// other than -1 is the data version of the lease's path that the caller's
// look saw: the transaction then applies only if no leasehold contender
// created a node since (each one writes the path's data in its own
// transaction).
func (s *Store) create(ctx context.Context, sess *session, p, name, holder string, ttl time.Duration, metadata string, ops []any, pathVersion int32, sent time.Time) (_ store.Record, retry bool, beatenBy contender, _ error) {
	e := &entry{s: s, prefix: newNodePrefix(holder), name: name, holder: holder, meta: metadata, sess: sess, ttl: ttl}
	s.mu.Lock()
	if s.life.Closed() {
		s.mu.Unlock()
		return store.Record{}, false, contender{}, store.ErrClosed
	}
	s.addEntryLocked(e)
	s.mu.Unlock()
	e.mu.Lock()
	defer e.mu.Unlock()
	// Until the answer says otherwise, the node may exist: the reaper
	// deletes it at the deadline.
	e.deadline = sent.Add(ttl)
	e.schedule(e.deadline)

	sid := sess.conn.SessionID()
	if testHookBeforeCreate != nil {
		testHookBeforeCreate()
	}
	ops = append(ops,
		&zk.CreateRequest{Path: p + "/" + e.prefix, Data: encodeNode(holder, metadata, ttl), Acl: s.cfg.ACL, Flags: zk.FlagEphemeralSequential},
		&zk.SetDataRequest{Path: p, Data: encodeRecord(e.prefix), Version: pathVersion})
	resp, err := call(ctx, func() ([]zk.MultiResponse, error) { return sess.conn.Multi(ops...) })
	err = multiErr(resp, err)
	switch {
	case errors.Is(err, zk.ErrBadVersion) && pathVersion != -1:
		// A contender created a node since the caller looked: nothing was
		// written.
		s.dropLocked(e)
		return store.Record{}, true, contender{}, nil
	case errors.Is(err, zk.ErrNoNode):
		// The lease's path is missing, or a node to delete went meanwhile.
		s.dropLocked(e)
		exists, xerr := call(ctx, func() (bool, error) { ok, _, err := sess.conn.Exists(p); return ok, err })
		if xerr != nil {
			return store.Record{}, false, contender{}, describe(xerr)
		}
		if !exists {
			if err := s.ensurePath(ctx, sess.conn, p); err != nil {
				return store.Record{}, false, contender{}, err
			}
		}
		return store.Record{}, true, contender{}, nil
	case errors.Is(err, zk.ErrNoAuth), errors.Is(err, zk.ErrNodeExists), errors.Is(err, zk.ErrBadVersion),
		errors.Is(err, zk.ErrNoChildrenForEphemerals), errors.Is(err, zk.ErrBadArguments), errors.Is(err, zk.ErrInvalidACL):
		s.dropLocked(e) // a definite refusal: nothing was created
		return store.Record{}, false, contender{}, describe(err)
	case errors.Is(err, zk.ErrSessionExpired):
		// The node, if created, went with the session.
		s.dropLocked(e)
		return store.Record{}, false, contender{}, err
	case err != nil:
		// Unknown: the node may exist, or appear later. The reaper deletes
		// it at the deadline; the session takes no new terms.
		s.retire(sess)
		return store.Record{}, false, contender{}, err
	}
	if sess.conn.SessionID() != sid || len(resp) < 2 {
		s.retire(sess)
		return store.Record{}, false, contender{}, errors.New("the session changed while creating the contender node")
	}
	s.proved(sess, sent)
	created := resp[len(resp)-2].String
	e.node = path.Base(created)
	e.sessionID = sid
	// The path node's data was set in the same transaction: its mzxid is
	// that transaction's zxid, the new node's czxid.
	pathStat := resp[len(resp)-1].Stat
	e.token = pathStat.Mzxid

	// The path node's stat is the one after the create, in the same
	// transaction: if the new node is its only child, it is the lowest
	// contender, with no other node of this holder beside it. Else the
	// children say.
	lowest := pathStat.NumChildren == 1
	if !lowest {
		kids, err := call(ctx, func() ([]string, error) { k, _, err := sess.conn.Children(p); return k, err })
		if err != nil {
			// The node exists; the reaper deletes it at the deadline unless a
			// later attempt of this holder replaces it first.
			return store.Record{}, false, contender{}, describe(err)
		}
		all := contenders(kids)
		lowest = len(all) > 0 && all[0].name == e.node
		if !lowest && len(all) > 0 && !isHolders(all[0].name, holder) {
			beatenBy = all[0]
		}
	}
	if lowest {
		e.granted = true
		s.mu.Lock()
		s.grantLocked(e)
		s.mu.Unlock()
		return store.Record{Term: e.term(), Remaining: ttl - time.Since(sent), TTL: ttl, Metadata: metadata}, false, contender{}, nil
	}
	// A contender created its node between our look and our create (or
	// before a create without a look, or this holder's earlier node is
	// there): ours is not the lowest. Delete it again and look.
	if err := s.deleteLocked(ctx, e); err != nil {
		return store.Record{}, false, contender{}, err
	}
	return store.Record{}, true, beatenBy, nil
}

// onlyLeaseholdNodes reports whether every node in others is a leasehold
// attempt's node (or gone). Leasehold queues on a lease's path only with
// a place (a fair waiter's, which waits its turn as a foreign node does):
// any other node of leasehold's behind another is an attempt that is about
// to delete it, or a lost attempt that its handle's reaper deletes at its
// deadline.
func (s *Store) onlyLeaseholdNodes(ctx context.Context, conn *zk.Conn, p string, others []contender) (bool, error) {
	for _, c := range others {
		if isPlace(c.name) {
			return false, nil
		}
		data, err := call(ctx, func() ([]byte, error) { d, _, err := conn.Get(p + "/" + c.name); return d, err })
		if errors.Is(err, zk.ErrNoNode) {
			continue
		}
		if errors.Is(err, zk.ErrNoAuth) {
			return false, nil // not ours: leasehold's nodes carry the store's ACL
		}
		if err != nil {
			return false, describe(err)
		}
		if _, ours := decodeNode(data); !ours {
			return false, nil
		}
	}
	return true, nil
}

// waitGone waits until the node at path is deleted, for at most
// transientWait: the attempt that created it deletes it within a round trip;
// a lost attempt's node lasts until its reaper's deadline, and the caller
// looks again meanwhile.
func (s *Store) waitGone(ctx context.Context, conn *zk.Conn, path string) error {
	type ex struct {
		ok bool
		ch <-chan zk.Event
	}
	r, err := call(ctx, func() (ex, error) { ok, _, ch, err := conn.ExistsW(path); return ex{ok, ch}, err })
	if err != nil {
		return describe(err)
	}
	if !r.ok {
		return nil
	}
	if testHookWaitGone != nil {
		testHookWaitGone(path)
	}
	timer := time.NewTimer(transientWait)
	defer timer.Stop()
	select {
	case <-r.ch:
	case <-timer.C:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// transientWait bounds one wait for a leasehold attempt's node to go.
const transientWait = 250 * time.Millisecond

// testHookWaitGone, if set (by tests), runs when an Acquire or Transfer
// starts to wait for another attempt's node at path to go.
var testHookWaitGone func(path string)

// markFree notes that this handle saw lease name go free: it deleted the
// holder's node (a release), or its watch saw the node a waiter waits on
// deleted. The next Acquire of name through this handle then creates its
// node at once, without listing the children first (see acquire). The note
// is only a guess of what to try first: it grants nothing, and a node that
// is not the lowest is deleted again. A handle that holds a term of name
// (a waiter of its own took the lease before the release's answer came)
// notes nothing; the notes are capped at maxNotes names.
func (s *Store) markFree(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held[name] > 0 {
		return
	}
	if s.free == nil {
		s.free = map[string]struct{}{}
	}
	if len(s.free) >= maxNotes {
		for n := range s.free {
			delete(s.free, n) // one, any: a lost note costs a listing
			break
		}
	}
	s.free[name] = struct{}{}
}

// maxNotes bounds the names a handle keeps a free note for (see
// markFree), for a process that uses ever new names. (The places a handle
// wrote are not bounded so: each leaves its map with the waiter's Dequeue,
// which the core always sends.)
const maxNotes = 1024

// takeFree reports whether this handle saw name go free last, and forgets
// it: one Acquire tries at once on one note.
func (s *Store) takeFree(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.free[name]
	delete(s.free, name)
	return ok
}

// testHookBeforeCreate, if set (by tests), runs before the transaction that
// creates a contender node is sent.
var testHookBeforeCreate func()

// testHookBeforeDescribe, if set (by tests), runs before the data of the
// contender node a look found at the head of a lease is read.
var testHookBeforeDescribe func(node string)

// ensurePath creates the lease's path and the paths above it (persistent
// nodes, with the store's ACL) where missing.
func (s *Store) ensurePath(ctx context.Context, conn *zk.Conn, p string) error {
	parts := strings.Split(strings.TrimPrefix(p, "/"), "/")
	cur := ""
	for _, part := range parts {
		cur += "/" + part
		_, err := call(ctx, func() (string, error) { return conn.Create(cur, nil, zk.FlagPersistent, s.cfg.ACL) })
		if err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return fmt.Errorf("create %s: %w", cur, describe(err))
		}
	}
	return nil
}

// addEntryLocked registers entry e, whose node its session carries (or,
// until the create's answer says, may). Called with s.mu held; dropLocked
// undoes it.
func (s *Store) addEntryLocked(e *entry) {
	s.entries[e.prefix] = e
	s.carryLocked(e.sess, 1)
}

// grantLocked registers entry e's node as a live term. Called with s.mu
// held.
func (s *Store) grantLocked(e *entry) {
	s.byTerm[e.term()] = e
	s.held[e.name]++
}

// dropLocked forgets entry e, whose node does not exist. Called with e.mu
// held.
func (s *Store) dropLocked(e *entry) {
	if e.done {
		return
	}
	e.done = true
	if e.timer != nil {
		e.timer.Stop()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.entries, e.prefix)
	if e.granted && s.byTerm[e.term()] == e {
		delete(s.byTerm, e.term())
		if s.held[e.name]--; s.held[e.name] <= 0 {
			delete(s.held, e.name)
		}
	}
	s.carryLocked(e.sess, -1)
}

// deleteLocked deletes entry e's node through its session, and forgets the
// entry. If the node's name is unknown (an attempt whose answer was lost),
// it is looked up by its prefix. Called with e.mu held. On an error the
// entry stays, for the reaper.
func (s *Store) deleteLocked(ctx context.Context, e *entry) error {
	p := s.Path(e.name)
	node := e.node
	if node == "" {
		kids, err := call(ctx, func() ([]string, error) { k, _, err := e.sess.conn.Children(p); return k, err })
		if err != nil && !errors.Is(err, zk.ErrNoNode) {
			return describe(err)
		}
		for _, k := range kids {
			if strings.HasPrefix(k, e.prefix) {
				node = k
			}
		}
		if node == "" {
			s.dropLocked(e)
			return nil
		}
	}
	_, err := call(ctx, func() (struct{}, error) { return struct{}{}, e.sess.conn.Delete(p+"/"+node, -1) })
	if err != nil && !errors.Is(err, zk.ErrNoNode) && !errors.Is(err, zk.ErrSessionExpired) {
		return describe(err)
	}
	s.dropLocked(e)
	return nil
}

// forgetNodes forgets this handle's entries for nodes the store deleted in
// another transaction (a holder's earlier nodes, replaced).
func (s *Store) forgetNodes(name string, gone []contender) {
	s.mu.Lock()
	var es []*entry
	for _, c := range gone {
		for _, e := range s.entries {
			if e.name == name && strings.HasPrefix(c.name, e.prefix) {
				es = append(es, e)
			}
		}
	}
	s.mu.Unlock()
	for _, e := range es {
		e.mu.Lock()
		s.dropLocked(e)
		e.mu.Unlock()
	}
}

// reap ends entry e at its deadline: it deletes the node, unless a renewal
// moved the deadline meanwhile. A failed delete is tried again a tick later,
// for as long as the store is open; if the session is lost meanwhile, its
// nodes go with it.
func (s *Store) reap(e *entry) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.done {
		return
	}
	if now := time.Now(); now.Before(e.deadline) {
		e.schedule(e.deadline)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.DialTimeout)
	defer cancel()
	go func() {
		select {
		case <-s.life.Done():
			cancel()
		case <-ctx.Done():
		}
	}()
	err := s.deleteLocked(ctx, e)
	switch {
	case err == nil, s.life.Closed():
	case errors.Is(err, zk.ErrNoAuth):
		// The ACL does not let this user delete its own node: end the
		// session instead (closing a session needs no permission) once it
		// carries nothing else.
		s.retire(e.sess)
		s.dropLocked(e)
	default:
		e.schedule(time.Now().Add(max(s.tick(), 100*time.Millisecond)))
	}
}

// Renew implements store.Store. It proves the term's session alive with a
// sync, which a follower forwards to the leader and the leader refuses for
// an expired session, and then checks that the term's node still exists in
// that session with the term's czxid. The term then lives ttl from the
// moment the renewal was sent: ZooKeeper keeps the session at least its
// timeout past that moment, and the handle ends the term itself at ttl.
//
// A term lives in a session of this handle's, whose timeout ZooKeeper fixed
// when the session opened: a renewal cannot lengthen it. Renew refuses a
// ttl above the term's session timeout with ErrInvalid (a shorter one is
// kept), and a term acquired through another handle, whose session this
// handle does not have, with an error: that term is renewed through the
// handle that acquired it.
func (s *Store) Renew(ctx context.Context, t store.Term, ttl time.Duration) (store.Record, error) {
	if err := s.life.Check(ctx); err != nil {
		return store.Record{}, err
	}
	if err := kit.CheckRenew(t, ttl); err != nil {
		return store.Record{}, err
	}
	op := fmt.Sprintf("renew %s (%s)", t, s.Path(t.Name))
	s.mu.Lock()
	e := s.byTerm[t]
	s.mu.Unlock()
	if e == nil {
		live, err := s.findTerm(ctx, t)
		if err != nil {
			return store.Record{}, kit.Wrap(op, s.life.ClosedOr(err))
		}
		if !live {
			return store.Record{}, kit.Wrap(op, store.ErrNotHeld)
		}
		return store.Record{}, kit.Errorf(op, "the term is live in a session of another store handle: it is renewed through the handle that acquired it (ZooKeeper keeps a node only through the session that created it)")
	}
	rec, err := s.renew(ctx, e, ttl)
	if err != nil {
		if errors.Is(err, store.ErrInvalid) {
			return store.Record{}, err
		}
		return store.Record{}, kit.Wrap(op, s.life.ClosedOr(err))
	}
	return rec, nil
}

func (s *Store) renew(ctx context.Context, e *entry, ttl time.Duration) (store.Record, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	sent := time.Now()
	if e.done || !sent.Before(e.deadline) {
		return store.Record{}, store.ErrNotHeld
	}
	if granted := e.sess.d.timeout(); ttl > granted {
		return store.Record{}, kit.Invalid("renew "+e.term().String(), "ttl %v is above the term's session timeout %v: ZooKeeper cannot lengthen a session, so a term cannot outlive the timeout it was acquired with", ttl, granted)
	}
	conn := e.sess.conn
	if conn.SessionID() != e.sessionID {
		s.dropLocked(e) // the session expired: its nodes are gone
		return store.Record{}, store.ErrNotHeld
	}
	p := s.Path(e.name)
	if err := s.syncSession(ctx, e.sess, p); err != nil {
		if errors.Is(err, zk.ErrSessionExpired) {
			s.dropLocked(e)
			return store.Record{}, store.ErrNotHeld
		}
		return store.Record{}, describe(err)
	}
	type ex struct {
		ok   bool
		stat *zk.Stat
	}
	r, err := call(ctx, func() (ex, error) { ok, st, err := conn.Exists(p + "/" + e.node); return ex{ok, st}, err })
	if err != nil {
		if errors.Is(err, zk.ErrSessionExpired) {
			s.dropLocked(e)
			return store.Record{}, store.ErrNotHeld
		}
		return store.Record{}, describe(err)
	}
	if !r.ok || r.stat.Czxid != e.token || r.stat.EphemeralOwner != e.sessionID || conn.SessionID() != e.sessionID {
		s.dropLocked(e)
		return store.Record{}, store.ErrNotHeld
	}
	e.ttl = ttl
	e.deadline = sent.Add(ttl)
	e.schedule(e.deadline)
	return store.Record{Term: e.term(), Remaining: ttl - time.Since(sent), TTL: ttl, Metadata: e.meta}, nil
}

// findTerm looks for the node of term t through the control session (after
// a sync): a node of t's holder with t's token as its czxid that is the
// lowest contender. It returns whether the term is live.
func (s *Store) findTerm(ctx context.Context, t store.Term) (bool, error) {
	node, err := s.findNode(ctx, t)
	if err != nil || node == "" {
		return false, err
	}
	kids, err := call(ctx, func() ([]string, error) { k, _, err := s.ctl.conn.Children(s.Path(t.Name)); return k, err })
	if errors.Is(err, zk.ErrNoNode) {
		return false, nil
	}
	if err != nil {
		return false, describe(err)
	}
	all := contenders(kids)
	return len(all) > 0 && all[0].name == node, nil
}

// findNode returns the name of term t's node ("" if there is none), read
// through the control session after a sync.
func (s *Store) findNode(ctx context.Context, t store.Term) (string, error) {
	p := s.Path(t.Name)
	conn := s.ctl.conn
	if _, err := call(ctx, func() (string, error) { return conn.Sync(p) }); err != nil {
		return "", describe(err)
	}
	kids, err := call(ctx, func() ([]string, error) { k, _, err := conn.Children(p); return k, err })
	if errors.Is(err, zk.ErrNoNode) {
		return "", nil
	}
	if err != nil {
		return "", describe(err)
	}
	for _, k := range kids {
		if _, ok := sequence(k); !ok || !isHolders(k, t.Holder) {
			continue
		}
		type got struct {
			data []byte
			stat *zk.Stat
		}
		g, err := call(ctx, func() (got, error) { d, st, err := conn.Get(p + "/" + k); return got{d, st}, err })
		if errors.Is(err, zk.ErrNoNode) {
			continue
		}
		if err != nil {
			return "", describe(err)
		}
		if d, ok := decodeNode(g.data); ok && d.Holder == t.Holder && g.stat.Czxid == t.Token {
			return k, nil
		}
	}
	return "", nil
}

// Release implements store.Store: it deletes exactly the term's node (the
// node of the term's holder whose czxid is the token); waiters wake on the
// delete. A term that this handle already ended at its deadline gets
// ErrNotHeld.
func (s *Store) Release(ctx context.Context, t store.Term) error {
	if err := s.life.Check(ctx); err != nil {
		return err
	}
	if err := kit.CheckRelease(t); err != nil {
		return err
	}
	op := fmt.Sprintf("release %s (%s)", t, s.Path(t.Name))
	s.mu.Lock()
	e := s.byTerm[t]
	s.mu.Unlock()
	if e != nil {
		return s.releaseOwn(ctx, op, e)
	}
	node, err := s.findNode(ctx, t)
	if err != nil {
		return kit.Wrap(op, s.life.ClosedOr(err))
	}
	if node == "" {
		return kit.Wrap(op, store.ErrNotHeld)
	}
	_, err = call(ctx, func() (struct{}, error) { return struct{}{}, s.ctl.conn.Delete(s.Path(t.Name)+"/"+node, -1) })
	if errors.Is(err, zk.ErrNoNode) {
		return kit.Wrap(op, store.ErrNotHeld)
	}
	if err != nil {
		return kit.Wrap(op, s.life.ClosedOr(describe(err)))
	}
	s.markFree(t.Name)
	return nil
}

// releaseOwn releases a term acquired through this handle: it deletes the
// term's node through the term's session.
func (s *Store) releaseOwn(ctx context.Context, op string, e *entry) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.done {
		return kit.Wrap(op, store.ErrNotHeld)
	}
	expired := !time.Now().Before(e.deadline)
	_, err := call(ctx, func() (struct{}, error) {
		return struct{}{}, e.sess.conn.Delete(s.Path(e.name)+"/"+e.node, -1)
	})
	switch {
	case err == nil:
		s.dropLocked(e)
		s.markFree(e.name)
		if expired {
			// Past its deadline the term had ended: the reaper was about to
			// delete the node.
			return kit.Wrap(op, store.ErrNotHeld)
		}
		return nil
	case errors.Is(err, zk.ErrNoNode), errors.Is(err, zk.ErrSessionExpired):
		s.dropLocked(e)
		return kit.Wrap(op, store.ErrNotHeld)
	default:
		// Unknown: the entry stays, and the reaper deletes the node at the
		// deadline if this delete did not.
		return kit.Wrap(op, s.life.ClosedOr(describe(err)))
	}
}

// Get implements store.Store, through the control session after a sync: the
// lowest contender node is the holder. For a leasehold holder acquired
// through this handle, Remaining is the time to its deadline; for one of
// another handle, its ttl (ZooKeeper does not tell other clients when a
// session was last heard from: the term ends at most ttl after its holder's
// last renewal, or a session timeout after its process stopped); for a
// foreign holder (zk.Lock, Curator), the longest session the ensemble
// grants. With no contender, the record is free and its token is the czxid
// of the last node leasehold created there.
func (s *Store) Get(ctx context.Context, name string) (store.Record, error) {
	if err := s.life.Check(ctx); err != nil {
		return store.Record{}, err
	}
	if err := kit.CheckName("get", name); err != nil {
		return store.Record{}, err
	}
	rec, err := s.get(ctx, s.ctl.conn, name, true)
	if err != nil {
		return store.Record{}, kit.Wrap(fmt.Sprintf("get %q (%s)", name, s.Path(name)), s.life.ClosedOr(err))
	}
	return rec, nil
}

func (s *Store) get(ctx context.Context, conn *zk.Conn, name string, sync bool) (store.Record, error) {
	p := s.Path(name)
	if sync {
		if _, err := call(ctx, func() (string, error) { return conn.Sync(p) }); err != nil && !errors.Is(err, zk.ErrNoNode) {
			return store.Record{}, describe(err)
		}
	}
	for attempt := 0; attempt < 8; attempt++ {
		kids, err := call(ctx, func() ([]string, error) { k, _, err := conn.Children(p); return k, err })
		if errors.Is(err, zk.ErrNoNode) {
			return store.Record{}, store.ErrNotFound
		}
		if err != nil {
			return store.Record{}, describe(err)
		}
		if all := contenders(kids); len(all) > 0 {
			rec, err := s.describeHead(ctx, conn, name, all[0])
			if errors.Is(err, zk.ErrNoNode) {
				continue
			}
			return rec, err
		}
		type got struct {
			data []byte
			stat *zk.Stat
		}
		g, err := call(ctx, func() (got, error) { d, st, err := conn.Get(p); return got{d, st}, err })
		if errors.Is(err, zk.ErrNoNode) {
			return store.Record{}, store.ErrNotFound
		}
		if err != nil {
			return store.Record{}, describe(err)
		}
		if !isRecord(g.data) {
			return store.Record{}, store.ErrNotFound
		}
		return store.Record{Term: store.Term{Name: name, Token: g.stat.Mzxid}}, nil
	}
	return store.Record{}, errors.New("the lease's contenders kept changing")
}

// describeHead reads the holder's node c and returns its record. zk.ErrNoNode
// if it is gone.
func (s *Store) describeHead(ctx context.Context, conn *zk.Conn, name string, c contender) (store.Record, error) {
	type got struct {
		data []byte
		stat *zk.Stat
	}
	if testHookBeforeDescribe != nil {
		testHookBeforeDescribe(c.name)
	}
	g, err := call(ctx, func() (got, error) { d, st, err := conn.Get(s.Path(name) + "/" + c.name); return got{d, st}, err })
	if errors.Is(err, zk.ErrNoAuth) {
		// A foreign node whose ACL keeps us from reading it: its stat is
		// still ours to see.
		type ex struct{ stat *zk.Stat }
		x, xerr := call(ctx, func() (ex, error) {
			ok, st, err := conn.Exists(s.Path(name) + "/" + c.name)
			if err == nil && !ok {
				err = zk.ErrNoNode
			}
			return ex{st}, err
		})
		if xerr != nil {
			return store.Record{}, xerr
		}
		g, err = got{nil, x.stat}, nil
	}
	if err != nil {
		return store.Record{}, err
	}
	d, ours := decodeNode(g.data)
	if !ours {
		return store.Record{Term: store.Term{Name: name, Holder: foreignHolder(c.name), Token: g.stat.Czxid},
			Remaining: s.maxSession, Metadata: foreignMetadata(g.data)}, nil
	}
	ttl := time.Duration(d.TTLms) * time.Millisecond
	rec := store.Record{Term: store.Term{Name: name, Holder: d.Holder, Token: g.stat.Czxid}, Remaining: ttl, TTL: ttl, Metadata: d.Metadata}
	s.mu.Lock()
	e := s.byTerm[rec.Term]
	s.mu.Unlock()
	if e != nil {
		e.mu.Lock()
		rec.Remaining = time.Until(e.deadline)
		e.mu.Unlock()
	}
	return rec, nil
}

// TermNode returns the ZooKeeper path of term t's contender node, or an
// error matching store.ErrNotHeld if t is not the live term. The node
// exists exactly as long as the term is live (its name is unique to the
// attempt that created it, and its data version stays 0), so a write inside
// ZooKeeper is fenced by making it a transaction that checks the node:
//
//	node, err := st.TermNode(ctx, leader.Term())
//	_, err = conn.Multi(&zk.CheckVersionRequest{Path: node, Version: 0},
//		&zk.SetDataRequest{Path: "/app/config", Data: v, Version: -1})
//	// zk.ErrNoNode: the term has ended; nothing was written.
func (s *Store) TermNode(ctx context.Context, t store.Term) (string, error) {
	if err := s.life.Check(ctx); err != nil {
		return "", err
	}
	if err := kit.CheckTerm("term node", t); err != nil {
		return "", err
	}
	op := fmt.Sprintf("term node %s (%s)", t, s.Path(t.Name))
	node, err := s.findNode(ctx, t)
	if err != nil {
		return "", kit.Wrap(op, s.life.ClosedOr(err))
	}
	live, err := s.findTerm(ctx, t)
	if err != nil {
		return "", kit.Wrap(op, s.life.ClosedOr(err))
	}
	if node == "" || !live {
		return "", kit.Wrap(op, store.ErrNotHeld)
	}
	return s.Path(t.Name) + "/" + node, nil
}
