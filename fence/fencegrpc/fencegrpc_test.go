package fencegrpc_test

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/leasehold/leasehold/fence"
	"github.com/leasehold/leasehold/fence/fencegrpc"
)

// countingHealth is the standard health service, counting the calls that
// reached it.
type countingHealth struct {
	*health.Server
	calls atomic.Int64
}

func (h *countingHealth) Check(ctx context.Context, r *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	h.calls.Add(1)
	return h.Server.Check(ctx, r)
}

func (h *countingHealth) Watch(r *healthpb.HealthCheckRequest, s healthpb.Health_WatchServer) error {
	h.calls.Add(1)
	return h.Server.Watch(r, s)
}

func serve(t *testing.T) (*countingHealth, func(opts ...grpc.DialOption) *grpc.ClientConn) {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	g := fence.NewGuard(nil)
	srv := grpc.NewServer(
		grpc.UnaryInterceptor(fencegrpc.UnaryServerInterceptor(g, fencegrpc.ServerConfig{})),
		grpc.StreamInterceptor(fencegrpc.StreamServerInterceptor(g, fencegrpc.ServerConfig{})),
	)
	h := &countingHealth{Server: health.NewServer()}
	healthpb.RegisterHealthServer(srv, h)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	dial := func(opts ...grpc.DialOption) *grpc.ClientConn {
		opts = append(opts,
			grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
			grpc.WithTransportCredentials(insecure.NewCredentials()))
		cc, err := grpc.NewClient("passthrough:///bufnet", opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		return cc
	}
	return h, dial
}

func client(dial func(...grpc.DialOption) *grpc.ClientConn, lease string, src fence.TermSource) healthpb.HealthClient {
	return healthpb.NewHealthClient(dial(
		grpc.WithUnaryInterceptor(fencegrpc.UnaryClientInterceptor(lease, src)),
		grpc.WithStreamInterceptor(fencegrpc.StreamClientInterceptor(lease, src))))
}

func term(holder string, token int64) fence.TermSource {
	return fence.StaticTerm{Name: "sweeper", Holder: holder, Token: token}
}

func TestUnaryRefusesStaleToken_FailsWithoutCheck(t *testing.T) {
	h, dial := serve(t)
	ctx := context.Background()
	nodeB := client(dial, "sweeper", term("node-b", 2))
	nodeA := client(dial, "sweeper", term("node-a", 1))
	if _, err := nodeB.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("node-b token 2: %v", err)
	}
	_, err := nodeA.Check(ctx, &healthpb.HealthCheckRequest{})
	var se *fence.StaleError
	if !errors.Is(err, fence.ErrStale) || !errors.As(err, &se) || se.Highest != 2 || se.Token != 1 || se.Resource != "sweeper" {
		t.Fatalf("node-a token 1 after 2: %v, want StaleError{sweeper 1 2}", err)
	}
	if status.Code(err) != codes.Aborted {
		t.Fatalf("code %v, want Aborted", status.Code(err))
	}
	if n := h.calls.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
	// Without the client interceptor the details still say it.
	raw := healthpb.NewHealthClient(dial())
	md := metadata.Pairs(fencegrpc.MetadataToken, "1", fencegrpc.MetadataHolder, "node-a", fencegrpc.MetadataLease, "sweeper")
	_, err = raw.Check(metadata.NewOutgoingContext(ctx, md), &healthpb.HealthCheckRequest{})
	if se, ok := fencegrpc.StaleFromError(err); !ok || se.Highest != 2 || se.Holder != "node-a" {
		t.Fatalf("StaleFromError(%v) = %v, %v", err, se, ok)
	}
}

