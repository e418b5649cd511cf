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

// raiseHighWater records that a token of at least want is about to be granted
// on Lease object o.obj, and returns the token to grant: want, or one above
// the recorded mark if that is higher. Each write carries the version it read
// (create, or update with resourceVersion), so two contenders never record
// the same value; a token is granted only after the mark holds it, so the
// mark is never below a token granted by leasehold.
func (s *Store) raiseHighWater(ctx context.Context, o object, want int64) (int64, error) {
	name := HighWaterName(o.obj)
	for range maxConflicts {
		cur, err := s.leases.get(ctx, name)
		if isNotFound(err) {
			l := new(lease)
			l.Metadata.Name, l.Metadata.Namespace = name, s.ns
			l.Metadata.Annotations = map[string]string{AnnotationHighWaterOf: o.obj, AnnotationHighWater: strconv.FormatInt(want, 10)}
			if _, err := s.leases.create(ctx, l); isAlreadyExists(err) {
				continue
			} else if err != nil {
				return 0, fmt.Errorf("create the high-water mark %s: %w", name, err)
			}
			return want, nil
		}
		if err != nil {
			return 0, fmt.Errorf("read the high-water mark %s: %w", name, err)
		}
		if of := cur.Metadata.Annotations[AnnotationHighWaterOf]; of != o.obj {
			return 0, fmt.Errorf("%w: Lease %q, where lease %q keeps its high-water mark, is not leasehold's mark for it (annotation %s is %q)", store.ErrInvalid, name, o.name, AnnotationHighWaterOf, of)
		}
		mark, err := strconv.ParseInt(cur.Metadata.Annotations[AnnotationHighWater], 10, 64)
		if err != nil || mark < 0 {
			return 0, fmt.Errorf("high-water mark %s holds %q, not a token: repair it by hand (set %s to the highest token the fenced resource has accepted)", name, cur.Metadata.Annotations[AnnotationHighWater], AnnotationHighWater)
		}
		tok := max(want, mark+1)
		if tok > math.MaxInt32 {
			return 0, errors.New("leaseTransitions is at its largest value; no higher token can be granted")
		}
		next := cur.clone()
		next.Metadata.Annotations[AnnotationHighWater] = strconv.FormatInt(tok, 10)
		if _, err := s.leases.update(ctx, next); isConflict(err) {
			// Another contender raised it first: it may by now hold the
			// Lease, so the caller looks at the Lease again before trying
			// once more (or answers ErrHeld).
			return 0, errHighWaterRaced
		} else if err != nil {
			return 0, fmt.Errorf("raise the high-water mark %s: %w", name, err)
		}
		return tok, nil
	}
	return 0, fmt.Errorf("lost the race to raise the high-water mark %s %d times in a row", name, maxConflicts)
}
