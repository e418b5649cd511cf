package kubernetes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/store"
)

// The graceful hand-over on Kubernetes (see the package leasehold's
// Handover): Transfer writes the successor into the Lease in one update
// conditional on the resourceVersion, as the coordinated leader election's
// controller does when it elects a candidate; PreferredHolder reports the
// Lease's spec.preferredHolder from the version this handle saw last, so a
// leasehold holder honours Kubernetes' coordinated leader election the way
// client-go's coordinated elector does: a preferredHolder that is not the
// holder ends the term (client-go stops renewing; leasehold drains its work,
// then transfers the Lease to the preferred holder, sooner than an expiry).

var (
	_ store.Transferer            = (*Store)(nil)
	_ store.PreferredHolderReader = (*Store)(nil)
)

// Transfer implements store.Transferer: one update, conditional on the
// resourceVersion of a version in which t is the live term, that writes the
// successor as holderIdentity with the next token (above the high-water
// mark, raised first, as Acquire does), a new acquireTime and renewTime and
// ttl. The other fields are kept, except spec.preferredHolder when it names
// the successor: that preference is now met, and client-go's coordinated
// elector would read a preferredHolder left in place as "end of term" and
// not renew.
func (s *Store) Transfer(ctx context.Context, t store.Term, to string, ttl time.Duration, metadata string) (store.Record, error) {
	if err := s.life.Check(ctx); err != nil {
		return store.Record{}, err
	}
	if err := kit.CheckTransfer(t, to, ttl, metadata); err != nil {
		return store.Record{}, err
	}
	o, err := objectFor(t.Name)
	if err != nil {
		return store.Record{}, err
	}
	secs, err := ttlSeconds(ttl)
	if err != nil {
		return store.Record{}, err
	}
	fail := func(err error) (store.Record, error) {
		return store.Record{}, fmt.Errorf("leasehold/kubernetes: transfer %s to %s: %w", t, to, err)
	}
	// The token is raised on the high-water mark before the Lease is
	// written. If the write then finds t not live, the mark stays raised:
	// a gap in the tokens, never a repeat.
	var token int64
	for range maxHighWaterRaces {
		token, err = s.raiseHighWater(ctx, o, max(t.Token, s.maxToken(o.obj))+1)
		if !errors.Is(err, errHighWaterRaced) {
			break
		}
	}
	if err != nil {
		return fail(err)
	}
	err = s.updateLive(ctx, o, t, func(cur *lease, _ view) *lease {
		next := cur.clone()
		now := s.now()
		setSpec(next, to, secs, now, now, token)
		if preferredHolderOf(next) == to {
			// Cannot fail on an object that was read (its raw JSON
			// parsed); encode would refuse it first anyway.
			_ = dropPreferredHolder(next)
		}
		o.setAnnotations(next, token, metadata)
		return next
	})
	if err != nil {
		return fail(err)
	}
	return granted(t.Name, to, token, secs, metadata), nil
}

// PreferredHolder implements store.PreferredHolderReader: the
// spec.preferredHolder of the version of name's Lease this handle saw last
// (read or written), or "". It makes no request.
func (s *Store) PreferredHolder(name string) string {
	o, err := objectFor(name)
	if err != nil {
		return ""
	}
	l, _ := s.cached(o.obj, s.now())
	if l == nil {
		return ""
	}
	return preferredHolderOf(l)
}

// preferredHolderOf reads spec.preferredHolder from the object as read: the
// package's lease type keeps the fields it does not own only there.
func preferredHolderOf(l *lease) string {
	var o struct {
		Spec struct {
			PreferredHolder string `json:"preferredHolder"`
		} `json:"spec"`
	}
	if l.raw == nil || json.Unmarshal(l.raw, &o) != nil {
		return ""
	}
	return o.Spec.PreferredHolder
}

// dropPreferredHolder removes spec.preferredHolder from the object l will
// be written from (a new copy of it: the object as read is not changed).
func dropPreferredHolder(l *lease) error {
	obj := map[string]json.RawMessage{}
	if err := json.Unmarshal(l.raw, &obj); err != nil {
		return err
	}
	spec, err := members(obj["spec"])
	if err != nil {
		return err
	}
	delete(spec, "preferredHolder")
	if obj["spec"], err = json.Marshal(spec); err != nil {
		return err
	}
	raw, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	l.raw = raw
	return nil
}
