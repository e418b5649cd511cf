package etcd

import (
	"context"
	"testing"

	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/storetest"
)

// TestConformance runs the store contract's suite on one embedded etcd
// member, each case under its own key prefix: on the store's own client
// (Open, what the leasehold command uses) and on clientv3 (the adapter
// etcdv3client.New uses).
func TestConformance(t *testing.T) {
	t.Parallel() // the suite mostly waits on leases
	m := shared(t)
	for _, c := range []struct {
		name string
		open func(context.Context, Config) (*Store, error)
	}{{"etcdwire", Open}, {"clientv3", openV3}} {
		t.Run(c.name, func(t *testing.T) {
			storetest.Run(t, storetest.Harness{
				New: func(t *testing.T) func() (store.Store, error) {
					prefix := uniquePrefix("conf")
					return func() (store.Store, error) {
						return c.open(testCtx(t, 10e9), Config{Endpoints: []string{m.clientURL}, Prefix: prefix})
					}
				},
				MinTTL: MinTTL,
			})
		})
	}
}
