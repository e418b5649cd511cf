package interop_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/faultproxy"
	"github.com/leasehold/leasehold/interop/fleet"
	"github.com/leasehold/leasehold/store/etcd/etcdv3client"
)

// Timings of the etcd fleet. etcd leases are whole seconds; the embedded
// server's 100 ms ticks make 1 s its shortest. Both kinds hold a 2 s lease:
// leasehold renews every 400 ms and trusts its term 1.2 s after the last
// successful renewal was sent; an etcd Session keeps its lease alive every
// third of the TTL on its own, and the Mutex user leads until the Session
// says it is gone (Done) or the peer's own deadline passes: the send of the
// last keep-alive that the server answered, plus the TTL it answered with.
const etcdTTL = 2 // seconds

// etcdFairMaxWait bounds the Mutex terms a waiting leasehold node with
// Config.Fair passes through (see mixed-fair): the two Mutex users queued
// ahead of it, twice (a fault may end its place once and send it to the
// back), and two more for a loaded machine. Seen: 2 to 4 in four runs.
const etcdFairMaxWait = 6

var etcdTimings = leasehold.Timings{
	LeaseDuration: etcdTTL * time.Second,
	RenewDeadline: 1200 * time.Millisecond,
	RenewInterval: 400 * time.Millisecond,
	RetryPeriod:   200 * time.Millisecond,
}

// startEtcd runs etcd's own server code in this process, on loopback, and
// returns its client address (host:port).
func startEtcd(t *testing.T) string {
	t.Helper()
	port := func() int {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return l.Addr().(*net.TCPAddr).Port
	}
	u := func(p int) url.URL { return url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", p)} }
	cfg := embed.NewConfig()
	cfg.Name = "fleet"
	cfg.Dir = t.TempDir()
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cfg.TickMs, cfg.ElectionMs = 100, 600
	cfg.UnsafeNoFsync = true
	client, peer := u(port()), u(port())
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.ListenMetricsUrls = nil
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatalf("start embedded etcd: %v", err)
	}
	t.Cleanup(e.Close)
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		t.Fatalf("embedded etcd: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("embedded etcd not ready within 30 s")
	}
	return client.Host
}

// leaseDeadlines learns, from an etcd client's own gRPC traffic, each lease's
// deadline as the client could know it: the send time of the latest grant or
// keep-alive that the server answered, plus the TTL in that answer.
type leaseDeadlines struct {
	mu sync.Mutex
	at map[int64]time.Time
}

func (d *leaseDeadlines) extend(id int64, at time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if at.After(d.at[id]) {
		d.at[id] = at
	}
}

func (d *leaseDeadlines) get(id clientv3.LeaseID) time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.at[int64(id)]
}

// dialOptions are the interceptors that feed d.
func (d *leaseDeadlines) dialOptions() []grpc.DialOption {
	unary := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		sent := time.Now()
		err := invoker(ctx, method, req, reply, cc, opts...)
		if r, ok := reply.(*pb.LeaseGrantResponse); ok && err == nil && r.Error == "" {
			d.extend(r.ID, sent.Add(time.Duration(r.TTL)*time.Second))
		}
		return err
	}
	stream := func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		cs, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil {
			return cs, err
		}
		return &keepAliveStream{ClientStream: cs, d: d, sent: map[int64][]time.Time{}}, nil
	}
	return []grpc.DialOption{grpc.WithChainUnaryInterceptor(unary), grpc.WithChainStreamInterceptor(stream)}
}

// keepAliveStream pairs each keep-alive answer with the send time of the
// oldest unanswered keep-alive of its lease on this stream.
type keepAliveStream struct {
	grpc.ClientStream
	d    *leaseDeadlines
	mu   sync.Mutex
	sent map[int64][]time.Time
}

func (s *keepAliveStream) SendMsg(m any) error {
	if r, ok := m.(*pb.LeaseKeepAliveRequest); ok {
		s.mu.Lock()
		s.sent[r.ID] = append(s.sent[r.ID], time.Now())
		s.mu.Unlock()
	}
	return s.ClientStream.SendMsg(m)
}

func (s *keepAliveStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if r, ok := m.(*pb.LeaseKeepAliveResponse); ok && err == nil {
		s.mu.Lock()
		if q := s.sent[r.ID]; len(q) > 0 {
			s.sent[r.ID] = q[1:]
			if r.TTL > 0 {
				s.d.extend(r.ID, q[0].Add(time.Duration(r.TTL)*time.Second))
			}
		}
		s.mu.Unlock()
	}
	return err
}

