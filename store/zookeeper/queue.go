package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"path"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/leasehold/leasehold/store"
)

var (
	_ store.Queuer           = (*Store)(nil)
	_ store.UnqueuedAcquirer = (*Store)(nil)
	_ store.MetadataQueuer   = (*Store)(nil)
)

// The fair queue (Config.Fair) is ZooKeeper's own lock recipe, the one
// zk.Lock and Curator's InterProcessMutex wait in: a waiter's place is a
// contender node in the lease's path (ephemeral sequential, named as
// leasehold's attempts are but with placeMark at the start of its random
// part), created in this handle's term session for the place's ttl, with
// the path's record in the same transaction. The contenders rank by
// sequence and the lowest holds, so zk.Lock, Curator and leasehold's fair
// waiters share one queue, and every other Acquire is refused while a
// place is ahead of it (a non-fair Acquire creates a node only when the
// path has none).
//
// A place that is the lowest contender becomes its holder's term, through
// the handle that wrote it, with no write: the node, its czxid (the token)
// and its session are the term's. A node that is lowest stays lowest while
// it exists (sequences only rise, so no contender created later ranks
// below it). The handle watches the node just below a waiter's place; when
// that node was the only contender below the place at the last listing and
// its deletion arrives, the place is the lowest, and its Acquire sends
// nothing. Otherwise the Acquire lists the contenders (one read, as
// zk.Lock's waiter does after every wake-up) to rank it. The term lives
// until the session's last request the leader answered (the place's
// create, a sync sent on a refresh or before the grant, any renewal on
// that session) plus the ttl, the session timeout, and the handle ends it
// then unless a renewal moved it. Its
// token is above every token granted for the name before: each earlier
// term was a node below the place, and was created before it.
//
// As in ZooKeeper's lock recipe, the lowest contender holds: Get shows a
// lowest place as the holder, and Enqueue counts it as the holder, not as
// a place ahead, so the waiter right behind it is told it is first and,
// once it sees the lowest go, its Acquire sends nothing.

// place is a waiter's place node that this handle wrote, or found.
type place struct {
	node string // the node's name
	// sess is the term session the node lives in, and sessionID that
	// session's id when the node was created; nil if the node lives in a
	// session of another handle (found, not written): this handle then
	// only reports its rank.
	sess      *session
	sessionID int64
	token     int64 // the node's czxid
	ttl       time.Duration
	meta      string // the metadata written in the node
	taken     bool   // an Acquire through this handle made it the holder's term (guarded by Store.mu)
	// lowest: the deletion of the only contender below the place was seen
	// (guarded by Store.mu). Sequences only rise, so nothing can be below
	// it again: its Acquire needs no listing (see grantPlace).
	lowest bool
}

// placeKey names a waiter's place: its lease name and holder.
type placeKey struct{ name, holder string }

// Enqueue implements store.Queuer: EnqueueWithMetadata with no metadata.
func (s *Store) Enqueue(ctx context.Context, name, holder string, ttl time.Duration) (int, error) {
	return s.EnqueueWithMetadata(ctx, name, holder, ttl, "")
}

