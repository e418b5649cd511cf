package etcd

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/etcd/internal/etcdapi"
)

var (
	_ store.Queuer           = (*Store)(nil)
	_ store.UnqueuedAcquirer = (*Store)(nil)
)

// The queue of lease name N (store.Queuer, for Config.Fair) is etcd's own:
// the contender keys under P N/ in the order of their create revisions, the
// queue of etcd's concurrency package (Mutex, Election, etcdctl lock and
// elect). A waiter's place is a contender key P N/<place lease hex>, holding
// the holder's identity, on an etcd lease of the place's ttl, and beside it a
// marker on the same lease, written in the same transaction (so both have the
// same create revision):
//
//	P .leasehold/queue/N <holder>   value: the place key after "P N/"
//
// The marker says which contender key is a leasehold place, and whose (an
// etcd Election's key may hold any value, a holder's identity included, and
// must never be taken for a place); and it keeps a holder to one place per
// name (Enqueue writes one only while the marker is absent). Neither a name
// nor a holder contains a space, so the space separates them.
//
// A place grants nothing, but in etcd's queue it ranks like any contender:
// an etcd Mutex or Election behind it waits for its key to go, and Acquire
// refuses every other holder while it is there (a non-fair Acquire writes its
// key only when no contender key exists). When the place is the lowest key,
// its holder's Acquire, through the handle that wrote the place, makes it
// the term with a read and no write (grantPlace, acquire.go): the key, its
// create revision (the term's token, and its rank in etcd's queue) and its
// etcd lease are kept, and a transaction sent after the grant deletes the
// marker and records the term. A place this handle did not write (or, with
// another TTL or a doubtful lease, cannot grant so) is made the term in one
// transaction that moves the key to a term's lease and deletes the marker;
// a place of the holder found lowest but not this handle's to grant is the
// holder's live term, replaced as any other.
//
// A Store handle remembers the places it wrote or refreshed, to spare reads
// and to know on Acquire that the holder queues; every use is checked in the
// transaction that relies on it.

// queueDir is the folder, under the prefix, of the place markers.
const queueDir = ".leasehold/queue/"

func (s *Store) markerPrefix(name string) string { return s.prefix + queueDir + name + " " }
func (s *Store) markerKey(name, holder string) string {
	return s.markerPrefix(name) + holder
}

type placeID struct{ name, holder string }

// place is a holder's place in a name's queue.
type place struct {
	_ [0]func() // not comparable: spares the binary an equality function

	holder string
	key    string // the contender key
	marker string
	rev    int64           // the create revision of key and marker (one transaction)
	lease  etcdapi.LeaseID // the place's own etcd lease
	// first: a read showed key as the lowest contender key. It stays the
	// lowest while it exists: a key created later has a higher revision.
	first bool
	// written: this handle's Enqueue wrote the place (it was not found,
	// written through another handle). Only such a place is made a term
	// here, and only once (converted).
	written bool
	// converted: this handle's Acquire made the place its holder's term,
	// deleting the marker; Dequeue has nothing left to do.
	converted bool
}

// maxPlaces bounds the handle's memory of places; it is only a hint.
const maxPlaces = 4096

func (s *Store) placeOf(id placeID) (place, bool) {
	s.placesMu.Lock()
	defer s.placesMu.Unlock()
	p, ok := s.places[id]
	if !ok || p.converted {
		return place{}, false
	}
	return p, true
}

func (s *Store) keepPlace(id placeID, p place) {
	s.placesMu.Lock()
	defer s.placesMu.Unlock()
	if len(s.places) >= maxPlaces {
		clear(s.places)
	}
	if old, ok := s.places[id]; ok && old.rev == p.rev {
		// A read of the same place: what this handle knows of it stays
		// (a place it wrote stays its own, one it made a term stays one,
		// whatever another goroutine read meanwhile).
		p.written = p.written || old.written
		p.converted = p.converted || old.converted
	}
	s.places[id] = p
}

// claimPlace marks id's place, at create revision rev, as made a term
// before the request that makes it one is sent, so that no other goroutine
// of this handle makes it a term too (both would get its token). It
// reports false if the place is not this handle's to make a term, or is
// one already (or is being made one). unclaimPlace takes the mark back
// when that request did not apply.
func (s *Store) claimPlace(id placeID, rev int64) bool {
	s.placesMu.Lock()
	defer s.placesMu.Unlock()
	p, ok := s.places[id]
	if !ok || p.rev != rev || p.converted {
		return false
	}
	p.converted = true
	s.places[id] = p
	return true
}

