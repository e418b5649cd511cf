package etcd

import (
	"github.com/leasehold/leasehold/store/etcd/internal/etcdapi"
)

// A fair waiter's grant on its watch's event alone.
//
// grantPlace makes a place this handle wrote the term once the place is the
// lowest contender key, and checks that with a read (as etcd's Mutex and
// Election read once their predecessor's key is deleted). The read is left
// out when this handle's watch of the name has already shown it: a refused
// Acquire read, at revision at, the contender keys below the place (below);
// a watch that reports every change after a revision no later than at
// (nameWatch.from), and had applied none after at (nameWatch.seen), then saw
// each of them deleted, and no change to the place's own key. Keys created after at rank after the place (a create revision only
// rises), so the place is the lowest key from that deletion on, with the key,
// create revision and holder the read saw (a place becomes a term through
// another handle only by a put of its key, and leaves the queue only by a
// delete of it, or by its lease's expiry, which the grant bounds by its own
// keep-alives as before). What the grant no longer checks is a deletion of
// the place after the watch's last event and before the grant, which only an
// operator's force release or the holder's own call through another handle
// makes: see SAFETY.md's fair-queue section.

// nameWatch is one of this handle's watches of a name's contender keys.
type nameWatch struct {
	// from: every change after this revision reaches the watch, in order.
	from int64
	// seen: the revision of the last change the watch has applied to its
	// proofs. A proof from a read at an earlier revision would miss the
	// changes in between, so it is not followed by this watch.
	seen   int64
	proofs map[placeID]*placeProof
}

// placeProof follows, through one watch, the keys below a place of this
// handle's.
type placeProof struct {
	rev int64  // the place's create revision
	key string // the place's key
	at  int64  // the revision of the read that found below
	// below: the contender keys below the place at that read that the watch
	// has not yet seen deleted.
	below map[string]bool
	// lowest: every key of below was seen deleted, and no change to the
	// place's key. It stays set once the watch ends.
	lowest bool
	w      *nameWatch // nil once the watch ended
}

// addWatch registers a watch of name, created at revision from.
func (s *Store) addWatch(name string, from int64) *nameWatch {
	w := &nameWatch{from: from, proofs: map[placeID]*placeProof{}}
	s.watchMu.Lock()
	defer s.watchMu.Unlock()
	if s.watches == nil {
		s.watches = map[string][]*nameWatch{}
	}
	s.watches[name] = append(s.watches[name], w)
	return w
}

// endWatch forgets watch w of name. The places it had proven lowest stay so;
// the others lose their proof.
func (s *Store) endWatch(name string, w *nameWatch) {
	s.watchMu.Lock()
	defer s.watchMu.Unlock()
	ws := s.watches[name]
	for i, x := range ws {
		if x == w {
			ws = append(ws[:i], ws[i+1:]...)
			break
		}
	}
	if len(ws) == 0 {
		delete(s.watches, name)
	} else {
		s.watches[name] = ws
	}
	for id, pr := range w.proofs {
		pr.w = nil
		if !pr.lowest && s.proofs[id] == pr {
			delete(s.proofs, id)
		}
	}
	w.proofs = nil
}

// followBelow starts the proof that holder's place p (written by this
// handle) becomes the lowest key of name: v is a read at revision at that
// found other contender keys below it. It is followed by the latest live
// watch of name that reports every change after at and has applied none
// yet, if any.
func (s *Store) followBelow(name string, id placeID, p place, at int64, v queueView) {
	below := map[string]bool{}
	for _, c := range v.contenders {
		if c.create < p.rev {
			below[string(c.key)] = true
		}
	}
	s.watchMu.Lock()
	defer s.watchMu.Unlock()
	s.unfollowLocked(id)
	ws := s.watches[name]
	var w *nameWatch
	for i := len(ws) - 1; i >= 0; i-- {
		if ws[i].from <= at && ws[i].seen <= at {
			w = ws[i]
			break
		}
	}
	if w == nil || len(below) == 0 {
		return
	}
	if s.proofs == nil || len(s.proofs) >= maxPlaces {
		for id, pr := range s.proofs {
			if pr.w != nil {
				delete(pr.w.proofs, id)
			}
		}
		s.proofs = map[placeID]*placeProof{}
	}
	pr := &placeProof{rev: p.rev, key: p.key, at: at, below: below, w: w}
	s.proofs[id] = pr
	w.proofs[id] = pr
}

// unfollowLocked drops the proof of id's place, if any.
func (s *Store) unfollowLocked(id placeID) {
	if pr := s.proofs[id]; pr != nil {
		if pr.w != nil {
			delete(pr.w.proofs, id)
		}
		delete(s.proofs, id)
	}
}

// followEvents applies a watch response's events to the proofs w follows.
func (s *Store) followEvents(w *nameWatch, evs []etcdapi.Event) {
	s.watchMu.Lock()
	defer s.watchMu.Unlock()
	for _, ev := range evs {
		w.seen = max(w.seen, ev.Revision)
	}
	for id, pr := range w.proofs {
		for _, ev := range evs {
			if ev.Revision <= pr.at {
				continue // before the read (a key's name may be reused)
			}
			key := string(ev.Key)
			if key == pr.key {
				// The place was deleted, or put again (made a term through
				// another handle): only a read tells.
				delete(w.proofs, id)
				delete(s.proofs, id)
				pr.lowest = false
				break
			}
			if ev.Delete && pr.below[key] {
				delete(pr.below, key)
				pr.lowest = len(pr.below) == 0
			}
		}
	}
}

// provenLowest reports whether a watch has shown id's place, of create
// revision rev, the lowest contender key (see the top of this file). The
// proof serves one grant: it is dropped when it answers true.
func (s *Store) provenLowest(id placeID, rev int64) bool {
	s.watchMu.Lock()
	defer s.watchMu.Unlock()
	pr := s.proofs[id]
	if pr == nil || pr.rev != rev || !pr.lowest {
		return false
	}
	s.unfollowLocked(id)
	return true
}
