package etcd

import (
	"context"
	"os"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/leasehold/leasehold/store/etcd/internal/etcdwire"
	"github.com/leasehold/leasehold/store/etcd/internal/v3adapter"
)

// The tests check what the store wrote with etcd's own client (clientv3),
// on the endpoints of the store's own client.

var (
	testClientsMu sync.Mutex
	testClients   = map[string]*clientv3.Client{}
)

// Client returns a clientv3 client on the endpoints the store talks to
// (without auth or TLS), shared by the tests and closed by TestMain.
func (s *Store) Client() *clientv3.Client {
	if c, ok := v3adapter.Client(s.cli); ok {
		return c
	}
	w, ok := s.cli.(*etcdwire.Client)
	if !ok {
		panic("Store.Client in tests: the store is not on etcdwire")
	}
	eps := w.Endpoints()
	key := strings.Join(eps, ",")
	testClientsMu.Lock()
	defer testClientsMu.Unlock()
	if c := testClients[key]; c != nil {
		return c
	}
	c, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		panic(err)
	}
	testClients[key] = c
	pkgTB{}.Cleanup(func() { c.Close() })
	return c
}

// The store's tests run on the store's own client (Open), or with
// LEASEHOLD_ETCD_CLIENT=clientv3 on the adapter over clientv3 that
// etcdv3client.New uses (openStore); TestConformance runs on both.
var testOnClientv3 = os.Getenv("LEASEHOLD_ETCD_CLIENT") == "clientv3"

// openV3 is Open on a clientv3 client of the store's own (closed by Close).
func openV3(ctx context.Context, cfg Config) (*Store, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: cfg.Endpoints, Username: cfg.Username, Password: cfg.Password,
		TLS: cfg.TLS, DialTimeout: 5 * time.Second, Logger: zap.NewNop(), Context: ctx,
		DialKeepAliveTime: 5 * time.Second, DialKeepAliveTimeout: 5 * time.Second})
	if err != nil {
		return nil, err
	}
	s, err := NewOnAPI(v3adapter.New(cli, true), cfg.Prefix)
	if err != nil {
		cli.Close()
		return nil, err
	}
	s.own = true
	return s, nil
}

// fenceCmp is f as a clientv3 comparison (what etcdv3client.Fence returns).
func fenceCmp(f Fencing) clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(f.Key), "=", f.CreateRevision)
}
