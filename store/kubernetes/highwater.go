package kubernetes

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/leasehold/leasehold/store"
)

// The fencing token of a lease is its Lease's leaseTransitions, and deleting
// the Lease (kubectl delete lease) used to start it again at 1. So every
// grant first records its token in a second object, the lease's high-water
// mark, and grants above it: a Lease deleted and created again keeps its
// tokens rising, because the mark is not deleted with it.
//
// Why a second object and not something of the Lease's own that only rises:
// the API contract makes resourceVersion opaque (clients may compare it only
// for equality, and it is not guaranteed to be a number, nor to survive an
// etcd backup restore as one); creationTimestamp has one-second resolution and
// says nothing of how many grants a Lease had; and leaseTransitions is what
// client-go reads, so it must stay a small int32 that client-go also raises.
// The mark is a Lease too, so that the store needs no permission beyond the
// ones it has (get, create, update on leases), and it has no holder, so that
// nothing takes it for a held lease.
const (
	// AnnotationHighWaterOf marks a high-water object: it holds the name of
	// the Lease object whose tokens it keeps.
	AnnotationHighWaterOf = "leasehold.dev/high-water-of"
	// AnnotationHighWater holds the highest token granted by leasehold on
	// that Lease, in decimal.
	AnnotationHighWater = "leasehold.dev/token-high-water"
)

// highWaterPrefix starts the name of every high-water object.
const highWaterPrefix = "leasehold-hw."

// HighWaterName is the name of the Lease object that keeps the highest token
// granted on Lease object obj: "leasehold-hw." followed by obj, or by a hash
// of obj when that would be longer than an object name may be.
func HighWaterName(obj string) string { return companionName(highWaterPrefix, obj) }

// companionName is the name of an object leasehold keeps beside Lease
// object obj: prefix followed by obj, or by a hash of obj when that would be
// longer than an object name may be.
func companionName(prefix, obj string) string {
	if n := prefix + obj; len(n) <= 253 {
		return n
	}
	sum := sha256.Sum256([]byte(obj))
	return prefix + hex.EncodeToString(sum[:])
}

// isHighWater reports whether l is a high-water object.
func isHighWater(l *lease) bool {
	_, ok := l.Metadata.Annotations[AnnotationHighWaterOf]
	return ok
}

// errHighWaterRaced: another contender raised the mark between our read and
// our write. Acquire then reads the Lease again.
var errHighWaterRaced = errors.New("lost the race to raise the high-water mark")

// markSighting is the version of a high-water object this store read or
// wrote last.
type markSighting struct {
	last *lease
	// checked is the Lease's token (leaseTransitions) as this store knew
	// it when it read or wrote last: while the Lease shows no higher
	// token, no other grant has raised the mark since, as far as this
	// store can tell, and the mark is written from last without a read.
	checked int64
}

// sawMark notes l, a version of high-water object name that this store read
// or wrote, when the Lease's token was known to be checked. A mark of M
// says that grants up to M have been made or are being made, so the Lease
// showing a token up to M says nothing new of it either.
func (s *Store) sawMark(name string, l *lease, checked int64) {
	if m, err := strconv.ParseInt(l.Metadata.Annotations[AnnotationHighWater], 10, 64); err == nil {
		checked = max(checked, m)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.marks[name] = &markSighting{last: l, checked: checked}
}

// cachedMark returns the version of high-water object name this store saw
// last, if it saw it when the Lease's token was already known to be at least
// token; nil otherwise.
func (s *Store) cachedMark(name string, token int64) *lease {
	s.mu.Lock()
	defer s.mu.Unlock()
	if m := s.marks[name]; m != nil && m.checked >= token {
		return m.last
	}
	return nil
}

// forgetMark drops the version of high-water object name this store saw.
func (s *Store) forgetMark(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.marks, name)
}

// reserveToken raises the high-water mark of o to the token the next grant
// would take (one above seen, the highest token the Lease has shown), while
// this store watches the Lease and another holder has it, so that the grant
// that follows the release writes only the Lease (see takeReservation). It
// does nothing while a reservation above seen stands. Errors are dropped:
// the grant then raises the mark itself. Outside a watch of this store on
// the Lease it does nothing: a refusal then is no wait.
//
// A reserved token is above every token granted when it was reserved (the
// mark was raised to it with the version read); every grant since raised
// the mark above it first. So it may be granted while no version of the
// Lease since has shown it or more, which this store knows only while the
// watches it ran when it reserved have run since without a gap: each
// version they delivered raised maxToken.
func (s *Store) reserveToken(ctx context.Context, o object, seen int64) {
	// One at a time: a reservation under way (Watch starts one) is waited
	// for, so that a refused Acquire returns with the token reserved.
	if !s.awaitReservation(ctx, o.obj) {
		return
	}
	s.mu.Lock()
	r, ok := s.claimReservationLocked(o.obj, seen)
	s.mu.Unlock()
	if ok {
		s.reserve(ctx, o, r)
	}
}

// reservation is a reserveToken under way.
type reservation struct {
	sg   *sighting
	gen  uint64 // sg.watchGen when it was claimed
	seen int64
	done chan struct{}
}

// claimReservationLocked marks a reservation of obj's next token above seen
// as under way, if one is wanted (see reserveToken); s.mu is held.
func (s *Store) claimReservationLocked(obj string, seen int64) (reservation, bool) {
	sg := s.sightingLocked(obj)
	if s.watched[obj] == 0 || sg.reserved > seen || sg.reserving != nil {
		return reservation{}, false
	}
	r := reservation{sg: sg, gen: sg.watchGen, seen: seen, done: make(chan struct{})}
	sg.reserving = r.done
	return r, true
}

