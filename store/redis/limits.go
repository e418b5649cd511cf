package redis

import "github.com/leasehold/leasehold/store"

// Limits reports the store's bounds on timings (store.Limiter): leases of at
// least MinTTL; time resolution exact: expiry is judged by the store's own clock at the resolution it keeps, finer than any margin that passes Validate.
func (s *Store) Limits() store.Limits {
	return store.Limits{MinLeaseDuration: MinTTL, TimeResolution: 0}
}