// EnqueueWithMetadata implements store.MetadataQueuer: it writes holder's
// place at the back of the lease's contenders, with the metadata its term
// will carry, or finds the place written before. A place lives as long as
// the session it was written in: the place of a waiter whose process died
// or was cut off goes when the session expires, ttl later, and a Close of
// a handle that carries no term ends it at once. A refresh lists the
// contenders (and sends a sync alongside when the session's last proof of
// life is more than a quarter of ttl old, so that a grant from the place
// has most of ttl left). The places ahead are the contenders below it,
// less the lowest, which holds (a term, a foreign lock's node, or a place
// about to take the lease: see above). A waiter that is not the lowest
// watches the node just below its place, and wakes this handle's watchers
// of name when it goes.
func (s *Store) EnqueueWithMetadata(ctx context.Context, name, holder string, ttl time.Duration, metadata string) (int, error) {
	if err := s.life.Check(ctx); err != nil {
		return 0, err
	}
	if err := kit.CheckEnqueue(name, holder, ttl); err != nil {
		return 0, err
	}
	if err := store.ValidateMetadata(metadata); err != nil {
		return 0, kit.Invalid("enqueue", "%v", err)
	}
	if ttl < s.minSession {
		return 0, kit.Invalid("enqueue", "ttl %v is below the shortest session the ensemble grants, %v", ttl, s.minSession)
	}
	if ttl%time.Millisecond != 0 {
		ttl = ttl.Truncate(time.Millisecond) + time.Millisecond
	}
	op := fmt.Sprintf("enqueue %q (%s) for %s", name, s.Path(name), holder)
	sess, err := s.sessionFor(ctx, ttl)
	if err != nil {
		if errors.Is(err, store.ErrInvalid) || errors.Is(err, store.ErrClosed) {
			return 0, err
		}
		return 0, kit.Wrap(op, err)
	}
	n, err := s.enqueue(ctx, sess, name, holder, ttl, metadata)
	if err != nil {
		return 0, kit.Wrap(op, s.life.ClosedOr(err))
	}
	return n, nil
}

func (s *Store) enqueue(ctx context.Context, sess *session, name, holder string, ttl time.Duration, metadata string) (int, error) {
	k := placeKey{name, holder}
	p := s.Path(name)
	created := "" // the place node this call wrote, if it wrote one
	for attempt := 0; attempt < 3; attempt++ {
		pl := s.knownPlace(k, sess)
		if pl == nil && attempt == 0 {
			// A new place is written first and looked for after, as zk.Lock
			// does: alone, the write is the whole Enqueue; behind others,
			// the listing that ranks it also finds a place of this holder
			// written before (below).
			for try := 0; pl == nil && try < 2; try++ {
				if try > 0 {
					// No place was written: the lease's path is missing.
					if err := s.ensurePath(ctx, sess.conn, p); err != nil {
						return 0, err
					}
				}
				alone, err := s.newPlace(ctx, sess, name, holder, ttl, metadata)
				if err != nil || alone {
					return 0, err
				}
				pl = s.knownPlace(k, sess)
			}
			if pl != nil {
				created = pl.node
			}
		}
		var synced chan error
		if pl != nil && s.proofAge(sess) > ttl/4 {
			synced = make(chan error, 1)
			go func() { synced <- s.syncSession(ctx, sess, p) }()
		}
		kids, err := call(ctx, func() ([]string, error) { k, _, err := sess.conn.Children(p); return k, err })
		if synced != nil {
			if serr := <-synced; serr != nil && err == nil && !errors.Is(serr, zk.ErrNoNode) {
				err = serr
			}
		}
		if err != nil && !errors.Is(err, zk.ErrNoNode) {
			return 0, describe(err)
		}
		all := contenders(kids)
		at, earlier := -1, -1
		for i, c := range all {
			if pl != nil && c.name == pl.node {
				at = i
				break
			}
			if earlier < 0 && isPlace(c.name) && isHolders(c.name, holder) {
				earlier = i
			}
		}
		if pl == nil || pl.node == created && earlier >= 0 {
			// A place of this holder not known to this handle (written
			// through another handle, or by an Enqueue here whose answer
			// was lost) is taken over rather than doubled: the one written
			// by this call goes.
			if created != "" {
				if err := s.dropPlace(ctx, sess, k, p, created); err != nil {
					return 0, err
				}
				created, pl = "", nil
			}
			at = earlier
		}
		if at >= 0 && pl == nil {
			// The holder's place, not known to this handle: written through
			// another handle, or an Enqueue here whose answer was lost.
			found, err := s.adoptPlace(ctx, sess, p, all[at].name, holder)
			if errors.Is(err, zk.ErrNoNode) {
				continue
			}
			if err != nil {
				return 0, err
			}
			pl = found
			s.mu.Lock()
			if pl.sess != nil {
				s.places[k] = pl
			}
			s.mu.Unlock()
		}
		if at >= 0 {
			if at == 0 {
				return 0, nil
			}
			s.watchPlace(sess, name, p+"/"+all[at-1].name, pl, at == 1)
			return at - 1, nil // the lowest holds
		}
		if pl != nil {
			// Not there: its session ended, or the holder's Acquire through
			// another handle replaced it. Queue again.
			s.forgetPlace(k, pl)
		}
		if errors.Is(err, zk.ErrNoNode) {
			if err := s.ensurePath(ctx, sess.conn, p); err != nil {
				return 0, err
			}
		}
		if alone, err := s.newPlace(ctx, sess, name, holder, ttl, metadata); err != nil || alone {
			return 0, err
		}
	}
	return 0, errors.New("the place written was gone on each of 3 looks (its session keeps ending)")
}

