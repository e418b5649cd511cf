package etcd

import "github.com/leasehold/leasehold/store"

// Limits reports the store's bounds on timings (store.Limiter): leases of at
// least MinTTL; time resolution exact: the server counts the lease down itself; a TTL is rounded up to whole seconds, never down.
func (s *Store) Limits() store.Limits {
	return store.Limits{MinLeaseDuration: MinTTL, TimeResolution: 0}
}