func (s *Store) unclaimPlace(id placeID, rev int64) {
	s.placesMu.Lock()
	defer s.placesMu.Unlock()
	if p, ok := s.places[id]; ok && p.rev == rev {
		p.converted = false
		s.places[id] = p
	}
}

// placeTaken reports whether this handle made id's last place a term.
func (s *Store) placeTaken(id placeID) bool {
	s.placesMu.Lock()
	defer s.placesMu.Unlock()
	p, ok := s.places[id]
	return ok && p.converted
}

// takePlace removes and returns what the handle remembers of id's place.
func (s *Store) takePlace(id placeID) (place, bool) {
	s.placesMu.Lock()
	defer s.placesMu.Unlock()
	p, ok := s.places[id]
	delete(s.places, id)
	return p, ok
}

// dropPlace forgets p, found gone (expired, dequeued, or made a term), and
// revokes its lease if this handle granted it (it then carries at most a
// marker left behind).
func (s *Store) dropPlace(id placeID, p place) {
	s.placesMu.Lock()
	if q, ok := s.places[id]; ok && q.rev == p.rev {
		delete(s.places, id)
	}
	s.placesMu.Unlock()
	s.dropPlaceLease(p.lease)
}

// placeLease is what a handle knows of an etcd lease it granted for places.
type placeLease struct {
	secs       int64
	pooled     bool
	aliveUntil time.Time // a lower bound of its expiry on this host's clock
	// tainted: a keep-alive this handle sent for it went unanswered, so etcd
	// may still apply it later. Harmless to a place; such a lease never
	// carries a term (grantPlace).
	tainted bool
}

// Reusing place leases. A place lease carries one place (its key and
// marker), the term that place became without a write (grantPlace), or
// nothing. It enters the handle's pool only after a transaction of this
// handle removed what it carried (a grant that moved the place's key off it,
// Dequeue's delete, or the Release of the term it carried), so it carries
// nothing; the next place of the handle with the same TTL is written on it,
// with a keep-alive sent alongside. A place lease is never pooled as a term
// lease nor the other way round, and a handle revokes a place lease it did
// not grant only right after its own transaction removed that lease's place
// (no other handle can have pooled it then). A late keep-alive for an old
// place on a reused lease extends the newer place (or the term it became)
// at most one TTL past its holder's own renewals: it can delay a failover,
// never extend a holder's trust, which counts from its own keep-alives. A
// lease with a keep-alive of this handle unanswered never carries a term.
const maxPooledPlaces = 128

// trackPlaceLease records a lease this handle just granted for a place.
func (s *Store) trackPlaceLease(id etcdapi.LeaseID, secs int64, aliveUntil time.Time) {
	s.placesMu.Lock()
	defer s.placesMu.Unlock()
	if len(s.placeLeases) >= maxOwnLeases {
		for lid, l := range s.placeLeases {
			if !l.pooled {
				delete(s.placeLeases, lid)
			}
		}
	}
	s.placeLeases[id] = &placeLease{secs: secs, aliveUntil: aliveUntil}
}

// takePlaceLease takes a pooled place lease of secs that has enough life
// left; the ones found too old are revoked.
func (s *Store) takePlaceLease(secs int64, now time.Time) (etcdapi.LeaseID, bool) {
	s.placesMu.Lock()
	var stale []etcdapi.LeaseID
	defer func() {
		s.placesMu.Unlock()
		for _, id := range stale {
			s.revokeLater(id)
		}
	}()
	ids := s.placePool[secs]
	defer func() {
		if len(ids) == 0 {
			delete(s.placePool, secs)
		} else {
			s.placePool[secs] = ids
		}
	}()
	for len(ids) > 0 {
		id := ids[len(ids)-1]
		ids = ids[:len(ids)-1]
		l := s.placeLeases[id]
		if l == nil || !l.pooled {
			continue
		}
		if l.aliveUntil.Sub(now) < min(poolMinLeft, time.Duration(secs)*time.Second/2) {
			delete(s.placeLeases, id)
			stale = append(stale, id)
			continue
		}
		l.pooled = false
		return id, true
	}
	return 0, false
}

