package etcd

import (
	"context"
	"fmt"

	"github.com/leasehold/leasehold/store"
)

// Fencing is the condition that makes an etcd transaction apply only while a
// term holds: the etcd key Key exists with create revision CreateRevision
// (the term's token). As a clientv3 comparison (etcdv3client.Fence builds it):
//
//	clientv3.Compare(clientv3.CreateRevision(f.Key), "=", f.CreateRevision)
//
// It holds until the term is released, expires or is replaced, and never
// again afterwards (create revisions are never reused).
type Fencing struct {
	Key            string
	CreateRevision int64
}

// Fence returns the fencing condition of term t, for your own transactions on
// the same etcd cluster (etcdv3client.Fence returns it as a clientv3.Cmp):
//
//	cmp, err := etcdv3client.Fence(ctx, st, lease.Term())
//	resp, err := cli.Txn(ctx).If(cmp).Then(clientv3.OpPut("config", v)).Commit()
//	if err == nil && !resp.Succeeded { /* the term has ended: nothing was written */ }
//
// Fence returns an error matching store.ErrNotHeld if t is not the live term
// now.
func (s *Store) Fence(ctx context.Context, t store.Term) (Fencing, error) {
	if err := s.life.Check(ctx); err != nil {
		return Fencing{}, err
	}
	if err := kit.CheckTerm("fence", t); err != nil {
		return Fencing{}, err
	}
	ti, err := s.lookup(ctx, t)
	if err != nil {
		return Fencing{}, fmt.Errorf("leasehold/etcd: fence %s: %w", t, err)
	}
	if _, ok, err := s.current(ctx, t, ti.key); err != nil {
		return Fencing{}, fmt.Errorf("leasehold/etcd: fence %s: %w", t, err)
	} else if !ok {
		s.forget(t)
		return Fencing{}, fmt.Errorf("leasehold/etcd: fence %s: %w", t, store.ErrNotHeld)
	}
	return Fencing{Key: ti.key, CreateRevision: t.Token}, nil
}

// TermKey returns the etcd key of term t (the contender key it holds the
// lease with), or an error matching store.ErrNotHeld if t is not the term
// leasehold last granted for its name.
func (s *Store) TermKey(ctx context.Context, t store.Term) (string, error) {
	if err := s.life.Check(ctx); err != nil {
		return "", err
	}
	if err := kit.CheckTerm("term key", t); err != nil {
		return "", err
	}
	ti, err := s.lookup(ctx, t)
	if err != nil {
		return "", fmt.Errorf("leasehold/etcd: term key %s: %w", t, err)
	}
	return ti.key, nil
}
