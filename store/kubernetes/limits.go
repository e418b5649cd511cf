package kubernetes

import (
	"time"

	"github.com/leasehold/leasehold/store"
)

// Limits reports the store's bounds on timings (store.Limiter): leases of at
// least MinTTL, and a time resolution of one second. client-go, which may
// share the Lease, compares the whole record and its renewTime at whole
// seconds: two renewals within one second look the same to it, so it may
// date a term up to a second before its last renewal. The core therefore
// requires leaseDuration - renewDeadline above one second on this store.
func (s *Store) Limits() store.Limits {
	return store.Limits{MinLeaseDuration: MinTTL, TimeResolution: time.Second}
}