// placeLeaseFreed settles lease id after a transaction of this handle
// removed the place it carried: pooled if this handle granted it and the
// pool has room, else revoked.
func (s *Store) placeLeaseFreed(id etcdapi.LeaseID) {
	closed := s.life.Closed()
	s.placesMu.Lock()
	l := s.placeLeases[id]
	keep := l != nil && !l.pooled && !closed && len(s.placePool[l.secs]) < maxPooledPlaces
	if keep {
		l.pooled = true
		s.placePool[l.secs] = append(s.placePool[l.secs], id)
	} else {
		delete(s.placeLeases, id)
	}
	s.placesMu.Unlock()
	if !keep {
		s.revokeLater(id)
	}
}

// placeLeaseAlive records a later lower bound of a place lease's expiry.
func (s *Store) placeLeaseAlive(id etcdapi.LeaseID, until time.Time) {
	s.placesMu.Lock()
	defer s.placesMu.Unlock()
	if l := s.placeLeases[id]; l != nil && until.After(l.aliveUntil) {
		l.aliveUntil = until
	}
}

// placeLeaseTainted records that a keep-alive sent for place lease id may
// still be applied by etcd.
func (s *Store) placeLeaseTainted(id etcdapi.LeaseID) {
	s.placesMu.Lock()
	defer s.placesMu.Unlock()
	if l := s.placeLeases[id]; l != nil {
		l.tainted = true
	}
}

// placeLeaseForTerm reports, for a place lease of secs seconds that this
// handle granted and that carries its place, a lower bound of its expiry;
// ok is false if the handle does not know it so, or a keep-alive for it went
// unanswered (it must not carry a term then).
func (s *Store) placeLeaseForTerm(id etcdapi.LeaseID, secs int64) (aliveUntil time.Time, ok bool) {
	s.placesMu.Lock()
	defer s.placesMu.Unlock()
	l := s.placeLeases[id]
	if l == nil || l.pooled || l.tainted || l.secs != secs {
		return time.Time{}, false
	}
	return l.aliveUntil, true
}

// placeLeaseToTerm moves place lease id, whose place just became term t
// (grantPlace), from the place table to the term table: renewals keep it
// alive for t, and once t is released here it goes back to the place pool
// (putPool), never to the term pool.
func (s *Store) placeLeaseToTerm(id etcdapi.LeaseID, t store.Term, aliveUntil time.Time) {
	s.placesMu.Lock()
	l := s.placeLeases[id]
	delete(s.placeLeases, id)
	s.placesMu.Unlock()
	if l == nil {
		return
	}
	s.termsMu.Lock()
	defer s.termsMu.Unlock()
	s.leases[id] = &ownLease{secs: l.secs, term: t, aliveUntil: aliveUntil, fromPlace: true, tainted: l.tainted}
}

// poolPlaceLease puts lease id, which carried a term made from a place and
// now carries nothing, in the place pool, or revokes it if the pool is full
// or the store closed.
func (s *Store) poolPlaceLease(id etcdapi.LeaseID, secs int64, aliveUntil time.Time) {
	closed := s.life.Closed()
	s.placesMu.Lock()
	keep := !closed && len(s.placePool[secs]) < maxPooledPlaces && len(s.placeLeases) < maxOwnLeases
	if keep {
		s.placeLeases[id] = &placeLease{secs: secs, pooled: true, aliveUntil: aliveUntil}
		s.placePool[secs] = append(s.placePool[secs], id)
	}
	s.placesMu.Unlock()
	if !keep {
		s.revokeLater(id)
	}
}

// dropPlaceLease forgets a place lease of this handle and revokes it (a
// lease of another handle is left alone: it may have pooled it).
func (s *Store) dropPlaceLease(id etcdapi.LeaseID) {
	s.placesMu.Lock()
	l := s.placeLeases[id]
	if l != nil && !l.pooled {
		delete(s.placeLeases, id)
	}
	s.placesMu.Unlock()
	if l != nil && !l.pooled {
		s.revokeLater(id)
	}
}

// pooledPlaceLeases takes every lease out of the place pool (for Close).
func (s *Store) pooledPlaceLeases() []etcdapi.LeaseID {
	s.placesMu.Lock()
	defer s.placesMu.Unlock()
	return drainPool(s.placePool, s.placeLeases)
}

// queueView is one read of a name's contender keys and place markers.
type queueView struct {
	contenders []mvccKV // by create revision; the lowest holds, in etcd's terms
	nested     []string // the sub-prefixes of nested names (not contenders)
	places     map[int64]place
	byHolder   map[string]place
}

