// Package fencegrpc fences gRPC calls with a fence.Guard: a server
// interceptor pair that refuses a stale fencing token, and a client
// interceptor pair that sends one. It is a separate package so that users of
// package fence do not link gRPC.
//
// The term travels in the request metadata:
//
//	leasehold-fencing-token: 42
//	leasehold-holder: node-a-4f2c9e1b
//	leasehold-lease: billing-sweeper
//
// The token and the holder together identify the term: a call with the
// highest token admitted but another holder is refused like a lower token
// (one token value granted to two terms, after a lease store lost data).
// A stale term is refused with codes.Aborted (gRPC's code for a failed
// sequencer check) and an errdetails.ErrorInfo {Reason: "STALE_FENCING_TOKEN",
// Domain: "leasehold", Metadata: resource, token, holder, highest}; the client
// interceptors turn it back into an error matching fence.ErrStale (and
// fence.ErrTokenReused when token equals highest). A missing token or holder
// is codes.FailedPrecondition, a malformed one codes.InvalidArgument, a
// Guard that cannot record the token codes.Unavailable. The guarantees are
// those of fence.Guard.Do: calls of one resource run one at a time (a fenced
// stream holds its resource until it ends), and only calls through the Guard
// are fenced.
package fencegrpc

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/leasehold/leasehold/fence"
)

// The metadata keys (gRPC metadata keys are lower case).
const (
	MetadataToken  = "leasehold-fencing-token"
	MetadataHolder = "leasehold-holder"
	MetadataLease  = "leasehold-lease"
)

// ReasonStale is the ErrorInfo reason of a refused stale token.
const ReasonStale = "STALE_FENCING_TOKEN"

// ServerConfig configures the server interceptors.
type ServerConfig struct {
	// Resource maps a call to the resource it writes. Nil means the
	// leasehold-lease metadata (then required).
	Resource func(ctx context.Context, fullMethod string) (string, error)
	// Skip, if set, lets calls for which it returns true pass unfenced (read
	// methods, health checks).
	Skip func(fullMethod string) bool
}

// UnaryServerInterceptor fences unary calls with g.
func UnaryServerInterceptor(g *fence.Guard, cfg ServerConfig) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if cfg.Skip != nil && cfg.Skip(info.FullMethod) {
			return handler(ctx, req)
		}
		resource, holder, token, err := callTerm(ctx, info.FullMethod, cfg)
		if err != nil {
			return nil, err
		}
		var resp any
		var herr error
		ran := false
		err = g.Do(ctx, resource, holder, token, func(ctx context.Context) error {
			ran = true
			resp, herr = handler(ctx, req)
			return nil
		})
		if ran {
			return resp, herr
		}
		return nil, refusal(err, resource, token)
	}
}

// StreamServerInterceptor fences streams with g; a stream holds its resource
// until its handler returns.
func StreamServerInterceptor(g *fence.Guard, cfg ServerConfig) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if cfg.Skip != nil && cfg.Skip(info.FullMethod) {
			return handler(srv, ss)
		}
		ctx := ss.Context()
		resource, holder, token, err := callTerm(ctx, info.FullMethod, cfg)
		if err != nil {
			return err
		}
		var herr error
		ran := false
		err = g.Do(ctx, resource, holder, token, func(context.Context) error {
			ran = true
			herr = handler(srv, ss)
			return nil
		})
		if ran {
			return herr
		}
		return refusal(err, resource, token)
	}
}

func callTerm(ctx context.Context, method string, cfg ServerConfig) (resource, holder string, token int64, err error) {
	md, _ := metadata.FromIncomingContext(ctx)
	if cfg.Resource != nil {
		r, err := cfg.Resource(ctx, method)
		if err != nil {
			return "", "", 0, status.Errorf(codes.InvalidArgument, "leasehold/fencegrpc: resource of %s: %v", method, err)
		}
		resource = r
	} else {
		v := md.Get(MetadataLease)
		if len(v) != 1 {
			return "", "", 0, status.Errorf(codes.InvalidArgument, "leasehold/fencegrpc: want exactly one %s metadata value, got %d", MetadataLease, len(v))
		}
		resource = v[0]
	}
	if err := fence.ValidateResource(resource); err != nil {
		return "", "", 0, status.Error(codes.InvalidArgument, err.Error())
	}
	v := md.Get(MetadataToken)
	if len(v) == 0 {
		return "", "", 0, status.Errorf(codes.FailedPrecondition, "leasehold/fencegrpc: missing %s metadata: %s accepts only fenced calls", MetadataToken, method)
	}
	if token, err = fence.ParseToken(v); err != nil {
		return "", "", 0, status.Error(codes.InvalidArgument, err.Error())
	}
	v = md.Get(MetadataHolder)
	if len(v) == 0 {
		return "", "", 0, status.Errorf(codes.FailedPrecondition, "leasehold/fencegrpc: missing %s metadata: the fence tells terms apart by token and holder", MetadataHolder)
	}
	if len(v) != 1 {
		return "", "", 0, status.Errorf(codes.InvalidArgument, "leasehold/fencegrpc: want exactly one %s metadata value, got %d", MetadataHolder, len(v))
	}
	if err := fence.ValidateHolder(v[0]); err != nil {
		return "", "", 0, status.Errorf(codes.InvalidArgument, "leasehold/fencegrpc: malformed %s metadata: %v", MetadataHolder, err)
	}
	return resource, v[0], token, nil
}

