package etcd

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/etcd/internal/etcdapi"
)

// Renew implements store.Store. It sends a keep-alive for exactly the term's
// etcd lease and then checks, with a linearizable read, that the term's key
// still exists with the term's token and holder: only then has the keep-alive
// extended the live term. etcd cannot change a lease's TTL; a renewal that
// asks for a longer TTL than the lease has moves the key to a new lease with
// that TTL (keeping its create revision, so the token), and a renewal that
// asks for a shorter one keeps the longer lease. The keep-alive is sent only
// for a lease this handle granted and whose table entry says it carries the
// term; a term whose key is on any other lease is renewed by moving the key
// to a new lease of this handle (see "Reusing etcd leases" and adopt).
func (s *Store) Renew(ctx context.Context, t store.Term, ttl time.Duration) (store.Record, error) {
	if err := s.life.Check(ctx); err != nil {
		return store.Record{}, err
	}
	if err := kit.CheckRenew(t, ttl); err != nil {
		return store.Record{}, err
	}
	secs, err := ttlSeconds(ttl)
	if err != nil {
		return store.Record{}, fmt.Errorf("leasehold/etcd: renew %s: %w", t, err)
	}
	rec, err := s.renew(ctx, t, secs)
	if err != nil {
		if errors.Is(err, store.ErrNotHeld) {
			s.forget(t)
		}
		return store.Record{}, fmt.Errorf("leasehold/etcd: renew %s: %w", t, err)
	}
	return rec, nil
}

func (s *Store) renew(ctx context.Context, t store.Term, secs int64) (store.Record, error) {
	ti, err := s.lookup(ctx, t)
	if err != nil {
		return store.Record{}, err
	}
	for attempt := 0; attempt < 4; attempt++ {
		sent := time.Now()
		ttl, ours, err := s.keepAliveFor(rctx(ctx), ti.lease, t)
		if !ours {
			// Nothing was sent: this handle does not keep ti.lease alive for
			// t (another handle granted it, or it went back to the pool when t
			// was released here). Find where t's key is now.
			lease, ok, err := s.current(ctx, t, ti.key)
			if err != nil {
				return store.Record{}, err
			}
			if !ok {
				return store.Record{}, store.ErrNotHeld
			}
			if lease != ti.lease && s.carries(lease, t) {
				ti.lease = lease // on a lease of ours meanwhile: keep that alive
				continue
			}
			ti.lease = lease
			rec, err := s.adopt(ctx, t, ti, secs)
			if errors.Is(err, errMoved) {
				continue
			}
			return rec, err
		}
		switch {
		case errors.Is(err, etcdapi.ErrLeaseNotFound):
			// The lease is gone. If the key moved to another lease (a renewal
			// with a longer TTL, or through another handle), follow it.
			lease, ok, cerr := s.current(ctx, t, ti.key)
			if cerr != nil {
				return store.Record{}, cerr
			}
			if !ok || lease == ti.lease {
				s.endedTerm(ti.lease, t)
				return store.Record{}, store.ErrNotHeld
			}
			ti.lease = lease
			continue
		case err != nil:
			return store.Record{}, err
		}
		lease, ok, err := s.current(ctx, t, ti.key)
		if err != nil {
			return store.Record{}, err
		}
		if !ok {
			s.endedTerm(ti.lease, t)
			return store.Record{}, store.ErrNotHeld
		}
		if lease != ti.lease {
			ti.lease = lease // moved to another lease meanwhile: renew that one
			continue
		}
		s.remember(t, ti)
		if ttl < secs {
			return s.extend(ctx, t, ti, secs)
		}
		granted := time.Duration(ttl) * time.Second
		return store.Record{Term: t, Remaining: granted - time.Since(sent), TTL: granted, Metadata: ti.metadata}, nil
	}
	return store.Record{}, fmt.Errorf("the term's key kept moving between etcd leases")
}

// errMoved: adopt found that the term's key had left the lease it read.
var errMoved = errors.New("the term's key moved to another lease")

// extend moves term t's key (just kept alive, so live) to a new etcd lease of
// secs seconds, keeping the key and so its create revision, and revokes the
// old lease.
func (s *Store) extend(ctx context.Context, t store.Term, ti termInfo, secs int64) (store.Record, error) {
	g, sent, aliveUntil, moved, err := s.moveKey(ctx, t, ti, secs)
	if err != nil {
		return store.Record{}, err
	}
	if !moved {
		return store.Record{}, store.ErrNotHeld
	}
	s.bindLease(g.id, t, aliveUntil, false)
	s.revokeLease(ti.lease)
	ti.lease = g.id
	s.remember(t, ti)
	granted := time.Duration(g.ttl) * time.Second
	return store.Record{Term: t, Remaining: granted - time.Since(sent), TTL: granted, Metadata: ti.metadata}, nil
}