// reserve raises the mark for the claimed reservation r and keeps the
// token if no watch gap came meanwhile.
func (s *Store) reserve(ctx context.Context, o object, r reservation) {
	tok, err := s.raiseHighWater(ctx, o, r.seen+1)
	s.mu.Lock()
	defer s.mu.Unlock()
	r.sg.reserving = nil
	close(r.done)
	if err == nil && r.sg.watchGen == r.gen {
		r.sg.reserved = tok
	}
}

// awaitReservation waits until no reserveToken of Lease object obj is under
// way. It reports false if ctx ended first.
func (s *Store) awaitReservation(ctx context.Context, obj string) bool {
	for {
		s.mu.Lock()
		var ch chan struct{}
		if sg := s.seen[obj]; sg != nil {
			ch = sg.reserving
		}
		s.mu.Unlock()
		if ch == nil {
			return true
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		}
	}
}

// takeReservation returns the token this store reserved for Lease object
// obj, to grant on version rv, if it may be: rv is the version a watch
// delivered last, and the token is at least want (above every token the
// Lease has shown). A reservation still held was made while watches ran
// that have run since without a gap (see sighting.gap). It returns 0
// otherwise. A token returned is no longer reserved, whatever becomes of
// the write.
func (s *Store) takeReservation(obj, rv string, want int64) int64 {
	s.mu.Lock()
	var tok int64
	if sg := s.seen[obj]; sg != nil && rv == sg.delivered && sg.reserved >= want {
		tok, sg.reserved = sg.reserved, 0
	}
	s.mu.Unlock()
	return tok
}

// raiseHighWater records that a token of at least want is about to be granted
// on Lease object o.obj, and returns the token to grant: want, or one above
// the recorded mark if that is higher. Each write carries the version it read
// (create, or update with resourceVersion), so two contenders never record
// the same value; a token is granted only after the mark holds it, so the
// mark is never below a token granted by leasehold.
//
// The first write starts from the version of the mark this store saw last
// (no read) if it saw it since the Lease last showed a token of want-1 or
// more: the mark then changes only with a grant this store would have
// seen. The server's resourceVersion check decides; if the version was not
// the current one, the mark is read, and if another grant has raised it to
// want or more since, the caller looks at the Lease again.
func (s *Store) raiseHighWater(ctx context.Context, o object, want int64) (int64, error) {
	name := HighWaterName(o.obj)
	cur := s.cachedMark(name, want-1)
	cached, recheck := cur != nil, false
	for range maxConflicts {
		if cur == nil {
			var err error
			cur, err = s.leases.get(ctx, name)
			if isNotFound(err) {
				s.forgetMark(name)
				l := new(lease)
				l.Metadata.Name, l.Metadata.Namespace = name, s.ns
				l.Metadata.Annotations = map[string]string{AnnotationHighWaterOf: o.obj, AnnotationHighWater: strconv.FormatInt(want, 10)}
				created, err := s.leases.create(ctx, l)
				if isAlreadyExists(err) {
					continue
				} else if err != nil {
					return 0, fmt.Errorf("create the high-water mark %s: %w", name, err)
				}
				s.sawMark(name, created, want)
				return want, nil
			}
			if err != nil {
				return 0, fmt.Errorf("read the high-water mark %s: %w", name, err)
			}
			s.sawMark(name, cur, want-1)
		}
		if of := cur.Metadata.Annotations[AnnotationHighWaterOf]; of != o.obj {
			return 0, fmt.Errorf("%w: Lease %q, where lease %q keeps its high-water mark, is not leasehold's mark for it (annotation %s is %q)", store.ErrInvalid, name, o.name, AnnotationHighWaterOf, of)
		}
		mark, err := strconv.ParseInt(cur.Metadata.Annotations[AnnotationHighWater], 10, 64)
		if err != nil || mark < 0 {
			return 0, fmt.Errorf("high-water mark %s holds %q, not a token: repair it by hand (set %s to the highest token the fenced resource has accepted)", name, cur.Metadata.Annotations[AnnotationHighWater], AnnotationHighWater)
		}
		if recheck && mark >= want {
			// The version this store had was out of date, and the mark
			// now holds a token another contender is granting or has
			// granted since: look at the Lease again.
			return 0, errHighWaterRaced
		}
		tok := max(want, mark+1)
		if tok > math.MaxInt32 {
			return 0, errors.New("leaseTransitions is at its largest value; no higher token can be granted")
		}
		next := cur.clone()
		next.Metadata.Annotations[AnnotationHighWater] = strconv.FormatInt(tok, 10)
		updated, err := s.leases.update(ctx, next)
		switch {
		case err == nil:
			s.sawMark(name, updated, tok)
			return tok, nil
		case cached && (isConflict(err) || isNotFound(err)):
			// The version this store saw last is not the current one.
			s.forgetMark(name)
			cur, cached, recheck = nil, false, true
		case isConflict(err):
			// Another contender raised it first: it may by now hold the
			// Lease, so the caller looks at the Lease again before trying
			// once more (or answers ErrHeld).
			return 0, errHighWaterRaced
		default:
			return 0, fmt.Errorf("raise the high-water mark %s: %w", name, err)
		}
	}
	return 0, fmt.Errorf("lost the race to raise the high-water mark %s %d times in a row", name, maxConflicts)
}
