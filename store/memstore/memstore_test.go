package memstore_test

import (
	"testing"
	"time"

	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/memstore"
	"github.com/leasehold/leasehold/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T) func() (store.Store, error) {
			b := memstore.NewBackend(nil)
			return func() (store.Store, error) { return memstore.Open(b), nil }
		},
		MinTTL: 20 * time.Millisecond,
	})
}
