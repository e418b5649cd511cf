package kubernetes

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/leasehold/leasehold/store"
)

// The queue of a lease (store.Queuer) is one more Lease object beside the
// lease and its high-water mark, so that it needs no other resource:
// "leasehold-q." followed by the Lease object's name, with no holder and two
// annotations, leasehold.dev/queue-of (the Lease object it orders) and
// leasehold.dev/queue, the places in order, as JSON:
//
//	{"next":7,"places":[{"holder":"node-b","ttlMillis":15000,"seq":5},
//	                    {"holder":"node-c","ttlMillis":15000,"seq":7}]}
//
// Every write carries the resourceVersion it read, so two waiters that race
// to queue are put in one order. Each write stamps the place it writes or
// refreshes with the object's next sequence number, so a place's seq changes
// exactly when it is refreshed.
//
// Kubernetes expires nothing, so a place's expiry is judged as a lease's
// is (see observe): an observer judges a place expired once it has seen
// the same seq for the place's ttl on its own monotonic clock, and removes
// it with a write conditional on the version it read, which a refresh in
// the meantime makes fail. A place grants nothing: a wrong judgement (a
// clock that runs fast) can only reorder the waiters, and the lease itself
// is still taken only by Acquire, which refuses while a term is live.
const (
	// AnnotationQueueOf marks a queue object: it holds the name of the
	// Lease object whose waiters it orders.
	AnnotationQueueOf = "leasehold.dev/queue-of"
	// AnnotationQueue holds the places of the queue, in order, as JSON.
	AnnotationQueue = "leasehold.dev/queue"
)

// queuePrefix starts the name of every queue object.
const queuePrefix = "leasehold-q."

// QueueName is the name of the Lease object that holds the queue of Lease
// object obj: "leasehold-q." followed by obj, or by a hash of obj when that
// would be longer than an object name may be.
func QueueName(obj string) string { return companionName(queuePrefix, obj) }

// isQueue reports whether l is a queue object.
func isQueue(l *lease) bool {
	_, ok := l.Metadata.Annotations[AnnotationQueueOf]
	return ok
}

// maxQueueRaces bounds how often one Enqueue or Dequeue loses the race to
// write the queue object. Each loss means another waiter's write got in;
// under contention every waiter but one loses each round, so the bound is
// that of the high-water mark, not of a Lease.
const maxQueueRaces = maxHighWaterRaces

// queue is the content of AnnotationQueue.
type queue struct {
	// Next is the seq of the latest write: every write stamps the place it
	// writes with Next+1 and stores that as Next.
	Next   int64   `json:"next"`
	Places []place `json:"places"`
}

// place is one waiter's place.
type place struct {
	Holder    string `json:"holder"`
	TTLMillis int64  `json:"ttlMillis"`
	// Seq is the write that last wrote the place: it changes at each
	// refresh, and never comes back in the object's life.
	Seq int64 `json:"seq"`
}

// queueSighting is what this Store has seen of one queue object.
type queueSighting struct {
	uid string
	// rv and places are the latest version this store read or wrote; a
	// Watch on the lease follows the object from there.
	rv     string
	places []place
	// since is, per holder, the seq of its place this store saw last and
	// when it first saw that seq.
	since map[string]placeSighting
	// mine is the places this store wrote and has not dequeued: a Watch
	// on the lease follows the queue object only for them.
	mine map[string]myPlace
}

// myPlace is a place this store wrote: the seq it stamped and when it sent
// the write (no observer can have seen that seq earlier).
type myPlace struct {
	seq  int64 // 0: not known in this version of the object
	sent time.Time
}

type placeSighting struct {
	seq   int64
	since time.Time
}

// readQueue reads the queue object qn of lease o: nil if there is none.
func (s *Store) readQueue(ctx context.Context, o object, qn string) (*lease, queue, error) {
	l, err := s.leases.get(ctx, qn)
	if isNotFound(err) {
		return nil, queue{}, nil
	}
	if err != nil {
		return nil, queue{}, err
	}
	if of := l.Metadata.Annotations[AnnotationQueueOf]; of != o.obj {
		return nil, queue{}, fmt.Errorf("%w: Lease %q, where lease %q keeps its queue, is not leasehold's queue for it (annotation %s is %q)", store.ErrInvalid, qn, o.name, AnnotationQueueOf, of)
	}
	q, err := decodeQueue(l)
	if err != nil {
		return nil, queue{}, fmt.Errorf("queue object %s: %w (delete it: a queue only orders waiters)", qn, err)
	}
	return l, q, nil
}

func decodeQueue(l *lease) (queue, error) {
	var q queue
	if err := json.Unmarshal([]byte(l.Metadata.Annotations[AnnotationQueue]), &q); err != nil {
		return queue{}, fmt.Errorf("annotation %s: %w", AnnotationQueue, err)
	}
	return q, nil
}

// withQueue returns a copy of l holding q.
func withQueue(l *lease, q queue) *lease {
	b, err := json.Marshal(q)
	if err != nil {
		panic("leasehold/kubernetes: encode a queue: " + err.Error())
	}
	next := l.clone()
	next.Metadata.Annotations[AnnotationQueue] = string(b)
	return next
}

