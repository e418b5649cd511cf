// Package etcdapi is the part of etcd's v3 API the etcd store uses, as an
// interface with two implementations: etcdwire, the store's own small gRPC
// client (what the leasehold command links), and etcdv3client's adapter over
// clientv3 (for library users who hand the store their own client). The store
// is written against this package only, so the command links neither
// go.etcd.io/etcd/client/v3 nor google.golang.org/grpc.
package etcdapi

import (
	"context"
	"errors"
	"strings"
)

// LeaseID is an etcd lease ID; NoLease is none.
type LeaseID int64

// NoLease is the zero lease: a key without a lease.
const NoLease LeaseID = 0

// KeyValue is an etcd key-value (mvccpb.KeyValue).
type KeyValue struct {
	Key, Value     []byte
	CreateRevision int64
	ModRevision    int64
	Version        int64
	Lease          int64
}

// Target is what a comparison looks at (Compare.CompareTarget).
type Target int

// The comparison targets, numbered as in etcd's protocol.
const (
	TargetVersion Target = 0
	TargetCreate  Target = 1
	TargetMod     Target = 2
	TargetValue   Target = 3
	TargetLease   Target = 4
)

// Relation is a comparison's result (Compare.CompareResult).
type Relation int

// The relations, numbered as in etcd's protocol.
const (
	Equal    Relation = 0
	Greater  Relation = 1
	Less     Relation = 2
	NotEqual Relation = 3
)

// Cmp is a transaction's comparison: the key's (or, with RangeEnd, every key
// in [Key, RangeEnd)'s) Target stands in Relation (Equal unless set) to Int,
// or to Value for TargetValue. etcd compares an empty range as one key whose
// revisions, version and lease are 0.
type Cmp struct {
	_ [0]func() // not comparable: spares the binary equality functions of Cmp and its arrays

	Key, RangeEnd string
	Target        Target
	Relation      Relation
	Int           int64
	Value         string
}

// CreateRevisionIs is the comparison key's create revision = rev (0: the key
// does not exist).
func CreateRevisionIs(key string, rev int64) Cmp {
	return Cmp{Key: key, Target: TargetCreate, Int: rev}
}

// ValueIs is the comparison key's value = v.
func ValueIs(key, v string) Cmp { return Cmp{Key: key, Target: TargetValue, Value: v} }

// LeaseIs is the comparison key's lease = id.
func LeaseIs(key string, id LeaseID) Cmp { return Cmp{Key: key, Target: TargetLease, Int: int64(id)} }

// ModRevisionBelow is the comparison key's mod revision < rev (a missing key
// has mod revision 0).
func ModRevisionBelow(key string, rev int64) Cmp {
	return Cmp{Key: key, Target: TargetMod, Relation: Less, Int: rev}
}

// NoKeyIn is the comparison no key in [start, end) exists.
func NoKeyIn(start, end string) Cmp {
	return Cmp{Key: start, RangeEnd: end, Target: TargetCreate, Int: 0}
}

// NoneCreatedBefore is the comparison every key in [start, end) has a create
// revision of at least rev. An empty range fails it (etcd compares it as a
// key created at revision 0).
func NoneCreatedBefore(start, end string, rev int64) Cmp {
	return Cmp{Key: start, RangeEnd: end, Target: TargetCreate, Relation: Greater, Int: rev - 1}
}

// OpKind is an operation's kind.
type OpKind int

// The operations a transaction holds.
const (
	OpRange OpKind = iota + 1
	OpPut
	OpDelete
)

// Op is a range read, a put or a delete (RequestOp).
type Op struct {
	_ [0]func() // not comparable: spares the binary equality functions of Op and its arrays

	Kind     OpKind
	Key, End string // End: range end for Range and Delete ("" means the one key)
	Value    string
	Lease    LeaseID
	PrevKV   bool // Delete: return the deleted key-values

	// Range only.
	SortByCreate         bool // ascending by create revision (else by key, ascending)
	KeysOnly, CountOnly  bool
	MinCreate, MaxCreate int64
}

// Get reads one key.
func Get(key string) Op { return Op{Kind: OpRange, Key: key} }

// GetPrefix reads the keys under prefix.
func GetPrefix(prefix string) Op { return Op{Kind: OpRange, Key: prefix, End: PrefixEnd(prefix)} }

// Put writes key on lease (NoLease: none).
func Put(key, value string, lease LeaseID) Op {
	return Op{Kind: OpPut, Key: key, Value: value, Lease: lease}
}

// Delete deletes key.
func Delete(key string, prevKV bool) Op { return Op{Kind: OpDelete, Key: key, PrevKV: prevKV} }

// PrefixEnd is the range end that makes [prefix, end) the keys under prefix
// (etcd's convention: prefix with its last byte below 0xff incremented; "\x00"
// is the end of the keyspace).
func PrefixEnd(prefix string) string {
	b := []byte(prefix)
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] < 0xff {
			b[i]++
			return string(b[:i+1])
		}
	}
	return "\x00"
}

// OpResponse is an operation's result: Kvs and Count for a range, PrevKvs for
// a delete with PrevKV.
type OpResponse struct {
	Kvs     []KeyValue
	Count   int64
	PrevKvs []KeyValue
}

// TxnResponse is a transaction's result; Revision is the header's revision.
type TxnResponse struct {
	Revision  int64
	Succeeded bool
	Responses []OpResponse
}

