package zookeeper

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/leasehold/leasehold/store"
)

var (
	_ store.Queuer           = (*Store)(nil)
	_ store.UnqueuedAcquirer = (*Store)(nil)
)

// queueDir is the folder, under the root, of the queues (Config.Fair): the
// queue of name N is the path root/.leasehold-queue/N. No lease name starts
// with '.', so it is never a lease's path.
const queueDir = ".leasehold-queue"

func (s *Store) queuePath(name string) string {
	return strings.TrimSuffix(s.root, "/") + "/" + queueDir + "/" + name
}

// placePrefix is the name prefix of holder's place node: "p-" and the
// holder in hex (a holder may hold '/'), then '-' and the sequence number
// ZooKeeper appends.
func placePrefix(holder string) string { return "p-" + hex.EncodeToString([]byte(holder)) + "-" }

// placeSeq is the sequence number of a place node, or false.
func placeSeq(child string) (int64, bool) {
	i := strings.LastIndexByte(child, '-')
	if !strings.HasPrefix(child, "p-") || i < 2 || len(child)-i-1 != 10 {
		return 0, false
	}
	n, err := strconv.ParseInt(child[i+1:], 10, 64)
	return n, err == nil
}

// Enqueue implements store.Queuer with ZooKeeper's own queue recipe: a
// place is an ephemeral sequential node under the queue's path, in this
// handle's session of timeout ttl (the one a term of that ttl lives in),
// and its position is its sequence number. A place lives as long as that
// session: a refresh changes nothing on the server (the session's own
// heartbeats keep it), and the place of a waiter whose process died or
// was cut off goes when the session expires, ttl later; a Close that
// carries no term ends the session, and its places, at once. A waiter that
// is not first watches the place just before it, and wakes this handle's
// watchers of name when that place goes.
func (s *Store) Enqueue(ctx context.Context, name, holder string, ttl time.Duration) (int, error) {
	if err := s.life.Check(ctx); err != nil {
		return 0, err
	}
	if err := kit.CheckEnqueue(name, holder, ttl); err != nil {
		return 0, err
	}
	if ttl < s.minSession {
		return 0, kit.Invalid("enqueue", "ttl %v is below the shortest session the ensemble grants, %v", ttl, s.minSession)
	}
	if ttl%time.Millisecond != 0 {
		ttl = ttl.Truncate(time.Millisecond) + time.Millisecond
	}
	op := fmt.Sprintf("enqueue %q for %s", name, holder)
	sess, err := s.sessionFor(ctx, ttl)
	if err != nil {
		if errors.Is(err, store.ErrInvalid) || errors.Is(err, store.ErrClosed) {
			return 0, err
		}
		return 0, kit.Wrap(op, err)
	}
	qp := s.queuePath(name)
	pfx := placePrefix(holder)
	created := false
	for attempt := 0; attempt < 3; attempt++ {
		kids, err := call(ctx, func() ([]string, error) { k, _, err := sess.conn.Children(qp); return k, err })
		if err != nil && !errors.Is(err, zk.ErrNoNode) {
			return 0, kit.Wrap(op, s.life.ClosedOr(describe(err)))
		}
		type place struct {
			child string
			seq   int64
		}
		var places []place
		for _, k := range kids {
			if n, ok := placeSeq(k); ok {
				places = append(places, place{k, n})
			}
		}
		sort.Slice(places, func(i, j int) bool { return places[i].seq < places[j].seq })
		at, mine := -1, 0
		for i, p := range places {
			if strings.HasPrefix(p.child, pfx) {
				if at < 0 {
					at = i
				}
				mine++
			}
		}
		if at >= 0 {
			if mine == 1 {
				s.notePlace(name, holder, places[at].child)
			} else {
				s.notePlace(name, holder, "")
			}
			if at > 0 {
				s.watchPlace(sess, name, qp+"/"+places[at-1].child)
			}
			return at, nil
		}
		if created {
			// Our node is not there: its session ended meanwhile. Queue again.
			created = false
		}
		if errors.Is(err, zk.ErrNoNode) {
			if err := s.ensurePath(ctx, sess.conn, qp); err != nil {
				return 0, kit.Wrap(op, s.life.ClosedOr(err))
			}
		}
		// The queue's path is written in the place's transaction: its data
		// version rises with every place, which AcquireUnqueued checks.
		resp, err := call(ctx, func() ([]zk.MultiResponse, error) {
			return sess.conn.Multi(
				&zk.CreateRequest{Path: qp + "/" + pfx, Acl: s.cfg.ACL, Flags: zk.FlagEphemeralSequential},
				&zk.SetDataRequest{Path: qp, Version: -1})
		})
		if err = multiErr(resp, err); err != nil {
			s.notePlace(name, holder, "") // a place may have been written
			return 0, kit.Wrap(op, s.life.ClosedOr(describe(err)))
		}
		created = true
	}
	return 0, kit.Errorf(op, "the place written was gone on each of 3 reads (its session keeps ending)")
}