// sawQueue notes that this store read or wrote version l of a queue object,
// holding q, with the answer arriving at now, and returns the holders whose
// places it has seen unchanged for their ttl: expired by its clock.
func (s *Store) sawQueue(l *lease, q queue, now time.Time) map[string]bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	sg := s.queues[l.Metadata.Name]
	if sg == nil || sg.uid != l.Metadata.UID {
		// New, or deleted and created again: a seq of the old object
		// says nothing of the new one.
		mine := map[string]myPlace{}
		if sg != nil {
			for h, p := range sg.mine {
				mine[h] = myPlace{sent: p.sent}
			}
		}
		sg = &queueSighting{uid: l.Metadata.UID, since: map[string]placeSighting{}, mine: mine}
		s.queues[l.Metadata.Name] = sg
	}
	sg.rv, sg.places = l.Metadata.ResourceVersion, q.Places
	since := make(map[string]placeSighting, len(q.Places))
	expired := map[string]bool{}
	for _, p := range q.Places {
		ps, ok := sg.since[p.Holder]
		if !ok || ps.seq != p.Seq {
			ps = placeSighting{seq: p.Seq, since: now}
		}
		since[p.Holder] = ps
		if now.Sub(ps.since) >= time.Duration(p.TTLMillis)*time.Millisecond {
			expired[p.Holder] = true
		}
	}
	sg.since = since
	return expired
}

// setMine notes that this store wrote holder's place, stamped seq, in a
// write it sent at sent.
func (s *Store) setMine(qn, holder string, seq int64, sent time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sg := s.queues[qn]; sg != nil {
		sg.mine[holder] = myPlace{seq: seq, sent: sent}
	}
}

// dropMine notes that holder has left the queue.
func (s *Store) dropMine(qn, holder string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sg := s.queues[qn]; sg != nil {
		delete(sg.mine, holder)
	}
}

// refreshedLately returns holder's position in places if its place there is
// the one this store last wrote, with ttl ms, less than a tenth of that ttl
// before now: an observer cannot judge it expired for at least nine tenths
// of its ttl more, so a refresh need not write. (The core refreshes each
// RetryPeriod, by default 2/15 of the ttl, and also on every wake-up of its
// watch, which under contention is several times a hand-off: those extra
// refreshes cost one read each instead of a write to the object every
// waiter writes.)
func (s *Store) refreshedLately(qn, holder string, places []place, ms int64, now time.Time) (int, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sg := s.queues[qn]
	if sg == nil {
		return 0, false
	}
	mp, ok := sg.mine[holder]
	if !ok || now.Sub(mp.sent) >= time.Duration(ms)*time.Millisecond/10 {
		return 0, false
	}
	i := slices.IndexFunc(places, func(p place) bool { return p.Holder == holder })
	if i < 0 || places[i].Seq != mp.seq || places[i].TTLMillis != ms {
		return 0, false
	}
	return i, true
}

// forgetQueue drops what this store knows of queue object qn, which is gone.
func (s *Store) forgetQueue(qn string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.queues, qn)
}

// queueToFollow returns the version of queue object qn to follow a watch
// from, and the holders it had, if this store has a place in it.
func (s *Store) queueToFollow(qn string) (rv string, holders map[string]bool, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sg := s.queues[qn]
	if sg == nil || len(sg.mine) == 0 || sg.rv == "" {
		return "", nil, false
	}
	return sg.rv, holderSet(sg.places), true
}

func holderSet(places []place) map[string]bool {
	set := make(map[string]bool, len(places))
	for _, p := range places {
		set[p.Holder] = true
	}
	return set
}