// knownPlace is the place of k this handle wrote in sess, or nil; a place
// that became a term, or lives in a session this handle no longer puts
// nodes on, is forgotten, so that the holder's place is looked for afresh.
func (s *Store) knownPlace(k placeKey, sess *session) *place {
	s.mu.Lock()
	defer s.mu.Unlock()
	pl := s.places[k]
	if pl != nil && (pl.taken || pl.sess != sess || pl.sessionID != sess.conn.SessionID()) {
		delete(s.places, k)
		pl = nil
	}
	return pl
}

// dropPlace deletes the place node this handle just wrote for k when an
// earlier place of the same holder is taken over instead.
func (s *Store) dropPlace(ctx context.Context, sess *session, k placeKey, p, node string) error {
	s.mu.Lock()
	if pl := s.places[k]; pl != nil && pl.node == node {
		delete(s.places, k)
	}
	s.mu.Unlock()
	_, err := call(ctx, func() (struct{}, error) { return struct{}{}, sess.conn.Delete(p+"/"+node, -1) })
	if err != nil && !errors.Is(err, zk.ErrNoNode) {
		// Left in place, it would queue the holder twice until its
		// session ends.
		return describe(err)
	}
	return nil
}

// newPlace creates holder's place node. alone says it is the only
// contender, with nothing ahead; otherwise the caller lists the contenders
// to rank it.
func (s *Store) newPlace(ctx context.Context, sess *session, name, holder string, ttl time.Duration, metadata string) (alone bool, _ error) {
	p := s.Path(name)
	prefix := newPlacePrefix(holder)
	sid := sess.conn.SessionID()
	sent := time.Now()
	resp, err := call(ctx, func() ([]zk.MultiResponse, error) {
		return sess.conn.Multi(
			&zk.CreateRequest{Path: p + "/" + prefix, Data: encodeNode(holder, metadata, ttl), Acl: s.cfg.ACL, Flags: zk.FlagEphemeralSequential},
			&zk.SetDataRequest{Path: p, Data: encodeRecord(prefix), Version: -1})
	})
	if err = multiErr(resp, err); err != nil {
		if errors.Is(err, zk.ErrNoNode) {
			return false, nil // the path went meanwhile: look again
		}
		// An unknown outcome leaves a place that the next Enqueue finds,
		// and Dequeue or the session's end removes.
		return false, describe(err)
	}
	if sess.conn.SessionID() != sid || len(resp) < 2 {
		return false, errors.New("the session changed while creating the place")
	}
	s.proved(sess, sent)
	pathStat := resp[1].Stat
	pl := &place{node: path.Base(resp[0].String), sess: sess, sessionID: sid, token: pathStat.Mzxid, ttl: ttl, meta: metadata}
	s.mu.Lock()
	s.places[placeKey{name, holder}] = pl
	s.mu.Unlock()
	// The path's stat is the one after the create, in the same
	// transaction.
	return pathStat.NumChildren == 1, nil
}