// etcdFleet is one etcd fleet's setup.
type etcdFleet struct {
	t       *testing.T
	server  string
	prefix  string
	name    string
	proxies map[string]*faultproxy.Proxy
}

func newEtcdFleet(t *testing.T, server string) *etcdFleet {
	b := make([]byte, 6)
	rand.Read(b)
	return &etcdFleet{t: t, server: server, prefix: "fleet-" + hex.EncodeToString(b) + "/", name: "job", proxies: map[string]*faultproxy.Proxy{}}
}

func (f *etcdFleet) proxy(who string) *faultproxy.Proxy {
	p := newProxy(f.t, f.server)
	f.proxies[who] = p
	return p
}

// client is an etcd client through p, configured alike for both kinds: a
// dead connection is noticed within about 4 s, and a refused one is dialled
// again within half a second (gRPC's default backoff grows to two minutes,
// which would keep a participant out long after its outage healed).
func (f *etcdFleet) client(p *faultproxy.Proxy, opts ...grpc.DialOption) *clientv3.Client {
	opts = append(opts, grpc.WithConnectParams(grpc.ConnectParams{MinConnectTimeout: time.Second,
		Backoff: backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 500 * time.Millisecond}}))
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{p.Addr()}, DialTimeout: 2 * time.Second,
		DialKeepAliveTime: 2 * time.Second, DialKeepAliveTimeout: 2 * time.Second,
		Logger: zap.NewNop(), DialOptions: opts})
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { cli.Close() })
	return cli
}

func (f *etcdFleet) node(who string, seed uint64) *fleet.Node {
	st, err := etcdv3client.New(f.client(f.proxy(who)), f.prefix)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { st.Close() })
	return &fleet.Node{Name: who, Store: st, Lease: f.name, Timings: etcdTimings,
		Hold: holdFor(seed, 500*time.Millisecond, 1500*time.Millisecond), Cool: 300 * time.Millisecond}
}

// peer is an `etcdctl lock` user through its own proxy: each term it grants
// a lease (bounded by a timeout), opens a concurrency.Session on it, and
// locks a concurrency.Mutex on the name's contender prefix, the one
// leasehold's etcd store uses; it leads until the Session is done or its own
// deadline passes, and unlocks and closes the Session after its hold. With
// ignoreLoss (the negative control) it leads for its whole hold whatever
// happens.
func (f *etcdFleet) peer(who string, seed uint64, ignoreLoss bool) fleet.Member {
	// Each user pauses longer than a term between its terms, as a job run
	// by `etcdctl lock` now and then would, so that the queue empties and
	// a leasehold node without Config.Fair gets its turn.
	return f.peerCooling(who, seed, ignoreLoss, holdFor(seed+100, 2*time.Second, 3*time.Second))
}

// peerCooling is peer with the pause between its terms drawn by cool.
func (f *etcdFleet) peerCooling(who string, seed uint64, ignoreLoss bool, cool func() time.Duration) fleet.Member {
	p := f.proxy(who)
	d := &leaseDeadlines{at: map[int64]time.Time{}}
	cli := f.client(p, d.dialOptions()...)
	hold := holdFor(seed, 500*time.Millisecond, 1500*time.Millisecond)
	if ignoreLoss {
		hold = holdFor(seed, 4*time.Second, 6*time.Second)
	}
	// A Mutex user queues (its key waits under the prefix, and the lowest
	// create revision holds); a leasehold node without Config.Fair takes
	// the name only when no key is there, so Mutex users that queue again
	// within each other's terms keep it out for as long as they do so. A
	// node with Config.Fair queues in the same queue.
	pfx := f.prefix + f.name
	return func(ctx context.Context, rec *fleet.Recorder) error {
		for ctx.Err() == nil {
			waited := rec.Waiting(who, fleet.Peer)
			var sess *concurrency.Session
			var mu *concurrency.Mutex
			for ctx.Err() == nil {
				gctx, cancel := context.WithTimeout(ctx, time.Second)
				g, err := cli.Grant(gctx, etcdTTL)
				cancel()
				if err != nil {
					fleet.Pause(ctx, etcdTimings.RetryPeriod)
					continue
				}
				s, err := concurrency.NewSession(cli, concurrency.WithLease(g.ID), concurrency.WithContext(ctx))
				if err != nil {
					fleet.Pause(ctx, etcdTimings.RetryPeriod)
					continue
				}
				m := concurrency.NewMutex(s, pfx)
				lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				err = m.Lock(lctx)
				cancel()
				if err == nil {
					sess, mu = s, m
					break
				}
				s.Orphan()
				fleet.Pause(ctx, etcdTimings.RetryPeriod)
			}
			if sess == nil {
				waited(false)
				return nil
			}
			waited(true)
			term := rec.Begin(who, "etcd-mutex", fleet.Peer, 0)
			deadline := func() {
				if !ignoreLoss {
					rec.SetDeadline(term, d.get(sess.Lease()))
				}
			}
			deadline()
			end := time.NewTimer(hold())
			tick := time.NewTicker(50 * time.Millisecond)
			how := "released"
		leading:
			for {
				select {
				case <-ctx.Done():
					how = "stopped"
					break leading
				case <-end.C:
					break leading
				case <-sess.Done():
					if !ignoreLoss {
						how = "lost"
						break leading
					}
				case <-tick.C:
					deadline()
				}
			}
			end.Stop()
			tick.Stop()
			deadline()
			rec.End(term, time.Now(), how)
			uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			if how == "released" {
				mu.Unlock(uctx)
			}
			sess.Orphan()
			cli.Revoke(uctx, sess.Lease())
			cancel()
			fleet.Pause(ctx, cool())
		}
		return nil
	}
}

