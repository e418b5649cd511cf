package etcd

import (
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/leasehold/leasehold/store/etcd/internal/etcdwire"
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

// fenceCmp is f as a clientv3 comparison (what etcdv3client.Fence returns).
func fenceCmp(f Fencing) clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(f.Key), "=", f.CreateRevision)
}