// moveKey grants a new etcd lease of secs seconds and moves term t's key onto
// it, in a transaction that applies only while the key is still t's (create
// revision, holder) and still on ti.lease; the key, and so its create
// revision and the token, are kept. It returns the grant, when its request
// was sent, how long the new lease surely lives, and whether the move
// applied. If it did not (or failed), the new lease is revoked.
func (s *Store) moveKey(ctx context.Context, t store.Term, ti termInfo, secs int64) (grant, time.Time, time.Time, bool, error) {
	sent := time.Now()
	var g grant
	var err error
	g.id, g.ttl, err = s.cli.Grant(rctx(ctx), secs)
	if err != nil {
		return g, sent, time.Time{}, false, fmt.Errorf("grant a lease: %w", err)
	}
	aliveUntil := sent.Add(time.Duration(g.ttl) * time.Second)
	s.trackLease(g.id, secs, aliveUntil)
	resp, err := s.cli.Txn(rctx(ctx), []etcdapi.Cmp{
		etcdapi.CreateRevisionIs(ti.key, t.Token),
		etcdapi.ValueIs(ti.key, t.Holder),
		etcdapi.LeaseIs(ti.key, ti.lease),
	}, []etcdapi.Op{etcdapi.Put(ti.key, t.Holder, g.id)}, nil)
	if err != nil {
		s.revokeLease(g.id)
		return g, sent, time.Time{}, false, fmt.Errorf("move the key to a new lease: %w", err)
	}
	if !resp.Succeeded {
		s.revokeLease(g.id)
		return g, sent, aliveUntil, false, nil
	}
	return g, sent, aliveUntil, true, nil
}

// adopt renews term t, whose live key is on ti.lease, a lease this handle
// does not keep alive for t, by moving the key onto a new lease of this
// handle's (keeping the key, so its create revision and token) and revoking
// the old one. It never sends a keep-alive for ti.lease: the handle that
// granted it reuses it for its next term once t is released there, and a
// keep-alive from here, sent before that release and applied after it, would
// extend that next term.
//
// The move must not revive a term whose lease has expired but whose key etcd
// has not deleted yet (it revokes expired leases on a 500 ms tick): adopt
// first reads the old lease's time to live, and if the move's answer comes
// back later than that, it revokes the new lease (ending t: the renewal fails
// with ErrNotHeld) rather than trust a move that may have come too late.
// It returns errMoved if the key left ti.lease meanwhile.
func (s *Store) adopt(ctx context.Context, t store.Term, ti termInfo, secs int64) (store.Record, error) {
	sent := time.Now()
	tlTTL, _, err := s.cli.TimeToLive(rctx(ctx), ti.lease)
	if err != nil && !errors.Is(err, etcdapi.ErrLeaseNotFound) {
		return store.Record{}, fmt.Errorf("time to live of lease %x: %w", int64(ti.lease), err)
	}
	if err != nil || tlTTL <= 0 {
		// The lease has ended (or has expired and etcd is about to delete
		// the key). If the key is still on it, the term has ended.
		lease, ok, err := s.current(ctx, t, ti.key)
		if err != nil {
			return store.Record{}, err
		}
		if !ok || lease == ti.lease {
			return store.Record{}, store.ErrNotHeld
		}
		return store.Record{}, errMoved
	}
	// etcd rounds the time left down to whole seconds, and the lease lives at
	// least that long after etcd answered, which was after sent.
	oldAliveUntil := sent.Add(time.Duration(tlTTL) * time.Second)
	g, gsent, aliveUntil, moved, err := s.moveKey(ctx, t, ti, secs)
	if err != nil {
		return store.Record{}, err
	}
	if !moved {
		return store.Record{}, errMoved
	}
	if !time.Now().Before(oldAliveUntil) {
		// The move may have landed after the old lease expired. End the term
		// by revoking the new lease, which deletes the key.
		s.termsMu.Lock()
		s.dropLocked(g.id)
		s.termsMu.Unlock()
		rctx2, cancel := context.WithTimeout(context.WithoutCancel(ctx), revokeTimeout)
		defer cancel()
		if err := s.cli.Revoke(rctx2, g.id); err != nil && !errors.Is(err, etcdapi.ErrLeaseNotFound) {
			s.revokeLater(g.id)
			return store.Record{}, fmt.Errorf("moved the key to a new lease too late to trust, and revoking that lease failed: %w", err)
		}
		return store.Record{}, store.ErrNotHeld
	}
	s.bindLease(g.id, t, aliveUntil, false)
	s.revokeLease(ti.lease)
	ti.lease = g.id
	s.remember(t, ti)
	granted := time.Duration(g.ttl) * time.Second
	return store.Record{Term: t, Remaining: granted - time.Since(gsent), TTL: granted, Metadata: ti.metadata}, nil
}

// grant is an etcd lease just granted and the TTL etcd gave it, in seconds.
type grant struct {
	id  etcdapi.LeaseID
	ttl int64
}
