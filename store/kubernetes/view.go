package kubernetes

import (
	"strconv"
	"time"

	"github.com/leasehold/leasehold/store"
)

// view is one reading of a Lease object, as this store judges it.
type view struct {
	_ [0]func() // not comparable: spares the binary an equality function

	holder   string
	token    int64
	dur      time.Duration // spec.leaseDurationSeconds
	elapsed  time.Duration // how long this store has seen the resourceVersion unchanged
	metadata string
}

// remaining is the time left of the term by this store's reckoning: the
// lease duration less how long the store has seen the object unchanged.
func (v view) remaining() time.Duration {
	if v.holder == "" {
		return 0
	}
	return v.dur - v.elapsed
}

func (v view) record(name string) store.Record {
	return store.Record{
		Term:      store.Term{Name: name, Holder: v.holder, Token: v.token},
		Remaining: v.remaining(),
		TTL:       v.dur,
		Metadata:  v.metadata,
	}
}

// observe notes that this store has read l (answer arrived at now) and
// returns its view of it. A resourceVersion seen before keeps the time it was
// first seen; a new one starts the clock again. delivered says that a
// watch of this store delivered l.
func (s *Store) observe(l *lease, now time.Time, delivered bool) view {
	s.mu.Lock()
	defer s.mu.Unlock()
	sg := s.sightingLocked(l.Metadata.Name)
	v := specView(l)
	if sg.last == nil || sg.last.Metadata.ResourceVersion != l.Metadata.ResourceVersion {
		sg.last, sg.since = l, now
	}
	v.elapsed = now.Sub(sg.since)
	sg.maxToken = max(sg.maxToken, v.token)
	if delivered {
		sg.delivered = l.Metadata.ResourceVersion
	}
	return v
}

// sightingLocked returns what this store has seen of obj, made empty if
// nothing yet; mu is held.
func (s *Store) sightingLocked(obj string) *sighting {
	sg := s.seen[obj]
	if sg == nil {
		sg = &sighting{}
		s.seen[obj] = sg
	}
	return sg
}

// markWaiting notes that this store waits for Lease object obj (see
// sighting.waiting): a Watch of it then reserves the waiter's token.
func (s *Store) markWaiting(obj string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sightingLocked(obj).waiting = true
}

// wrote notes l, the answer to this store's own write, which arrived at now.
func (s *Store) wrote(l *lease, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sg := s.sightingLocked(l.Metadata.Name)
	sg.last, sg.since = l, now
	sg.waiting = false // this store granted, renewed or released: not a waiter's now
	if l.Spec.LeaseTransitions != nil {
		sg.maxToken = max(sg.maxToken, int64(*l.Spec.LeaseTransitions))
	}
}

// forget drops what this store knows of an object that is gone, except the
// highest token it saw.
func (s *Store) forget(obj string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sg := s.seen[obj]; sg != nil {
		sg.last, sg.delivered = nil, ""
		sg.gap()
	}
}

func (s *Store) maxToken(obj string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sg := s.seen[obj]; sg != nil {
		return sg.maxToken
	}
	return 0
}

// cached returns the last version of obj this store saw, and how long ago it
// first saw it.
func (s *Store) cached(obj string, now time.Time) (*lease, time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sg := s.seen[obj]; sg != nil && sg.last != nil {
		return sg.last, now.Sub(sg.since)
	}
	return nil, 0
}

func specView(l *lease) view {
	var v view
	sp := l.Spec
	if sp.HolderIdentity != nil {
		v.holder = *sp.HolderIdentity
	}
	if sp.LeaseTransitions != nil {
		v.token = int64(*sp.LeaseTransitions)
	}
	if sp.LeaseDurationSeconds != nil {
		v.dur = time.Duration(*sp.LeaseDurationSeconds) * time.Second
	}
	if v.holder != "" && l.Metadata.Annotations[AnnotationMetadataToken] == strconv.FormatInt(v.token, 10) {
		v.metadata = l.Metadata.Annotations[AnnotationMetadata]
	}
	return v
}
