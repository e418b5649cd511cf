package storetest

import (
	"errors"

	"github.com/leasehold/leasehold/store"
)

// testGetFoundAfterGrant: once a name was granted, Get never again answers
// ErrNotFound, whether the term was released or expired, on any handle. A
// leasehold.Scheduler claims a period only on the first grant ever of the
// period's lease name, and knows it by a Get that found no record (SAFETY.md
// rule 16): a store that forgot a granted name would let a period run twice.
func testGetFoundAfterGrant(s *suite) {
	a := s.store()
	rel := s.acquire(a, "period-released", "node-a", s.longTTL())
	if err := a.Release(s.ctx(), rel.Term); err != nil {
		s.t.Fatalf("Release: %v", err)
	}
	exp := s.acquire(a, "period-expired", "node-a", s.h.MinTTL)
	s.waitExpired(a, "period-expired")
	for _, st := range []store.Store{a, s.store()} {
		for _, granted := range []store.Record{rel, exp} {
			g, err := st.Get(s.ctx(), granted.Name)
			if errors.Is(err, store.ErrNotFound) {
				s.t.Fatalf("Get(%q) after a grant (token %d) ended: ErrNotFound, as if never granted", granted.Name, granted.Token)
			}
			if err != nil {
				s.t.Fatalf("Get(%q): %v", granted.Name, err)
			}
			// (A fresh Kubernetes handle may still call the expired term
			// live: it has not yet watched it for a lease duration.)
			if g.Token < granted.Token {
				s.t.Fatalf("Get(%q) = %+v after the term of token %d ended; want the token kept", granted.Name, g, granted.Token)
			}
		}
	}
}