// queueView sorts a read of the contender prefix (by create revision) and of
// the name's markers. A marker names a place only if its key exists with the
// marker's create revision.
func (s *Store) queueView(name string, contenderKVs, markerKVs []etcdapi.KeyValue) queueView {
	pfx, mpfx := s.lockPrefix(name), s.markerPrefix(name)
	v := queueView{places: map[int64]place{}, byHolder: map[string]place{}}
	v.contenders, v.nested = split(pfx, contenderKVs)
	byKey := make(map[string]mvccKV, len(v.contenders))
	for _, c := range v.contenders {
		byKey[string(c.key)] = c
	}
	for _, m := range markerKVs {
		if len(m.Key) <= len(mpfx) || !validSuffix(m.Value) {
			continue
		}
		key := pfx + string(m.Value)
		c, ok := byKey[key]
		if !ok || c.create != m.CreateRevision {
			continue
		}
		p := place{holder: string(m.Key[len(mpfx):]), key: key, marker: string(m.Key), rev: m.CreateRevision, lease: etcdapi.LeaseID(m.Lease)}
		p.first = v.contenders[0].create == p.rev
		v.places[p.rev] = p
		v.byHolder[p.holder] = p
	}
	return v
}

// validSuffix reports whether a marker's value can name a contender key.
func validSuffix(v []byte) bool {
	return len(v) > 0 && !strings.ContainsRune(string(v), '/')
}

// ahead is the number of places ahead of the key created at rev: the
// contender keys created before it, less the lowest if it holds (a leasehold
// term or an etcd tool's key; a leasehold place that is lowest has not taken
// the lease yet, and counts).
func (v queueView) ahead(rev int64) int {
	n := 0
	for _, c := range v.contenders {
		if c.create < rev {
			n++
		}
	}
	if n > 0 {
		if _, isPlace := v.places[v.contenders[0].create]; !isPlace {
			n--
		}
	}
	return n
}

// aheadOf is v.ahead(rev), less the lowest contender when it is a place this
// handle has made its holder's term: the transaction that records the term
// deletes the place's marker after the grant (recordPlace), and until it
// lands the key still reads as a place, though it holds.
func (s *Store) aheadOf(name string, v queueView, rev int64) int {
	n := v.ahead(rev)
	if n == 0 {
		return 0
	}
	low := v.contenders[0].create
	if p, isPlace := v.places[low]; isPlace {
		if _, held := s.recall(store.Term{Name: name, Holder: p.holder, Token: low}); held {
			n--
		}
	}
	return n
}

// queueOps read what queueView sorts.
func (s *Store) queueOps(name string) []etcdapi.Op {
	return []etcdapi.Op{contendersOp(s.lockPrefix(name)), etcdapi.GetPrefix(s.markerPrefix(name))}
}

func (s *Store) readQueue(ctx context.Context, name string) (queueView, error) {
	resp, err := s.cli.Txn(rctx(ctx), nil, s.queueOps(name), nil)
	if err != nil {
		return queueView{}, err
	}
	return s.queueView(name, resp.Responses[0].Kvs, resp.Responses[1].Kvs), nil
}

// Enqueue implements store.Queuer. A new place is a contender key and a
// marker on a new etcd lease of ttl (whole seconds, as for a term), written
// in one transaction only if the holder has no marker for name. A refresh
// sends a keep-alive for the place's lease, which keeps the key and so its
// rank (a ttl other than the place's first keeps the first). The places
// ahead are the contender keys created before the place, etcd Mutex and
// Election waiters included, less the lowest when it holds (a term, or an
// etcd tool's key that is lowest).
func (s *Store) Enqueue(ctx context.Context, name, holder string, ttl time.Duration) (int, error) {
	if err := s.life.Check(ctx); err != nil {
		return 0, err
	}
	if err := kit.CheckEnqueue(name, holder, ttl); err != nil {
		return 0, err
	}
	secs, err := ttlSeconds(ttl)
	if err != nil {
		return 0, fmt.Errorf("leasehold/etcd: enqueue %q for %s: %w", name, holder, err)
	}
	n, err := s.enqueue(ctx, name, holder, secs)
	if err != nil {
		return 0, fmt.Errorf("leasehold/etcd: enqueue %q for %s: %w", name, holder, err)
	}
	return n, nil
}

