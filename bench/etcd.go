package main

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/version"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	lhetcd "github.com/leasehold/leasehold/store/etcd"
)

// etcdEnv is one embedded etcd member (etcd's own server code in this
// process, as store/etcd's tests run it), a client for the peers whose lease
// keep-alives are recorded, and a leasehold store on its own client.
type etcdEnv struct {
	dir    string
	srv    *embed.Etcd
	url    string
	cli    *clientv3.Client
	leases *recLease
	st     *lhetcd.Store
	prefix string
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func startEtcd(ctx context.Context, fsync bool, runID string) (*etcdEnv, error) {
	dir, err := os.MkdirTemp("", "lhbench-etcd-")
	if err != nil {
		return nil, err
	}
	e := &etcdEnv{dir: dir, prefix: "lhbench-" + runID + "/"}
	cp, err1 := freePort()
	pp, err2 := freePort()
	if err1 != nil || err2 != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("free port: %v %v", err1, err2)
	}
	cfg := embed.NewConfig()
	cfg.Name = "bench"
	cfg.Dir = dir
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	// As store/etcd's tests: 100 ms ticks and a 600 ms election timeout
	// make etcd's minimum lease TTL 1 s.
	cfg.TickMs = 100
	cfg.ElectionMs = 600
	cfg.UnsafeNoFsync = !fsync
	curl, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", cp))
	purl, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", pp))
	cfg.ListenClientUrls = []url.URL{*curl}
	cfg.AdvertiseClientUrls = []url.URL{*curl}
	cfg.ListenPeerUrls = []url.URL{*purl}
	cfg.AdvertisePeerUrls = []url.URL{*purl}
	cfg.ListenMetricsUrls = nil
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	srv, err := embed.StartEtcd(cfg)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("embedded etcd: %w", err)
	}
	e.srv = srv
	select {
	case <-srv.Server.ReadyNotify():
	case err := <-srv.Err():
		e.close()
		return nil, fmt.Errorf("embedded etcd: %w", err)
	case <-time.After(30 * time.Second):
		e.close()
		return nil, fmt.Errorf("embedded etcd not ready within 30 s")
	}
	e.url = curl.String()
	e.cli, err = clientv3.New(clientv3.Config{Endpoints: []string{e.url}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		e.close()
		return nil, err
	}
	e.leases = &recLease{Lease: e.cli.Lease, last: map[clientv3.LeaseID]time.Time{}}
	e.cli.Lease = e.leases
	e.st, err = lhetcd.Open(ctx, lhetcd.Config{Endpoints: []string{e.url}, Prefix: e.prefix})
	if err != nil {
		e.close()
		return nil, err
	}
	return e, nil
}

func (e *etcdEnv) version() string {
	fs := "fsync on"
	if e.srv.Config().UnsafeNoFsync {
		fs = "fsync off"
	}
	return fmt.Sprintf("etcd %s embedded (go.etcd.io/etcd/server/v3/embed, one member, %s, 100 ms tick)", version.Version, fs)
}

func (e *etcdEnv) close() {
	if e.st != nil {
		e.st.Close()
	}
	if e.cli != nil {
		e.cli.Close()
	}
	if e.srv != nil {
		e.srv.Close()
	}
	os.RemoveAll(e.dir)
}

// recLease wraps the client's Lease API to record when each lease's last
// keep-alive answer arrived: etcd's Session consumes them itself.
type recLease struct {
	clientv3.Lease
	mu   sync.Mutex
	last map[clientv3.LeaseID]time.Time
}

func (r *recLease) mark(id clientv3.LeaseID) {
	r.mu.Lock()
	r.last[id] = time.Now()
	r.mu.Unlock()
}

func (r *recLease) lastOf(id clientv3.LeaseID) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last[id]
}

func (r *recLease) Grant(ctx context.Context, ttl int64) (*clientv3.LeaseGrantResponse, error) {
	resp, err := r.Lease.Grant(ctx, ttl)
	if err == nil {
		r.mark(resp.ID)
	}
	return resp, err
}

