package etcd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/etcd/internal/etcdapi"
)

var _ store.Transferer = (*Store)(nil)

// errQueued: etcd clients (Mutex, Election) wait behind the term, and would
// rank before a successor's new key.
var errQueued = errors.New("etcd clients queue behind the term")

// Transfer implements store.Transferer: one transaction, applied only while
// term t's key exists with t's create revision (the token) and holder, and
// nothing else contends under the name's prefix, deletes t's key, puts the
// successor's key on a new etcd lease of ttl, and writes the name's record.
// The successor's token is that transaction's revision, above t's, as for any
// grant; the new lease is this handle's, and the successor's Acquire replaces
// the reservation with a term of its own (its own key and lease). t's etcd
// lease is revoked.
//
// If etcd clients (an etcd Mutex or Election) queue behind t, a new key would
// rank behind them, so no reservation can be made: Transfer then releases t
// (the queue's first client gets the lock, as on any release) and returns an
// error saying so.
func (s *Store) Transfer(ctx context.Context, t store.Term, to string, ttl time.Duration, metadata string) (store.Record, error) {
	if err := s.life.Check(ctx); err != nil {
		return store.Record{}, err
	}
	if err := kit.CheckTransfer(t, to, ttl, metadata); err != nil {
		return store.Record{}, err
	}
	secs, err := ttlSeconds(ttl)
	if err != nil {
		return store.Record{}, fmt.Errorf("leasehold/etcd: transfer %s: %w", t, err)
	}
	rec, err := s.transfer(ctx, t, to, ttl, secs, metadata)
	switch {
	case errors.Is(err, errQueued):
		if rerr := s.Release(ctx, t); rerr != nil {
			return store.Record{}, fmt.Errorf("leasehold/etcd: transfer %s: %w; releasing instead failed: %w", t, err, rerr)
		}
		return store.Record{}, fmt.Errorf("leasehold/etcd: transfer %s: %w: released instead, the queue's first client gets the lock", t, err)
	case err != nil:
		return store.Record{}, fmt.Errorf("leasehold/etcd: transfer %s: %w", t, err)
	}
	return rec, nil
}

func (s *Store) transfer(ctx context.Context, t store.Term, to string, ttl time.Duration, secs int64, metadata string) (store.Record, error) {
	ti, err := s.lookup(ctx, t)
	if err == nil {
		err = s.waitRecorded(ctx, ti)
	}
	if err != nil {
		return store.Record{}, err
	}
	pfx, rk := s.lockPrefix(t.Name), s.recordKey(t.Name)
	sent := time.Now()
	lease, gttl, err := s.cli.Grant(rctx(ctx), secs)
	if err != nil {
		return store.Record{}, fmt.Errorf("grant lease: %w", err)
	}
	aliveUntil := sent.Add(time.Duration(gttl) * time.Second)
	s.trackLease(lease, secs, aliveUntil)
	granted := false
	defer func() {
		if !granted {
			s.revokeLease(lease) // nothing was written with it, or the outcome is unknown
		}
	}()
	suffix := strconv.FormatInt(int64(lease), 16)
	newKey := pfx + suffix
	rv, _ := json.Marshal(recordValue{Holder: to, Key: suffix, Lease: int64(lease), Metadata: metadata, TTLms: ttl.Milliseconds()})
	own := &ownTerm{key: ti.key, rev: t.Token, lease: ti.lease}
	var nested []string
	for attempt := 0; attempt < 8; attempt++ {
		cmps := []etcdapi.Cmp{
			etcdapi.CreateRevisionIs(ti.key, t.Token),
			etcdapi.ValueIs(ti.key, t.Holder),
			etcdapi.CreateRevisionIs(newKey, 0),
		}
		for _, r := range gaps(pfx, nested, own) {
			cmps = append(cmps, etcdapi.NoKeyIn(r[0], r[1]))
		}
		resp, err := s.cli.Txn(rctx(ctx), cmps, []etcdapi.Op{
			etcdapi.Delete(ti.key, true),
			etcdapi.Put(newKey, to, lease),
			etcdapi.Put(rk, string(rv), etcdapi.NoLease),
		}, []etcdapi.Op{contendersOp(pfx)})
		if err != nil {
			return store.Record{}, err
		}
		if resp.Succeeded {
			granted = true
			term := store.Term{Name: t.Name, Holder: to, Token: resp.Revision}
			s.bindLease(lease, term, aliveUntil, false)
			s.remember(term, termInfo{key: newKey, lease: lease, metadata: metadata})
			s.forget(t)
			// t's key was on the lease its delete names: end that lease (it
			// carries nothing now), and the one this handle had for t.
			if prev := resp.Responses[0].PrevKvs; len(prev) > 0 {
				if p := etcdapi.LeaseID(prev[0].Lease); p != ti.lease {
					s.revokeLease(p)
				}
			}
			s.revokeLease(ti.lease)
			grantedTTL := time.Duration(gttl) * time.Second
			return store.Record{Term: term, Remaining: grantedTTL - time.Since(sent), TTL: grantedTTL, Metadata: metadata}, nil
		}
		contenders, nestedNow := split(pfx, resp.Responses[0].Kvs)
		nested = nestedNow
		live := false
		for _, c := range contenders {
			if string(c.key) == ti.key && c.create == t.Token && string(c.value) == t.Holder {
				live = true
			}
		}
		if !live {
			s.forget(t)
			s.endedTerm(ti.lease, t)
			return store.Record{}, store.ErrNotHeld
		}
		if len(contenders) > 1 {
			return store.Record{}, errQueued
		}
		// Only nested names were in the way: retry around them.
	}
	return store.Record{}, fmt.Errorf("gave up after 8 transactions that conflicted with changes under %q", pfx)
}