// adoptPlace reads the place node child of holder: a place this handle can
// grant if it lives in sess (an Enqueue here whose answer was lost), else
// one it only ranks (sess nil). zk.ErrNoNode if it went meanwhile.
func (s *Store) adoptPlace(ctx context.Context, sess *session, p, child, holder string) (*place, error) {
	type got struct {
		data []byte
		stat *zk.Stat
	}
	g, err := call(ctx, func() (got, error) { d, st, err := sess.conn.Get(p + "/" + child); return got{d, st}, err })
	if err != nil {
		if errors.Is(err, zk.ErrNoNode) {
			return nil, err
		}
		return nil, describe(err)
	}
	pl := &place{node: child, token: g.stat.Czxid}
	if d, ok := decodeNode(g.data); ok && d.Holder == holder && g.stat.EphemeralOwner == sess.conn.SessionID() {
		pl.sess, pl.sessionID = sess, g.stat.EphemeralOwner
		pl.ttl, pl.meta = time.Duration(d.TTLms)*time.Millisecond, d.Metadata
	}
	return pl, nil
}

// forgetPlace forgets place pl of k, if it is still the one this handle
// knows.
func (s *Store) forgetPlace(k placeKey, pl *place) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.places[k] == pl {
		delete(s.places, k)
	}
}

// proofAge is how long ago sess last proved alive at the leader (see
// proved); a session never proved is as old as can be.
func (s *Store) proofAge(sess *session) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sess.proven.IsZero() {
		return 1<<63 - 1
	}
	return time.Since(sess.proven)
}

// proved notes that a request sent on sess at sent was answered by the
// leader (a write, or a sync): ZooKeeper keeps the session at least its
// timeout past that moment.
func (s *Store) proved(sess *session, sent time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sent.After(sess.proven) {
		sess.proven = sent
	}
}

// syncSession sends a sync on sess (a follower forwards it to the leader,
// which refuses an expired session) and notes the proof of life.
func (s *Store) syncSession(ctx context.Context, sess *session, p string) error {
	sent := time.Now()
	_, err := call(ctx, func() (string, error) { return sess.conn.Sync(p) })
	if err == nil {
		s.proved(sess, sent)
	}
	return err
}

