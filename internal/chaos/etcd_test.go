package chaos

import (
	"context"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/freeport"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// etcdMember is a one-member etcd cluster run inside the test process
// (etcd's own server code, package embed), with short ticks so that 1 s
// leases work. As the harness's StoreControl it stops (Close) and starts
// again on the same data directory and ports: a real member restart.
type etcdMember struct {
	t                    *testing.T
	dir                  string
	clientPort, peerPort int
	e                    *embed.Etcd
}

func startEtcd(t *testing.T) *etcdMember {
	t.Helper()
	m := &etcdMember{t: t, dir: t.TempDir(), clientPort: freeport.ForTest(t), peerPort: freeport.ForTest(t)}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Stop(context.Background()) })
	return m
}

func (m *etcdMember) URL() string {
	return fmt.Sprintf("etcd://127.0.0.1:%d/chaos/", m.clientPort)
}

func (m *etcdMember) Start(ctx context.Context) error {
	cfg := embed.NewConfig()
	cfg.Name = "chaos"
	cfg.Dir = m.dir
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cfg.TickMs = 100
	cfg.ElectionMs = 600 // etcd's minimum lease TTL becomes 1 s
	// The store-restart fault kills and restarts the member's process, not
	// the machine: the page cache survives, so fsync protects nothing here,
	// and its waits behind other tests' disk writes timed acquires out.
	cfg.UnsafeNoFsync = true
	cu, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", m.clientPort))
	pu, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", m.peerPort))
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.ListenMetricsUrls = nil
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("start embedded etcd: %w", err)
	}
	t := time.NewTimer(30 * time.Second)
	defer t.Stop()
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return fmt.Errorf("embedded etcd failed: %w", err)
	case <-t.C:
		e.Close()
		return fmt.Errorf("embedded etcd not ready within 30s")
	}
	m.e = e
	return nil
}

func (m *etcdMember) Stop(context.Context) error {
	if m.e != nil {
		m.e.Close()
		m.e = nil
	}
	return nil
}