// KeepAliveStream is an open LeaseKeepAlive stream: requests and answers in
// order. Send and Recv may be called from different goroutines; Send from
// one at a time.
type KeepAliveStream interface {
	Send(id LeaseID) error
	// Recv returns the next answer: the lease and its new TTL in seconds
	// (<= 0: the lease is not found or expired).
	Recv() (LeaseID, int64, error)
	CloseSend() error
}

// WatchEvent is one watch response's gist.
type WatchEvent struct {
	Events   []Event // its changes, in the order of their revisions
	Canceled bool
	Err      error
}

// Event is one change a watch reports.
type Event struct {
	Key      []byte
	Delete   bool  // the key was deleted (else put)
	Revision int64 // the revision of the change (the key's mod revision)
}

// Client is what the store asks of etcd.
type Client interface {
	Txn(ctx context.Context, cmps []Cmp, then, els []Op) (*TxnResponse, error)
	// Range runs op (OpRange) on its own.
	Range(ctx context.Context, op Op) (*OpResponse, error)
	Grant(ctx context.Context, ttl int64) (id LeaseID, grantedTTL int64, err error)
	Revoke(ctx context.Context, id LeaseID) error
	// TimeToLive returns the lease's seconds left (-1 when expired) and its
	// granted TTL; ErrLeaseNotFound when etcd does not know it.
	TimeToLive(ctx context.Context, id LeaseID) (ttl, granted int64, err error)
	// KeepAlive opens a LeaseKeepAlive stream, ended with ctx.
	KeepAlive(ctx context.Context) (KeepAliveStream, error)
	// KeepAliveOnce sends one keep-alive on a stream of its own and returns
	// etcd's answer (the TTL, <= 0 for a lease etcd does not know). An error
	// matches ErrNotSent if the request surely did not leave; any other
	// error leaves open whether etcd got it.
	KeepAliveOnce(ctx context.Context, id LeaseID) (int64, error)
	// Watch watches the keys under prefix from the revision after the
	// server's current one, and returns once the server created the watch.
	// Every change after revision from is reported, in order, with no gap
	// (a change at or before from may be reported too), until the channel
	// closes: when ctx ends or the watch breaks.
	Watch(ctx context.Context, prefix string) (_ <-chan WatchEvent, from int64, _ error)
	Close() error
}

type requireLeaderKey struct{}

// WithRequireLeader marks ctx: the request is refused at once by a member
// without a raft leader (etcd's "hasleader" metadata).
func WithRequireLeader(ctx context.Context) context.Context {
	return context.WithValue(ctx, requireLeaderKey{}, true)
}

// RequireLeader reports whether ctx was marked by WithRequireLeader.
func RequireLeader(ctx context.Context) bool {
	v, _ := ctx.Value(requireLeaderKey{}).(bool)
	return v
}

// Code is a gRPC status code.
type Code int

// The gRPC status codes the store and its clients look at.
const (
	OK                 Code = 0
	Canceled           Code = 1
	Unknown            Code = 2
	InvalidArgument    Code = 3
	DeadlineExceeded   Code = 4
	NotFound           Code = 5
	PermissionDenied   Code = 7
	FailedPrecondition Code = 9
	OutOfRange         Code = 11
	Internal           Code = 13
	Unavailable        Code = 14
	Unauthenticated    Code = 16
)

// Error is an error status from etcd: a gRPC code and etcd's message. Err,
// when set, is the error it was made from (clientv3's), for Unwrap.
type Error struct {
	Code    Code
	Message string
	Err     error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return e.Err.Error()
	}
	return e.Message
}

func (e *Error) Unwrap() error { return e.Err }

// Is matches the sentinels below: the same code and message. (etcd's watch
// stream ends with the message of the error in gRPC's own rendering, "rpc
// error: code = ... desc = MESSAGE".)
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Err == nil && t.Code == e.Code &&
		(t.Message == e.Message || strings.HasSuffix(e.Message, "desc = "+t.Message))
}

// The errors of etcd the store and its tests tell apart (etcd's rpctypes).
var (
	ErrLeaseNotFound    = &Error{Code: NotFound, Message: "etcdserver: requested lease not found"}
	ErrPermissionDenied = &Error{Code: PermissionDenied, Message: "etcdserver: permission denied"}
	ErrAuthFailed       = &Error{Code: InvalidArgument, Message: "etcdserver: authentication failed, invalid user ID or password"}
	ErrUserEmpty        = &Error{Code: InvalidArgument, Message: "etcdserver: user name is empty"}
	ErrInvalidAuthToken = &Error{Code: Unauthenticated, Message: "etcdserver: invalid auth token"}
	ErrCompacted        = &Error{Code: OutOfRange, Message: "etcdserver: mvcc: required revision has been compacted"}
	ErrNoLeader         = &Error{Code: Unavailable, Message: "etcdserver: no leader"}
)

// ErrNotSent is matched by an error of a request that surely never reached
// etcd (no connection could be made).
var ErrNotSent = errors.New("the request was not sent: no connection to etcd")

// CodeOf returns err's status code (Unknown when it has none).
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return Unknown
}

// ErrorFromText is the error of a message etcd sent as text (a watch's
// cancel reason): with the code of the sentinel it ends with, else Unknown.
func ErrorFromText(msg string) error {
	for _, e := range []*Error{ErrLeaseNotFound, ErrPermissionDenied, ErrAuthFailed, ErrUserEmpty, ErrInvalidAuthToken, ErrCompacted, ErrNoLeader} {
		if strings.HasSuffix(msg, e.Message) {
			return &Error{Code: e.Code, Message: msg}
		}
	}
	return &Error{Code: Unknown, Message: msg}
}