// watchPlace wakes this handle's watchers of name when the place node p
// goes (one ZooKeeper watch per node and handle).
func (s *Store) watchPlace(sess *session, name, p string) {
	s.mu.Lock()
	if s.placeWatches == nil {
		s.placeWatches = map[string]bool{}
	}
	if s.placeWatches[p] || s.life.Closed() {
		s.mu.Unlock()
		return
	}
	s.placeWatches[p] = true
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		defer func() {
			s.mu.Lock()
			delete(s.placeWatches, p)
			s.mu.Unlock()
		}()
		ok, _, ch, err := sess.conn.ExistsW(p)
		if err != nil || !ok {
			s.hub.Notify(name) // gone already, or unknown: look again
			return
		}
		select {
		case <-ch: // deleted, or the connection's watches ended
		case <-s.life.Done():
			return
		}
		s.hub.Notify(name)
	}()
}

// placeKey names a waiter's place: its lease name and holder.
type placeKey struct{ name, holder string }

// notePlace records the place node child as holder's only place for name,
// as an Enqueue's listing found it; "" forgets what was recorded (the
// listing found more than one, or a place may have been written unseen).
func (s *Store) notePlace(name, holder, child string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := placeKey{name, holder}
	if child == "" {
		delete(s.places, k)
		return
	}
	if s.places == nil {
		s.places = map[placeKey]string{}
	}
	if _, ok := s.places[k]; !ok && len(s.places) >= maxNotes {
		for o := range s.places {
			delete(s.places, o) // one, any: Dequeue then lists
			break
		}
	}
	s.places[k] = child
}

// Dequeue implements store.Queuer: it deletes holder's place nodes. A place
// this handle's last Enqueue of holder found, as holder's only one, is
// deleted without listing the queue; if it is gone already (another handle
// dequeued it, or its session ended), the queue is listed.
func (s *Store) Dequeue(ctx context.Context, name, holder string) error {
	if err := s.life.Check(ctx); err != nil {
		return err
	}
	if err := kit.CheckDequeue(name, holder); err != nil {
		return err
	}
	op := fmt.Sprintf("dequeue %q for %s", name, holder)
	conn := s.ctl.conn
	qp := s.queuePath(name)
	s.mu.Lock()
	k := placeKey{name, holder}
	known := s.places[k]
	delete(s.places, k)
	s.mu.Unlock()
	if known != "" {
		_, err := call(ctx, func() (struct{}, error) { return struct{}{}, conn.Delete(qp+"/"+known, -1) })
		if err == nil {
			return nil
		}
		if !errors.Is(err, zk.ErrNoNode) {
			return kit.Wrap(op, s.life.ClosedOr(describe(err)))
		}
	}
	kids, err := call(ctx, func() ([]string, error) { k, _, err := conn.Children(qp); return k, err })
	if errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	if err != nil {
		return kit.Wrap(op, s.life.ClosedOr(describe(err)))
	}
	pfx := placePrefix(holder)
	for _, k := range kids {
		if _, ok := placeSeq(k); !ok || !strings.HasPrefix(k, pfx) {
			continue
		}
		_, err := call(ctx, func() (struct{}, error) { return struct{}{}, conn.Delete(qp+"/"+k, -1) })
		if err != nil && !errors.Is(err, zk.ErrNoNode) {
			return kit.Wrap(op, s.life.ClosedOr(describe(err)))
		}
	}
	return nil
}