// grantPlace is Acquire for a holder whose place this handle wrote in
// sess: once the place is the lowest contender, it becomes the term, with
// no write (see the top of this file), and with no read either if its
// watch saw the only contender below it deleted (place.lowest). ok is
// false when the place cannot be granted so (none, gone, taken, in another session, or written with other
// metadata or ttl than this Acquire's): Acquire then goes its usual way,
// which replaces the holder's nodes, the place too, with a new node. While
// a contender is below the place, the answer is ErrHeld with the lowest
// one's record, and the node just below the place is watched.
func (s *Store) grantPlace(ctx context.Context, sess *session, name, holder string, ttl time.Duration, metadata string) (_ store.Record, _ error, ok bool) {
	k := placeKey{name, holder}
	s.mu.Lock()
	pl := s.places[k]
	usable := pl != nil && !pl.taken && pl.sess == sess && pl.sessionID == sess.conn.SessionID() && pl.meta == metadata && pl.ttl == ttl
	s.mu.Unlock()
	if !usable {
		return store.Record{}, nil, false
	}
	p := s.Path(name)
	s.mu.Lock()
	lowest := pl.lowest
	s.mu.Unlock()
	for attempt := 0; !lowest; attempt++ {
		if attempt == maxAcquireAttempts {
			return store.Record{}, errors.New("the lease's contenders kept changing"), true
		}
		kids, err := call(ctx, func() ([]string, error) { k, _, err := sess.conn.Children(p); return k, err })
		if err != nil && !errors.Is(err, zk.ErrNoNode) {
			return store.Record{}, describe(err), true
		}
		all := contenders(kids)
		at := -1
		var stale []any
		var staleNodes []contender
		for i, c := range all {
			if c.name == pl.node {
				at = i
				break
			}
			if isHolders(c.name, holder) && !isPlace(c.name) {
				// The holder's earlier term, or an attempt whose answer was
				// lost: the new term replaces it, as Acquire's does.
				stale = append(stale, &zk.DeleteRequest{Path: p + "/" + c.name, Version: -1})
				staleNodes = append(staleNodes, c)
			}
		}
		if at < 0 {
			s.forgetPlace(k, pl)
			return store.Record{}, nil, false
		}
		if len(stale) > 0 {
			if _, err := call(ctx, func() ([]zk.MultiResponse, error) { return sess.conn.Multi(stale...) }); err != nil && !errors.Is(err, zk.ErrNoNode) {
				return store.Record{}, describe(err), true
			}
			s.forgetNodes(name, staleNodes)
			continue
		}
		if at == 0 {
			break
		}
		s.watchPlace(sess, name, p+"/"+all[at-1].name, pl, at == 1)
		rec, err := s.describeHead(ctx, sess.conn, name, all[0])
		if errors.Is(err, zk.ErrNoNode) {
			continue // the lowest went meanwhile: look again
		}
		if err != nil {
			return store.Record{}, err, true
		}
		return rec, store.ErrHeld, true
	}
	// The term lives ttl from the session's last proof of life: prove it
	// now if that was more than a quarter of ttl ago.
	if s.proofAge(sess) > ttl/4 {
		if err := s.syncSession(ctx, sess, p); err != nil {
			if errors.Is(err, zk.ErrSessionExpired) {
				s.forgetPlace(k, pl)
				return store.Record{}, nil, false // the place went with the session
			}
			return store.Record{}, describe(err), true
		}
	}
	s.mu.Lock()
	if s.places[k] != pl || pl.taken || s.life.Closed() {
		// Dequeued meanwhile (its node is being deleted), or closed.
		s.mu.Unlock()
		if s.life.Closed() {
			return store.Record{}, store.ErrClosed, true
		}
		return store.Record{}, nil, false
	}
	pl.taken = true
	e := &entry{s: s, prefix: prefixOf(pl.node), name: name, holder: holder, meta: metadata, sess: sess,
		node: pl.node, sessionID: pl.sessionID, token: pl.token, ttl: ttl, deadline: sess.proven.Add(ttl), granted: true}
	s.addEntryLocked(e)
	s.grantLocked(e)
	s.mu.Unlock()
	e.mu.Lock()
	e.schedule(e.deadline)
	e.mu.Unlock()
	return store.Record{Term: e.term(), Remaining: time.Until(e.deadline), TTL: ttl, Metadata: metadata}, nil, true
}

// placeWait is a watch on the node just below a waiter's place.
type placeWait struct {
	pl *place
	// only: the node is the only contender below pl (at the last listing).
	only bool
}

// watchPlace wakes this handle's watchers of name when the node p (the one
// just below a waiter's place pl) goes: one ZooKeeper watch per node and
// handle. If p was the only contender below pl, its deletion makes pl the
// lowest (see place.lowest).
func (s *Store) watchPlace(sess *session, name, p string, pl *place, only bool) {
	s.mu.Lock()
	if s.placeWatches == nil {
		s.placeWatches = map[string]*placeWait{}
	}
	if w := s.placeWatches[p]; w != nil || s.life.Closed() {
		if w != nil {
			w.pl, w.only = pl, only // the latest listing's word
		}
		s.mu.Unlock()
		return
	}
	s.placeWatches[p] = &placeWait{pl: pl, only: only}
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		// done ends the watch; gone says p was seen deleted. The place
		// is marked before the watchers wake, so that their Acquire
		// finds it.
		done := func(gone bool) {
			s.mu.Lock()
			w := s.placeWatches[p]
			lowest := gone && w.only && w.pl != nil
			if lowest {
				w.pl.lowest = true
			}
			delete(s.placeWatches, p)
			s.mu.Unlock()
			if lowest && testHookPlaceLowest != nil {
				testHookPlaceLowest(p)
			}
			s.hub.Notify(name)
		}
		ok, _, ch, err := sess.conn.ExistsW(p)
		if err != nil || !ok {
			done(err == nil) // gone already, or unknown: look again
			return
		}
		select {
		case ev := <-ch: // deleted, or the connection's watches ended
			done(ev.Type == zk.EventNodeDeleted)
		case <-s.life.Done():
			s.mu.Lock()
			delete(s.placeWatches, p)
			s.mu.Unlock()
		}
	}()
}

