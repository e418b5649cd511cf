package etcd

import (
	"testing"

	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/storetest"
)

// TestConformance runs the store contract's suite on one embedded etcd
// member, each case under its own key prefix.
func TestConformance(t *testing.T) {
	m := shared(t)
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T) func() (store.Store, error) {
			prefix := uniquePrefix("conf")
			return func() (store.Store, error) {
				return Open(testCtx(t, 10e9), Config{Endpoints: []string{m.clientURL}, Prefix: prefix})
			}
		},
		MinTTL: MinTTL,
	})
}