// AcquireUnqueued implements store.UnqueuedAcquirer. Every Enqueue writes
// the queue's path node in the transaction that creates its place, so the
// path's data version rises with every place written. AcquireUnqueued reads
// that version with the queue's listing, only while the listing shows no
// place, and the transaction that creates the contender node checks it:
// if a place was written since, the transaction applies nothing, and the
// queue is listed again (ErrQueued while a place is there). A place that
// leaves (Dequeue, or its session's end) does not change the version: the
// queue only got shorter.
//
// The handle keeps the last version it read with an empty queue, per name,
// so a lease taken and released again and again with nobody queued costs
// what Acquire costs, the create's transaction alone; the first
// AcquireUnqueued of a name through a handle lists the queue first (and
// creates the queue's path if it is missing, to have a version to check).
// Places written by a leasehold release before this one do not raise the
// version: while such a process queues on the same ensemble, a fair Lock
// may take a free lease ahead of it.
func (s *Store) AcquireUnqueued(ctx context.Context, name, holder string, ttl time.Duration, metadata string) (store.Record, error) {
	return s.acquireOp(ctx, name, holder, ttl, metadata, true)
}

// errQueueWritten: a contender's transaction was refused because the
// queue's path version it checked has changed; nothing was written.
var errQueueWritten = errors.New("a place was queued since the queue was read")

// queueCheck is one AcquireUnqueued's condition on name's queue: the data
// version of the queue's path, read with no place in the queue. A nil
// queueCheck (Acquire) checks nothing.
type queueCheck struct {
	s     *Store
	name  string
	ver   int32
	known bool // ver is set
}

// op is the check for a create's transaction: the version this handle
// remembers for an empty queue, or, if there is none, one read now with
// the queue's listing (its path is created if missing), and remembered. It
// answers ErrQueued while the queue holds a place.
func (q *queueCheck) op(ctx context.Context, conn *zk.Conn) (*zk.CheckVersionRequest, error) {
	if q == nil {
		return nil, nil
	}
	s := q.s
	qp := s.queuePath(q.name)
	if !q.known {
		s.mu.Lock()
		q.ver, q.known = s.emptyQueues[q.name]
		s.mu.Unlock()
	}
	for tries := 0; !q.known; tries++ {
		var stat *zk.Stat
		kids, err := call(ctx, func() (k []string, err error) { k, stat, err = conn.Children(qp); return })
		if errors.Is(err, zk.ErrNoNode) && tries == 0 {
			err = s.ensurePath(ctx, conn, qp)
			if err == nil {
				continue
			}
		}
		if err != nil {
			return nil, describe(err)
		}
		for _, k := range kids {
			if _, ok := placeSeq(k); ok {
				return nil, store.ErrQueued
			}
		}
		q.ver, q.known = stat.Version, true
		s.mu.Lock()
		if s.emptyQueues == nil || len(s.emptyQueues) >= maxNotes {
			s.emptyQueues = map[string]int32{} // a lost note costs a listing
		}
		s.emptyQueues[q.name] = q.ver
		s.mu.Unlock()
	}
	return &zk.CheckVersionRequest{Path: qp, Version: q.ver}, nil
}

// failed forgets the version a transaction's check refused (a place was
// written since), here and in the handle, so that the next op reads it.
func (q *queueCheck) failed() {
	q.known = false
	q.s.mu.Lock()
	if v, ok := q.s.emptyQueues[q.name]; ok && v == q.ver {
		delete(q.s.emptyQueues, q.name) // not a newer one another call read
	}
	q.s.mu.Unlock()
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