func (s *Store) enqueue(ctx context.Context, name, holder string, secs int64) (int, error) {
	id := placeID{name, holder}
	if s.placeTaken(id) {
		// This handle made the holder's last place its term, deleting the
		// marker: most likely there is none, so write one at once (the
		// transaction checks it).
		n, done, err := s.newPlace(ctx, name, holder, secs)
		if err != nil || done {
			return n, err
		}
	}
	for attempt := 0; attempt < 4; attempt++ {
		if p, ok := s.placeOf(id); ok {
			n, alive, err := s.refreshPlace(ctx, name, p)
			if err != nil || alive {
				return n, err
			}
			s.dropPlace(id, p)
		}
		v, err := s.readQueue(ctx, name)
		if err != nil {
			return 0, err
		}
		if p, ok := v.byHolder[holder]; ok {
			// Written through another handle: keep it alive from here.
			_, clean, err := s.keepAlive(rctx(ctx), p.lease)
			if !clean {
				s.placeLeaseTainted(p.lease)
			}
			if errors.Is(err, etcdapi.ErrLeaseNotFound) {
				continue // expired meanwhile
			}
			if err != nil {
				return 0, fmt.Errorf("keep-alive of the place's lease: %w", err)
			}
			s.keepPlace(id, p)
			return s.aheadOf(name, v, p.rev), nil
		}
		n, done, err := s.newPlace(ctx, name, holder, secs)
		if err != nil || done {
			return n, err
		}
	}
	return 0, errors.New("the queue kept changing under 4 attempts")
}

// refreshPlace sends a keep-alive for place p's lease and, at the same time,
// reads the queue. alive is false if p is gone.
func (s *Store) refreshPlace(ctx context.Context, name string, p place) (n int, alive bool, err error) {
	kaErr := make(chan error, 1)
	sent := time.Now()
	go func() {
		ttl, clean, err := s.keepAlive(rctx(ctx), p.lease)
		if err == nil {
			s.placeLeaseAlive(p.lease, sent.Add(time.Duration(ttl)*time.Second))
		}
		if !clean {
			s.placeLeaseTainted(p.lease)
		}
		kaErr <- err
	}()
	v, rerr := s.readQueue(ctx, name)
	err = <-kaErr
	switch {
	case rerr != nil:
		return 0, false, rerr
	case errors.Is(err, etcdapi.ErrLeaseNotFound):
		return 0, false, nil
	case err != nil:
		return 0, false, fmt.Errorf("keep-alive of the place's lease: %w", err)
	}
	q, ok := v.byHolder[p.holder]
	if !ok || q.rev != p.rev {
		return 0, false, nil
	}
	if q.first && !p.first {
		q.written = p.written
		s.keepPlace(placeID{name, p.holder}, q)
	}
	return s.aheadOf(name, v, p.rev), true, nil
}

