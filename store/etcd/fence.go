package etcd

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold/leasehold/store"
)

// Fence returns the comparison that makes an etcd transaction apply only
// while term t holds: the term's key still exists with the term's create
// revision. Put it in your own transaction, on the same etcd cluster:
//
//	cmp, err := st.Fence(ctx, lease.Term())
//	resp, err := cli.Txn(ctx).If(cmp).Then(clientv3.OpPut("config", v)).Commit()
//	if err == nil && !resp.Succeeded { /* the term has ended: nothing was written */ }
//
// The comparison holds until the term is released, expires or is replaced, and
// never again afterwards (create revisions are never reused). Fence itself
// returns an error matching store.ErrNotHeld if t is not the live term now.
func (s *Store) Fence(ctx context.Context, t store.Term) (clientv3.Cmp, error) {
	if err := s.life.Check(ctx); err != nil {
		return clientv3.Cmp{}, err
	}
	if err := kit.CheckTerm("fence", t); err != nil {
		return clientv3.Cmp{}, err
	}
	ti, err := s.lookup(ctx, t)
	if err != nil {
		return clientv3.Cmp{}, fmt.Errorf("leasehold/etcd: fence %s: %w", t, err)
	}
	if _, ok, err := s.current(ctx, t, ti.key); err != nil {
		return clientv3.Cmp{}, fmt.Errorf("leasehold/etcd: fence %s: %w", t, err)
	} else if !ok {
		s.forget(t)
		return clientv3.Cmp{}, fmt.Errorf("leasehold/etcd: fence %s: %w", t, store.ErrNotHeld)
	}
	return FenceCmp(ti.key, t.Token), nil
}

// FenceCmp is the comparison Fence returns, for a caller that already knows
// the term's key (Store.TermKey): key exists with create revision token.
func FenceCmp(key string, token int64) clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(key), "=", token)
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