// testHookPlaceLowest, if set (by tests), runs when a place is found the
// lowest by the deletion of the node p below it, before its watchers wake.
var testHookPlaceLowest func(p string)

// Dequeue implements store.Queuer: it deletes holder's place. After this
// handle's Acquire made the place the holder's term there is nothing to
// remove, and nothing is sent. A place this handle wrote is deleted
// without listing. Otherwise, or if it was gone, the holder's place nodes
// the listing finds are deleted, a place that another handle made the
// holder's term too: the holder's own call, as its Acquire through another
// handle replaces its live term.
func (s *Store) Dequeue(ctx context.Context, name, holder string) error {
	if err := s.life.Check(ctx); err != nil {
		return err
	}
	if err := kit.CheckDequeue(name, holder); err != nil {
		return err
	}
	op := fmt.Sprintf("dequeue %q (%s) for %s", name, s.Path(name), holder)
	p := s.Path(name)
	k := placeKey{name, holder}
	s.mu.Lock()
	pl := s.places[k]
	delete(s.places, k)
	s.mu.Unlock()
	if pl != nil && pl.taken {
		return nil
	}
	conn := s.ctl.conn
	if pl != nil { // written here: s.places keeps no other
		_, err := call(ctx, func() (struct{}, error) { return struct{}{}, conn.Delete(p+"/"+pl.node, -1) })
		if err == nil {
			return nil
		}
		if !errors.Is(err, zk.ErrNoNode) {
			return kit.Wrap(op, s.life.ClosedOr(describe(err)))
		}
		// Gone: the holder may have queued again through another handle.
	}
	kids, err := call(ctx, func() ([]string, error) { k, _, err := conn.Children(p); return k, err })
	if errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	if err != nil {
		return kit.Wrap(op, s.life.ClosedOr(describe(err)))
	}
	for _, c := range contenders(kids) {
		if !isPlace(c.name) || !isHolders(c.name, holder) {
			continue
		}
		_, err := call(ctx, func() (struct{}, error) { return struct{}{}, conn.Delete(p+"/"+c.name, -1) })
		if err != nil && !errors.Is(err, zk.ErrNoNode) {
			return kit.Wrap(op, s.life.ClosedOr(describe(err)))
		}
	}
	return nil
}

// AcquireUnqueued implements store.UnqueuedAcquirer: it is Acquire, which
// refuses every holder but the queue's first, since a place is a contender
// node in the lease's path; a free lease with nobody queued is granted in
// the create's transaction alone. Refused by a place that is the lowest
// contender, it answers ErrQueued, with the place's record.
func (s *Store) AcquireUnqueued(ctx context.Context, name, holder string, ttl time.Duration, metadata string) (store.Record, error) {
	return s.acquireOp(ctx, name, holder, ttl, metadata, true)
}

// multiErr is the error of a transaction: the call's, else the first of
// its operations'.
func multiErr(resp []zk.MultiResponse, err error) error {
	if err != nil {
		return err
	}
	for _, r := range resp {
		if r.Error != nil {
			return r.Error
		}
	}
	return nil
}
