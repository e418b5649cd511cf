// Package v3adapter is etcdapi.Client over a *clientv3.Client: the etcd
// store on a client of the caller's own (package etcdv3client), and in the
// store's tests the same suite on clientv3 as on the store's own client.
package v3adapter

import (
	"context"
	"errors"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/leasehold/leasehold/store/etcd/internal/etcdapi"
)

// New returns cli as an etcdapi.Client; its Close closes cli if own.
func New(cli *clientv3.Client, own bool) etcdapi.Client {
	return &adapter{cli: cli, own: own}
}

// adapter is etcdapi.Client over clientv3.
type adapter struct {
	cli *clientv3.Client
	own bool
}

// ctx carries the store's require-leader mark over to clientv3's.
func (a *adapter) ctx(ctx context.Context) context.Context {
	if etcdapi.RequireLeader(ctx) {
		return clientv3.WithRequireLeader(ctx)
	}
	return ctx
}

// convert makes a gRPC status error (or clientv3's rpctypes error) an
// etcdapi.Error with its code and etcd's message, wrapping it, so that the
// store's errors.Is checks (etcdapi.ErrLeaseNotFound, ...) hold on both
// clients. Context errors stay as they are.
func convert(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		return &etcdapi.Error{Code: etcdapi.Code(ee.Code()), Message: ee.Error(), Err: err}
	}
	if st, ok := status.FromError(err); ok {
		return &etcdapi.Error{Code: etcdapi.Code(st.Code()), Message: st.Message(), Err: err}
	}
	return err
}