func refusal(err error, resource string, token int64) error {
	var se *fence.StaleError
	switch {
	case errors.As(err, &se):
		// The holder of the highest term is not the caller's business: it
		// stays out of the answer, as in the HTTP middleware's.
		wire := *se
		wire.HighestHolder = ""
		st := status.New(codes.Aborted, wire.Error())
		if d, derr := st.WithDetails(&errdetails.ErrorInfo{
			Reason: ReasonStale,
			Domain: "leasehold",
			Metadata: map[string]string{
				"resource": se.Resource,
				"token":    strconv.FormatInt(se.Token, 10),
				"holder":   se.Holder,
				"highest":  strconv.FormatInt(se.Highest, 10),
			},
		}); derr == nil {
			st = d
		}
		return st.Err()
	case errors.Is(err, fence.ErrInvalid):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return status.FromContextError(err).Err()
	default:
		return status.Errorf(codes.Unavailable, "leasehold/fencegrpc: fence of %q unavailable for token %d: %v", resource, token, err)
	}
}

// StaleFromError returns the *fence.StaleError carried by a gRPC error from
// a fenced server, if it is one.
func StaleFromError(err error) (*fence.StaleError, bool) {
	var se *fence.StaleError
	if errors.As(err, &se) {
		return se, true
	}
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.Aborted {
		return nil, false
	}
	for _, d := range st.Details() {
		info, ok := d.(*errdetails.ErrorInfo)
		if !ok || info.Reason != ReasonStale || info.Domain != "leasehold" {
			continue
		}
		tok, err1 := strconv.ParseInt(info.Metadata["token"], 10, 64)
		hi, err2 := strconv.ParseInt(info.Metadata["highest"], 10, 64)
		if err1 != nil || err2 != nil {
			return nil, false
		}
		return &fence.StaleError{Resource: info.Metadata["resource"], Token: tok, Highest: hi, Holder: info.Metadata["holder"]}, true
	}
	return nil, false
}

// staleStatusError is a refusal as the client sees it: it matches
// fence.ErrStale and *fence.StaleError, and still carries the gRPC status.
type staleStatusError struct {
	stale *fence.StaleError
	st    error
}

func (e *staleStatusError) Error() string              { return e.st.Error() }
func (e *staleStatusError) Unwrap() []error            { return []error{e.stale, e.st} }
func (e *staleStatusError) GRPCStatus() *status.Status { s, _ := status.FromError(e.st); return s }

func clientErr(err error) error {
	if err == nil {
		return nil
	}
	if se, ok := StaleFromError(err); ok {
		return &staleStatusError{stale: se, st: err}
	}
	return err
}

func outgoing(ctx context.Context, lease string, src fence.TermSource) (context.Context, error) {
	if src == nil {
		return nil, fmt.Errorf("%w: fencegrpc client interceptor has no term source", fence.ErrInvalid)
	}
	term := src.Term()
	err := fence.ValidateToken(term.Token)
	if err == nil {
		err = fence.ValidateHolder(term.Holder)
	}
	if err != nil {
		return nil, fmt.Errorf("leasehold/fencegrpc: not calling: %w", err)
	}
	kv := []string{MetadataToken, strconv.FormatInt(term.Token, 10), MetadataHolder, term.Holder}
	if lease != "" {
		kv = append(kv, MetadataLease, lease)
	}
	return metadata.AppendToOutgoingContext(ctx, kv...), nil
}

// UnaryClientInterceptor sends src's term (token and holder; and lease, if
// not empty) with every unary call, and turns a stale refusal into an error
// matching fence.ErrStale (and still carrying the gRPC status). A token below
// 1 or an empty or malformed holder is not sent: the call fails with
// fence.ErrInvalid.
func UnaryClientInterceptor(lease string, src fence.TermSource) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		ctx, err := outgoing(ctx, lease, src)
		if err != nil {
			return err
		}
		return clientErr(invoker(ctx, method, req, reply, cc, opts...))
	}
}

// StreamClientInterceptor sends src's term (and lease) when a stream opens.
func StreamClientInterceptor(lease string, src fence.TermSource) grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		ctx, err := outgoing(ctx, lease, src)
		if err != nil {
			return nil, err
		}
		s, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil {
			return nil, clientErr(err)
		}
		return clientStream{s}, nil
	}
}

// clientStream turns a stale refusal, which reaches a stream's client at its
// first receive, into an error matching fence.ErrStale.
type clientStream struct{ grpc.ClientStream }

func (s clientStream) RecvMsg(m any) error { return clientErr(s.ClientStream.RecvMsg(m)) }