func TestBadCalls(t *testing.T) {
	h, dial := serve(t)
	ctx := context.Background()
	raw := healthpb.NewHealthClient(dial())
	for _, tc := range []struct {
		name string
		md   metadata.MD
		want codes.Code
	}{
		{"no token", metadata.Pairs(fencegrpc.MetadataLease, "r", fencegrpc.MetadataHolder, "h"), codes.FailedPrecondition},
		{"no lease", metadata.Pairs(fencegrpc.MetadataToken, "1", fencegrpc.MetadataHolder, "h"), codes.InvalidArgument},
		{"malformed", metadata.Pairs(fencegrpc.MetadataLease, "r", fencegrpc.MetadataToken, "x", fencegrpc.MetadataHolder, "h"), codes.InvalidArgument},
		{"zero", metadata.Pairs(fencegrpc.MetadataLease, "r", fencegrpc.MetadataToken, "0", fencegrpc.MetadataHolder, "h"), codes.InvalidArgument},
		{"no holder", metadata.Pairs(fencegrpc.MetadataLease, "r", fencegrpc.MetadataToken, "1"), codes.FailedPrecondition},
		{"empty holder", metadata.Pairs(fencegrpc.MetadataLease, "r", fencegrpc.MetadataToken, "1", fencegrpc.MetadataHolder, ""), codes.InvalidArgument},
		{"holder with space", metadata.Pairs(fencegrpc.MetadataLease, "r", fencegrpc.MetadataToken, "1", fencegrpc.MetadataHolder, "a b"), codes.InvalidArgument},
		{"two holders", metadata.Pairs(fencegrpc.MetadataLease, "r", fencegrpc.MetadataToken, "1", fencegrpc.MetadataHolder, "a", fencegrpc.MetadataHolder, "b"), codes.InvalidArgument},
	} {
		_, err := raw.Check(metadata.NewOutgoingContext(ctx, tc.md), &healthpb.HealthCheckRequest{})
		if status.Code(err) != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	if n := h.calls.Load(); n != 0 {
		t.Fatalf("handler ran %d times", n)
	}
	// A client with no term yet sends nothing.
	c := client(dial, "r", term("h", 0))
	if _, err := c.Check(ctx, &healthpb.HealthCheckRequest{}); !errors.Is(err, fence.ErrInvalid) {
		t.Fatalf("token 0: %v", err)
	}
	c = client(dial, "r", term("", 1))
	if _, err := c.Check(ctx, &healthpb.HealthCheckRequest{}); !errors.Is(err, fence.ErrInvalid) {
		t.Fatalf("empty holder: %v", err)
	}
}

func TestStreamRefusesStaleToken_FailsWithoutCheck(t *testing.T) {
	_, dial := serve(t)
	ctx := context.Background()
	bctx, cancel := context.WithCancel(ctx)
	nodeB := client(dial, "watch", term("node-b", 2))
	s, err := nodeB.Watch(bctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recv(); err != nil { // admitted: the first status arrives
		t.Fatalf("node-b stream: %v", err)
	}
	cancel() // node-b's stream ends and frees the resource
	nodeA := client(dial, "watch", term("node-a", 1))
	s, err = nodeA.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Recv()
	if !errors.Is(err, fence.ErrStale) || status.Code(err) != codes.Aborted {
		t.Fatalf("node-a stream token 1 after 2: %v", err)
	}
}

// After a lease store loses data, node-a and node-b can both be granted
// token 3. The server admits node-a's term and refuses node-b's (Aborted,
// matching fence.ErrTokenReused on the client), unary and streaming; node-a
// writes again, and token 4 from node-b is admitted.
func TestUnaryAndStreamRefuseEqualTokenOtherHolder(t *testing.T) {
	h, dial := serve(t)
	ctx := context.Background()
	a3, b3 := client(dial, "sweeper", term("node-a", 3)), client(dial, "sweeper", term("node-b", 3))
	if _, err := a3.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("node-a token 3: %v", err)
	}
	_, err := b3.Check(ctx, &healthpb.HealthCheckRequest{})
	var se *fence.StaleError
	if !errors.Is(err, fence.ErrTokenReused) || !errors.Is(err, fence.ErrStale) || status.Code(err) != codes.Aborted ||
		!errors.As(err, &se) || se.Token != 3 || se.Highest != 3 || se.Holder != "node-b" {
		t.Fatalf("node-b token 3 after node-a token 3: %v (%+v), want Aborted matching ErrTokenReused", err, se)
	}
	if n := h.calls.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1: node-b's call reached it", n)
	}
	s, err := b3.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recv(); !errors.Is(err, fence.ErrTokenReused) {
		t.Fatalf("node-b stream with token 3: %v, want ErrTokenReused", err)
	}
	if _, err := a3.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("node-a token 3 again: %v", err)
	}
	if _, err := client(dial, "sweeper", term("node-b", 4)).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("node-b token 4: %v", err)
	}
	if _, err := a3.Check(ctx, &healthpb.HealthCheckRequest{}); !errors.Is(err, fence.ErrStale) || errors.Is(err, fence.ErrTokenReused) {
		t.Fatalf("node-a token 3 after 4: %v, want ErrStale (lower), not ErrTokenReused", err)
	}
}