func toOp(o etcdapi.Op) clientv3.Op {
	switch o.Kind {
	case etcdapi.OpPut:
		if o.Lease != etcdapi.NoLease {
			return clientv3.OpPut(o.Key, o.Value, clientv3.WithLease(clientv3.LeaseID(o.Lease)))
		}
		return clientv3.OpPut(o.Key, o.Value)
	case etcdapi.OpDelete:
		var opts []clientv3.OpOption
		if o.End != "" {
			opts = append(opts, clientv3.WithRange(o.End))
		}
		if o.PrevKV {
			opts = append(opts, clientv3.WithPrevKV())
		}
		return clientv3.OpDelete(o.Key, opts...)
	}
	var opts []clientv3.OpOption
	if o.End != "" {
		opts = append(opts, clientv3.WithRange(o.End))
	}
	if o.SortByCreate {
		opts = append(opts, clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	}
	if o.KeysOnly {
		opts = append(opts, clientv3.WithKeysOnly())
	}
	if o.CountOnly {
		opts = append(opts, clientv3.WithCountOnly())
	}
	if o.MinCreate != 0 {
		opts = append(opts, clientv3.WithMinCreateRev(o.MinCreate))
	}
	if o.MaxCreate != 0 {
		opts = append(opts, clientv3.WithMaxCreateRev(o.MaxCreate))
	}
	return clientv3.OpGet(o.Key, opts...)
}

// relations are clientv3's spellings of etcdapi's relations.
var relations = map[etcdapi.Relation]string{etcdapi.Equal: "=", etcdapi.Greater: ">", etcdapi.Less: "<", etcdapi.NotEqual: "!="}

func toCmp(c etcdapi.Cmp) clientv3.Cmp {
	var cmp clientv3.Cmp
	rel := relations[c.Relation]
	switch c.Target {
	case etcdapi.TargetVersion:
		cmp = clientv3.Compare(clientv3.Version(c.Key), rel, c.Int)
	case etcdapi.TargetCreate:
		cmp = clientv3.Compare(clientv3.CreateRevision(c.Key), rel, c.Int)
	case etcdapi.TargetMod:
		cmp = clientv3.Compare(clientv3.ModRevision(c.Key), rel, c.Int)
	case etcdapi.TargetValue:
		cmp = clientv3.Compare(clientv3.Value(c.Key), rel, c.Value)
	case etcdapi.TargetLease:
		cmp = clientv3.Compare(clientv3.LeaseValue(c.Key), rel, clientv3.LeaseID(c.Int))
	}
	if c.RangeEnd != "" {
		cmp = cmp.WithRange(c.RangeEnd)
	}
	return cmp
}

func fromKVs(kvs []*mvccpb.KeyValue) []etcdapi.KeyValue {
	if len(kvs) == 0 {
		return nil
	}
	out := make([]etcdapi.KeyValue, len(kvs))
	for i, kv := range kvs {
		out[i] = etcdapi.KeyValue{Key: kv.Key, Value: kv.Value, CreateRevision: kv.CreateRevision,
			ModRevision: kv.ModRevision, Version: kv.Version, Lease: kv.Lease}
	}
	return out
}

func (a *adapter) Txn(ctx context.Context, cmps []etcdapi.Cmp, then, els []etcdapi.Op) (*etcdapi.TxnResponse, error) {
	cs := make([]clientv3.Cmp, len(cmps))
	for i, c := range cmps {
		cs[i] = toCmp(c)
	}
	ops := func(in []etcdapi.Op) []clientv3.Op {
		out := make([]clientv3.Op, len(in))
		for i, o := range in {
			out[i] = toOp(o)
		}
		return out
	}
	resp, err := a.cli.Txn(a.ctx(ctx)).If(cs...).Then(ops(then)...).Else(ops(els)...).Commit()
	if err != nil {
		return nil, convert(err)
	}
	out := &etcdapi.TxnResponse{Revision: resp.Header.Revision, Succeeded: resp.Succeeded}
	for _, r := range resp.Responses {
		var or etcdapi.OpResponse
		if rr := r.GetResponseRange(); rr != nil {
			or.Kvs, or.Count = fromKVs(rr.Kvs), rr.Count
		}
		if dr := r.GetResponseDeleteRange(); dr != nil {
			or.PrevKvs = fromKVs(dr.PrevKvs)
		}
		out.Responses = append(out.Responses, or)
	}
	return out, nil
}

func (a *adapter) Range(ctx context.Context, op etcdapi.Op) (*etcdapi.OpResponse, error) {
	op.Kind = etcdapi.OpRange
	resp, err := a.cli.Do(a.ctx(ctx), toOp(op))
	if err != nil {
		return nil, convert(err)
	}
	g := resp.Get()
	return &etcdapi.OpResponse{Kvs: fromKVs(g.Kvs), Count: g.Count}, nil
}

func (a *adapter) Grant(ctx context.Context, ttl int64) (etcdapi.LeaseID, int64, error) {
	g, err := a.cli.Grant(a.ctx(ctx), ttl)
	if err != nil {
		return 0, 0, convert(err)
	}
	return etcdapi.LeaseID(g.ID), g.TTL, nil
}

func (a *adapter) Revoke(ctx context.Context, id etcdapi.LeaseID) error {
	_, err := a.cli.Revoke(a.ctx(ctx), clientv3.LeaseID(id))
	return convert(err)
}

func (a *adapter) TimeToLive(ctx context.Context, id etcdapi.LeaseID) (int64, int64, error) {
	r, err := a.cli.TimeToLive(a.ctx(ctx), clientv3.LeaseID(id))
	if err != nil {
		return 0, 0, convert(err)
	}
	return r.TTL, r.GrantedTTL, nil
}

// KeepAlive opens a raw LeaseKeepAlive stream on the client's connection:
// clientv3's own KeepAlive hides which requests were answered, which the
// store must know (see the store's keepAlive).
func (a *adapter) KeepAlive(ctx context.Context) (etcdapi.KeepAliveStream, error) {
	lc := pb.NewLeaseClient(a.cli.ActiveConnection())
	s, err := lc.LeaseKeepAlive(a.ctx(ctx), grpc.WaitForReady(true))
	if err != nil {
		return nil, convert(err)
	}
	return kaStream{s}, nil
}

// KeepAliveOnce sends one request on a raw stream of its own (clientv3's
// KeepAliveOnce retries out of sight).
func (a *adapter) KeepAliveOnce(ctx context.Context, id etcdapi.LeaseID) (int64, error) {
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	lc := pb.NewLeaseClient(a.cli.ActiveConnection())
	s, err := lc.LeaseKeepAlive(a.ctx(cctx), grpc.WaitForReady(true))
	if err != nil {
		return 0, errors.Join(etcdapi.ErrNotSent, convert(err))
	}
	if err := s.Send(&pb.LeaseKeepAliveRequest{ID: int64(id)}); err != nil {
		return 0, convert(err)
	}
	r, err := s.Recv()
	if err != nil {
		return 0, convert(err)
	}
	s.CloseSend() //nolint:errcheck // the answer is in
	return r.TTL, nil
}

type kaStream struct{ s pb.Lease_LeaseKeepAliveClient }

func (k kaStream) Send(id etcdapi.LeaseID) error {
	return convert(k.s.Send(&pb.LeaseKeepAliveRequest{ID: int64(id)}))
}

func (k kaStream) Recv() (etcdapi.LeaseID, int64, error) {
	r, err := k.s.Recv()
	if err != nil {
		return 0, 0, convert(err)
	}
	return etcdapi.LeaseID(r.ID), r.TTL, nil
}

func (k kaStream) CloseSend() error { return k.s.CloseSend() }

// Watch watches from the revision after the server's current one; if the
// client switches members, clientv3 resumes the watch from the revision after
// the last one seen (from the created answer's revision before any event), so
// no change after from is missed.
func (a *adapter) Watch(ctx context.Context, prefix string) (<-chan etcdapi.WatchEvent, int64, error) {
	wch := a.cli.Watch(a.ctx(ctx), prefix, clientv3.WithPrefix(), clientv3.WithCreatedNotify())
	wr, ok := <-wch
	if !ok || wr.Err() != nil || !wr.Created {
		if ok && wr.Err() != nil {
			return nil, 0, convert(wr.Err())
		}
		if ctx.Err() != nil {
			return nil, 0, ctx.Err()
		}
		return nil, 0, errors.New("watch closed before it was created")
	}
	out := make(chan etcdapi.WatchEvent, 16)
	go func() {
		defer close(out)
		for wr := range wch {
			ev := etcdapi.WatchEvent{Canceled: wr.Canceled, Err: convert(wr.Err())}
			for _, e := range wr.Events {
				ev.Events = append(ev.Events, etcdapi.Event{Key: e.Kv.Key, Delete: e.Type == mvccpb.DELETE, Revision: e.Kv.ModRevision})
			}
			select {
			case out <- ev:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, wr.Header.Revision, nil
}

// Close closes the client if it is the adapter's own.
func (a *adapter) Close() error {
	if a.own {
		return a.cli.Close()
	}
	return nil
}

// Client returns the clientv3 client under c, if c is an adapter.
func Client(c etcdapi.Client) (*clientv3.Client, bool) {
	a, ok := c.(*adapter)
	if !ok {
		return nil, false
	}
	return a.cli, true
}
