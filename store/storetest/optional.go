package storetest

import (
	"errors"
	"fmt"

	"github.com/leasehold/leasehold/store"
)

func testRenewMany(s *suite) {
	st := s.store()
	br, ok := st.(store.BatchRenewer)
	if !ok {
		s.t.Skip("store has no BatchRenewer capability; terms are renewed one by one")
	}
	ttl := s.longTTL()
	var terms []store.Term
	for i := 0; i < 20; i++ {
		terms = append(terms, s.acquire(st, fmt.Sprintf("shard/%d", i), "node-a", ttl).Term)
	}
	// Make some stale: released, replaced by another holder, a wrong token.
	if err := st.Release(s.ctx(), terms[3]); err != nil {
		s.t.Fatal(err)
	}
	if err := st.Release(s.ctx(), terms[5]); err != nil {
		s.t.Fatal(err)
	}
	s.acquire(st, "shard/5", "node-b", ttl)
	terms[7].Token++
	recs, errs, err := br.RenewMany(s.ctx(), terms, 2*ttl)
	if err != nil {
		s.t.Fatalf("RenewMany: %v", err)
	}
	if len(recs) != len(terms) || len(errs) != len(terms) {
		s.t.Fatalf("RenewMany returned %d records and %d errors for %d terms", len(recs), len(errs), len(terms))
	}
	for i, t := range terms {
		stale := i == 3 || i == 5 || i == 7
		switch {
		case stale && !errors.Is(errs[i], store.ErrNotHeld):
			s.t.Errorf("term %v: err = %v, want ErrNotHeld", t, errs[i])
		case !stale && errs[i] != nil:
			s.t.Errorf("term %v: err = %v, want renewed", t, errs[i])
		case !stale && (recs[i].Term != t || recs[i].Remaining <= ttl):
			s.t.Errorf("term %v: record %+v, want the same term extended past %v", t, recs[i], ttl)
		}
	}
	g, err := st.Get(s.ctx(), "shard/5")
	if err != nil || g.Holder != "node-b" {
		s.t.Fatalf("a stale term in a batch touched the newer term: %+v, %v", g, err)
	}
}

func testList(s *suite) {
	st := s.store()
	l, ok := st.(store.Lister)
	if !ok {
		s.t.Skip("store has no Lister capability")
	}
	ttl := s.longTTL()
	b := s.acquire(st, "list/b", "node-b", ttl)
	a := s.acquire(st, "list/a", "node-a", ttl)
	c := s.acquire(st, "list/c", "node-c", ttl)
	if err := st.Release(s.ctx(), c.Term); err != nil {
		s.t.Fatal(err)
	}
	recs, err := l.List(s.ctx())
	if err != nil {
		s.t.Fatalf("List: %v", err)
	}
	var names []string
	byName := map[string]store.Record{}
	for _, r := range recs {
		names = append(names, r.Name)
		byName[r.Name] = r
	}
	for i := 1; i < len(names); i++ {
		if names[i-1] >= names[i] {
			s.t.Fatalf("List names %v are not in order", names)
		}
	}
	if r := byName["list/a"]; r.Term != a.Term || !r.Live() {
		s.t.Errorf("List has list/a as %+v, want %+v live", r, a.Term)
	}
	if r := byName["list/b"]; r.Term != b.Term || !r.Live() {
		s.t.Errorf("List has list/b as %+v, want %+v live", r, b.Term)
	}
	if r, ok := byName["list/c"]; ok && (r.Live() || r.Token != c.Token) {
		s.t.Errorf("List has released list/c as %+v, want not live with token %d", r, c.Token)
	}
}

func testForceRelease(s *suite) {
	st := s.store()
	fr, ok := st.(store.ForceReleaser)
	if !ok {
		s.t.Skip("store has no ForceReleaser capability")
	}
	ttl := s.longTTL()
	if _, err := fr.ForceRelease(s.ctx(), "never-granted"); !errors.Is(err, store.ErrNotFound) {
		s.t.Errorf("ForceRelease of a name never granted: err = %v, want ErrNotFound", err)
	}
	held := s.acquire(st, "job", "node-a", ttl)
	old, err := fr.ForceRelease(s.ctx(), "job")
	if err != nil {
		s.t.Fatalf("ForceRelease: %v", err)
	}
	if old.Term != held.Term {
		s.t.Errorf("ForceRelease returned %+v, want the evicted term %+v", old, held.Term)
	}
	if _, err := st.Renew(s.ctx(), held.Term, ttl); !errors.Is(err, store.ErrNotHeld) {
		s.t.Errorf("evicted holder's Renew: err = %v, want ErrNotHeld", err)
	}
	if _, err := fr.ForceRelease(s.ctx(), "job"); !errors.Is(err, store.ErrNotHeld) {
		s.t.Errorf("ForceRelease with no live term: err = %v, want ErrNotHeld", err)
	}
	next := s.acquire(st, "job", "node-b", ttl)
	if next.Token <= held.Token {
		s.t.Errorf("token after a forced release = %d, want > %d", next.Token, held.Token)
	}
}