// Enqueue implements store.Queuer: one read of the queue object and one
// write (a create for the first place), conditional on the version read.
// Places this store has seen unchanged for their ttl are dropped by the same
// write. A place's ttl is kept to the millisecond. A refresh less than a
// tenth of the ttl after this store's last write of the place (with the same
// ttl, nothing expired) writes nothing (see refreshedLately): the place then
// lives at least nine tenths of the ttl from now, not the whole ttl.
func (s *Store) Enqueue(ctx context.Context, name, holder string, ttl time.Duration) (int, error) {
	if err := s.life.Check(ctx); err != nil {
		return 0, err
	}
	if err := kit.CheckEnqueue(name, holder, ttl); err != nil {
		return 0, err
	}
	o, err := objectFor(name)
	if err != nil {
		return 0, err
	}
	fail := func(err error) (int, error) {
		return 0, fmt.Errorf("leasehold/kubernetes: enqueue %q: %w", name, err)
	}
	ms := int64((ttl + time.Millisecond - 1) / time.Millisecond)
	qn := QueueName(o.obj)
	s.markWaiting(o.obj) // a Watch of the Lease now serves a waiter (see Watch)
	for range maxQueueRaces {
		cur, q, err := s.readQueue(ctx, o, qn)
		if err != nil {
			return fail(err)
		}
		if cur == nil {
			s.forgetQueue(qn)
			l := new(lease)
			l.Metadata.Name, l.Metadata.Namespace = qn, s.ns
			l.Metadata.Annotations = map[string]string{AnnotationQueueOf: o.obj}
			q := queue{Next: 1, Places: []place{{Holder: holder, TTLMillis: ms, Seq: 1}}}
			sent := s.now()
			created, err := s.leases.create(ctx, withQueue(l, q))
			if isAlreadyExists(err) {
				continue
			}
			if err != nil {
				return fail(err)
			}
			s.sawQueue(created, q, s.now())
			s.setMine(qn, holder, 1, sent)
			return 0, nil
		}
		now := s.now()
		expired := s.sawQueue(cur, q, now)
		if i, ok := s.refreshedLately(qn, holder, q.Places, ms, now); ok && len(expired) == 0 {
			return i, nil
		}
		next := queue{Next: q.Next + 1}
		ahead := -1
		for _, p := range q.Places {
			if expired[p.Holder] {
				continue // its own expired place too: it goes to the back
			}
			if p.Holder == holder {
				p.TTLMillis, p.Seq = ms, next.Next
				ahead = len(next.Places)
			}
			next.Places = append(next.Places, p)
		}
		if ahead < 0 {
			ahead = len(next.Places)
			next.Places = append(next.Places, place{Holder: holder, TTLMillis: ms, Seq: next.Next})
		}
		sent := s.now()
		written, err := s.leases.update(ctx, withQueue(cur, next))
		if isConflict(err) || isNotFound(err) {
			continue // another waiter wrote, or the last one left: read again
		}
		if err != nil {
			return fail(err)
		}
		s.sawQueue(written, next, s.now())
		s.setMine(qn, holder, next.Next, sent)
		return ahead, nil
	}
	return fail(fmt.Errorf("lost the race to write the queue object %s %d times in a row", qn, maxQueueRaces))
}

// Dequeue implements store.Queuer: one read of the queue object and, if
// holder has a place there (or a place this store judges expired), one
// write without it, conditional on the version read. The last place's
// Dequeue deletes the object, with the version read as a precondition, so
// that an emptied queue leaves nothing; without the "delete" verb (an older
// Role) it writes the queue empty instead.
func (s *Store) Dequeue(ctx context.Context, name, holder string) error {
	if err := s.life.Check(ctx); err != nil {
		return err
	}
	if err := kit.CheckDequeue(name, holder); err != nil {
		return err
	}
	o, err := objectFor(name)
	if err != nil {
		return err
	}
	fail := func(err error) error {
		return fmt.Errorf("leasehold/kubernetes: dequeue %q: %w", name, err)
	}
	qn := QueueName(o.obj)
	for range maxQueueRaces {
		cur, q, err := s.readQueue(ctx, o, qn)
		if err != nil {
			return fail(err)
		}
		if cur == nil {
			s.forgetQueue(qn)
			return nil
		}
		expired := s.sawQueue(cur, q, s.now())
		next := queue{Next: q.Next}
		next.Places = slices.DeleteFunc(slices.Clone(q.Places), func(p place) bool {
			return p.Holder == holder || expired[p.Holder]
		})
		if len(next.Places) == len(q.Places) {
			s.dropMine(qn, holder)
			return nil // nothing to remove: no write
		}
		if len(next.Places) == 0 {
			err := s.leases.deleteAt(ctx, qn, cur.Metadata.ResourceVersion)
			if isConflict(err) {
				continue // a waiter queued or refreshed since: read again
			}
			if err == nil || isNotFound(err) {
				s.forgetQueue(qn)
				return nil
			}
			if !IsForbidden(err) {
				return fail(err)
			}
			// No "delete" verb: leave the object, empty.
		}
		written, err := s.leases.update(ctx, withQueue(cur, next))
		if isConflict(err) {
			continue
		}
		if isNotFound(err) {
			s.forgetQueue(qn)
			return nil
		}
		if err != nil {
			return fail(err)
		}
		s.sawQueue(written, next, s.now())
		s.dropMine(qn, holder)
		return nil
	}
	return fail(fmt.Errorf("lost the race to write the queue object %s %d times in a row", qn, maxQueueRaces))
}

// queueEvents returns the handler of a watch on a queue object whose
// places' holders were last: it calls wake when a place leaves (a holder
// gone, or the object deleted), not when one joins or is refreshed.
func queueEvents(last map[string]bool, wake func()) func(watchEvent) bool {
	return func(ev watchEvent) bool {
		switch ev.Type {
		case "ADDED", "MODIFIED":
			var l lease
			if err := json.Unmarshal(ev.Object, &l); err != nil {
				return false
			}
			q, err := decodeQueue(&l)
			if err != nil {
				return false
			}
			now := holderSet(q.Places)
			for h := range last {
				if !now[h] {
					wake()
					break
				}
			}
			last = now
		case "DELETED":
			if len(last) > 0 {
				wake()
			}
			last = nil
		case "BOOKMARK":
		default: // ERROR: the watch is broken
			return false
		}
		return true
	}
}