func (r *recLease) KeepAlive(ctx context.Context, id clientv3.LeaseID) (<-chan *clientv3.LeaseKeepAliveResponse, error) {
	in, err := r.Lease.KeepAlive(ctx, id)
	if err != nil {
		return in, err
	}
	out := make(chan *clientv3.LeaseKeepAliveResponse, 16)
	go func() {
		defer close(out)
		for resp := range in {
			r.mark(id)
			select {
			case out <- resp:
			default:
			}
		}
	}()
	return out, nil
}

func ttlSecs(d time.Duration) int {
	s := int((d + time.Second - 1) / time.Second)
	if s < 1 {
		s = 1
	}
	return s
}

func (e *etcdEnv) libs(handoffTTL time.Duration) []*lib {
	return []*lib{
		lhLockLib("etcd", e.st, handoffTTL, "watch from the next revision"),
		{
			name: "etcd Mutex", store: "etcd", peer: true, kind: "lock",
			config: fmt.Sprintf("concurrency.Mutex v3.7.3, one Session per contender, %v session TTL", handoffTTL),
			newContender: func(ctx context.Context, lockName string, s setup) (contender, error) {
				if s.ttl == 0 {
					s.ttl = handoffTTL
				}
				return &etcdC{e: e, pfx: e.prefix + "peer/" + lockName, s: s, election: false}, nil
			},
		},
		lhElectorLib("etcd", e.st, handoffTTL, "watch from the next revision"),
		{
			name: "etcd Election", store: "etcd", peer: true, kind: "elector",
			config: fmt.Sprintf("concurrency.Election v3.7.3, Campaign/Resign, %v session TTL", handoffTTL),
			newContender: func(ctx context.Context, lockName string, s setup) (contender, error) {
				if s.ttl == 0 {
					s.ttl = handoffTTL
				}
				return &etcdC{e: e, pfx: e.prefix + "peer/" + lockName, s: s, election: true}, nil
			},
		},
	}
}

// etcdC is a contender on etcd's concurrency package. Its session is made
// once and reused across acquisitions (as users do), unless a term crashes.
type etcdC struct {
	e        *etcdEnv
	pfx      string
	s        setup
	election bool
	sess     *concurrency.Session
}

func (c *etcdC) acquire(ctx context.Context) (held, error) {
	if c.sess == nil {
		s, err := concurrency.NewSession(c.e.cli, concurrency.WithTTL(ttlSecs(c.s.ttl)))
		if err != nil {
			return nil, err
		}
		c.sess = s
	}
	sess := c.sess
	h := &etcdHeld{c: c, sess: sess}
	if c.election {
		el := concurrency.NewElection(sess, c.pfx)
		if err := el.Campaign(ctx, c.s.identity); err != nil {
			return nil, err
		}
		h.rel = el.Resign
	} else {
		m := concurrency.NewMutex(sess, c.pfx)
		if err := m.Lock(ctx); err != nil {
			return nil, err
		}
		h.rel = m.Unlock
	}
	h.at = time.Now()
	return h, nil
}

func (c *etcdC) close() {
	if c.sess != nil {
		c.sess.Close()
		c.sess = nil
	}
}

type etcdHeld struct {
	c    *etcdC
	sess *concurrency.Session
	rel  func(ctx context.Context) error
	at   time.Time
}

func (h *etcdHeld) release(ctx context.Context) error { return h.rel(ctx) }

// crash stops the session's keep-alives without revoking its lease.
func (h *etcdHeld) crash() {
	h.sess.Orphan()
	h.c.sess = nil
}

func (h *etcdHeld) lastRenewal() time.Time {
	// The term lasts as long as the session's lease: its last keep-alive
	// answer is the last renewal.
	return h.c.e.leases.lastOf(h.sess.Lease())
}
