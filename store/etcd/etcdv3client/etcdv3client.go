// Package etcdv3client runs the etcd store (package store/etcd) on a
// *clientv3.Client of your own (go.etcd.io/etcd/client/v3), and builds the
// store's fencing condition as a clientv3 comparison for your own
// transactions.
//
// The store opened by etcd.Open and etcd.OpenURL (what the leasehold command
// does) uses the store's own small etcd client instead, which links neither
// clientv3 nor gRPC; both run the same store code and pass the same
// conformance suite. Use this package when your program already has a clientv3
// client (its balancing, logging, interceptors or dial options):
//
//	cli, _ := clientv3.New(clientv3.Config{Endpoints: []string{"10.0.0.1:2379"}})
//	st, _ := etcdv3client.New(cli, "locks/")
package etcdv3client

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/etcd"
	"github.com/leasehold/leasehold/store/etcd/internal/v3adapter"
)

// New returns a store that uses cli and keeps its keys under prefix, used
// verbatim (so "locks/" puts name N at "locks/N/"; "" is the root of the
// keyspace, where `etcdctl lock N` contends for N). The store does not close
// cli.
func New(cli *clientv3.Client, prefix string) (*etcd.Store, error) {
	if cli == nil {
		return etcd.NewOnAPI(nil, prefix)
	}
	return etcd.NewOnAPI(v3adapter.New(cli, false), prefix)
}

// Fence returns the comparison that makes an etcd transaction apply only
// while term t holds (etcd.Store.Fence): the term's key still exists with the
// term's create revision. Put it in your own transaction, on the same etcd
// cluster:
//
//	cmp, err := etcdv3client.Fence(ctx, st, lease.Term())
//	resp, err := cli.Txn(ctx).If(cmp).Then(clientv3.OpPut("config", v)).Commit()
//	if err == nil && !resp.Succeeded { /* the term has ended: nothing was written */ }
//
// It returns an error matching store.ErrNotHeld if t is not the live term now.
func Fence(ctx context.Context, st *etcd.Store, t store.Term) (clientv3.Cmp, error) {
	f, err := st.Fence(ctx, t)
	if err != nil {
		return clientv3.Cmp{}, err
	}
	return FenceCmp(f.Key, f.CreateRevision), nil
}

// FenceCmp is the comparison Fence returns, for a caller that already knows
// the term's key (etcd.Store.TermKey): key exists with create revision token.
func FenceCmp(key string, token int64) clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(key), "=", token)
}