// newPlace writes holder's place at the back of name's queue. done is false
// if the holder has a marker already (a place written meanwhile through
// another handle, or a marker whose key is gone, which it removes).
func (s *Store) newPlace(ctx context.Context, name, holder string, secs int64) (n int, done bool, err error) {
	pfx := s.lockPrefix(name)
	sent := time.Now()
	lease, pooled := s.takePlaceLease(secs, sent)
	var kaErr chan error
	if pooled {
		// The keep-alive goes alongside the transaction: the place lives
		// its whole ttl from about now.
		kaErr = make(chan error, 1)
		go func() {
			_, clean, err := s.keepAlive(rctx(ctx), lease)
			if !clean {
				s.placeLeaseTainted(lease)
			}
			kaErr <- err
		}()
	} else {
		id, gttl, err := s.cli.Grant(rctx(ctx), secs)
		if err != nil {
			return 0, false, fmt.Errorf("grant the place's lease: %w", err)
		}
		lease = id
		s.trackPlaceLease(lease, secs, sent.Add(time.Duration(gttl)*time.Second))
	}
	suffix := strconv.FormatInt(int64(lease), 16)
	key, marker := pfx+suffix, s.markerKey(name, holder)
	then := append([]etcdapi.Op{etcdapi.Put(key, holder, lease), etcdapi.Put(marker, suffix, lease)}, s.queueOps(name)...)
	resp, err := s.cli.Txn(rctx(ctx),
		[]etcdapi.Cmp{etcdapi.CreateRevisionIs(marker, 0), etcdapi.CreateRevisionIs(key, 0)},
		then, []etcdapi.Op{etcdapi.Get(marker), etcdapi.Get(key)})
	if kaErr != nil {
		kerr := <-kaErr
		if err == nil && kerr != nil {
			err = fmt.Errorf("keep-alive of the place's pooled lease: %w", kerr)
		}
		if kerr == nil {
			s.placeLeaseAlive(lease, sent.Add(time.Duration(secs)*time.Second))
		}
	}
	if err != nil {
		if pooled && errors.Is(err, etcdapi.ErrLeaseNotFound) {
			s.dropPlaceLease(lease)
			return 0, false, nil // the pooled lease had expired: nothing was written; try again
		}
		s.dropPlaceLease(lease) // and with it whatever it may have written
		return 0, false, err
	}
	if !resp.Succeeded {
		// Nothing was written on the lease. If a key of its name exists (the
		// term an earlier place on it became, still live), it cannot carry
		// a place on this name: give it back rather than pool it.
		if len(resp.Responses[1].Kvs) > 0 {
			s.dropPlaceLease(lease)
		} else {
			s.placeLeaseFreed(lease)
		}
		if m := resp.Responses[0].Kvs; len(m) > 0 {
			// A marker without its key (deleted by hand): remove it.
			_, err := s.cli.Txn(rctx(ctx), []etcdapi.Cmp{
				etcdapi.CreateRevisionIs(marker, m[0].CreateRevision),
				etcdapi.CreateRevisionIs(pfx+string(m[0].Value), 0),
			}, []etcdapi.Op{etcdapi.Delete(marker, false)}, nil)
			if err != nil {
				return 0, false, err
			}
		}
		return 0, false, nil
	}
	p := place{holder: holder, key: key, marker: marker, rev: resp.Revision, lease: lease, written: true}
	v := s.queueView(name, resp.Responses[2].Kvs, resp.Responses[3].Kvs)
	p.first = len(v.contenders) > 0 && v.contenders[0].create == p.rev
	s.keepPlace(placeID{name, holder}, p)
	return s.aheadOf(name, v, p.rev), true, nil
}

// Dequeue implements store.Queuer. It deletes the holder's place key and
// marker in a transaction that applies only while the marker is the one
// written with the place (so the key is still a place, not a term); the
// place's lease, which carries nothing then, goes to this handle's pool of
// place leases if this handle granted it, else is revoked. After this
// handle's Acquire made the place the holder's term, there is nothing to
// remove and nothing is sent.
func (s *Store) Dequeue(ctx context.Context, name, holder string) error {
	if err := s.life.Check(ctx); err != nil {
		return err
	}
	if err := kit.CheckDequeue(name, holder); err != nil {
		return err
	}
	if s.placeTaken(placeID{name, holder}) {
		return nil // kept in memory: the next Enqueue writes a place at once
	}
	p, known := s.takePlace(placeID{name, holder})
	if err := s.dequeue(ctx, name, holder, p, known); err != nil {
		return fmt.Errorf("leasehold/etcd: dequeue %q for %s: %w", name, holder, err)
	}
	return nil
}

func (s *Store) dequeue(ctx context.Context, name, holder string, p place, known bool) error {
	marker := s.markerKey(name, holder)
	for attempt := 0; attempt < 4; attempt++ {
		if !known {
			resp, err := s.cli.Range(rctx(ctx), etcdapi.Get(marker))
			if err != nil {
				return err
			}
			if len(resp.Kvs) == 0 {
				return nil
			}
			m := resp.Kvs[0]
			p = place{marker: marker, rev: m.CreateRevision, lease: etcdapi.LeaseID(m.Lease)}
			if validSuffix(m.Value) {
				p.key = s.lockPrefix(name) + string(m.Value)
			}
		}
		// While the marker written with the place is there, the place key is
		// the place or gone: it becomes a term only in the transaction that
		// deletes the marker.
		ops := []etcdapi.Op{etcdapi.Delete(marker, false)}
		if p.key != "" {
			ops = append(ops, etcdapi.Delete(p.key, false))
		}
		resp, err := s.cli.Txn(rctx(ctx), []etcdapi.Cmp{etcdapi.CreateRevisionIs(marker, p.rev)}, ops, nil)
		if err != nil {
			return err
		}
		if resp.Succeeded {
			s.placeLeaseFreed(p.lease)
			return nil
		}
		known = false
	}
	return errors.New("the holder's place kept changing under 4 attempts")
}