func (f *etcdFleet) faults(seed uint64) *fleet.Faults {
	return &fleet.Faults{Proxies: f.proxies, Every: 250 * time.Millisecond,
		Min: 300 * time.Millisecond, Max: 5 * etcdTTL * time.Second / 4, Seed: seed}
}

// TestFleetEtcd: two leasehold electors and two etcd Mutex users (what
// `etcdctl lock` runs) on one name, under delays, resets, partitions and
// outages of each one's connection.
func TestFleetEtcd(t *testing.T) {
	t.Parallel()
	server := startEtcd(t)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	t.Run("mixed", func(t *testing.T) {
		t.Parallel()
		f := newEtcdFleet(t, server)
		members := []fleet.Member{f.node("lh-1", seed+1).Member(), f.node("lh-2", seed+2).Member(),
			f.peer("mutex-1", seed+3, false), f.peer("mutex-2", seed+4, false)}
		res := fleet.Run(context.Background(), fleet.Options{Duration: fleetRun, Faults: f.faults(seed)}, members...)
		requireFleet(t, res, 40, -1)
	})
	t.Run("mixed-fair", func(t *testing.T) {
		t.Parallel()
		// Mutex users that queue again 300 ms after each term: without
		// Config.Fair a leasehold node waited through 9 of their terms and
		// led once in 20 s. In the one queue, a waiting node is passed over
		// only by the contenders queued before it (the other node and the
		// two Mutex users), and again when a fault ends its place (a place
		// lives on its own etcd lease, which a partition lets expire).
		f := newEtcdFleet(t, server)
		lh1, lh2 := f.node("lh-1", seed+1), f.node("lh-2", seed+2)
		lh1.Fair, lh2.Fair = true, true
		quick := func() time.Duration { return 300 * time.Millisecond }
		members := []fleet.Member{lh1.Member(), lh2.Member(),
			f.peerCooling("mutex-1", seed+3, false, quick), f.peerCooling("mutex-2", seed+4, false, quick)}
		res := fleet.Run(context.Background(), fleet.Options{Duration: fleetRun, Faults: f.faults(seed)}, members...)
		requireFleet(t, res, 40, etcdFairMaxWait)
	})
	t.Run("control-peer-ignores-loss", func(t *testing.T) {
		t.Parallel()
		f := newEtcdFleet(t, server)
		members := []fleet.Member{f.node("lh-1", seed+1).Member(), f.node("lh-2", seed+2).Member(),
			f.peer("mutex-deaf", seed+3, true)}
		res := fleet.Run(context.Background(), controlRun(f.faults(seed+10), "mutex-deaf", etcdTimings.LeaseDuration), members...)
		requireCaught(t, res, "mutex-deaf")
	})
	t.Run("control-leasehold-trusts-past-safeUntil", func(t *testing.T) {
		t.Parallel()
		f := newEtcdFleet(t, server)
		bad := f.node("lh-overtrust", seed+1)
		bad.Overtrust = 2 * etcdTimings.LeaseDuration
		bad.Hold = holdFor(seed, 3*etcdTimings.LeaseDuration, 5*etcdTimings.LeaseDuration) // long terms, so that faults end some
		// One Mutex user only: Mutex waiters queue ahead of leasehold (see
		// the fairness note above), and the bad node must lead to be caught.
		members := []fleet.Member{bad.Member(), f.node("lh-2", seed+2).Member(), f.peer("mutex-1", seed+3, false)}
		res := fleet.Run(context.Background(), controlRun(f.faults(seed+20), "lh-overtrust", etcdTimings.LeaseDuration), members...)
		requireCaught(t, res, "lh-overtrust")
	})
}
