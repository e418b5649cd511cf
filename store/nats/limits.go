package nats

import "github.com/leasehold/leasehold/store"

// Limits reports the store's bounds on timings (store.Limiter): leases of at
// least MinTTL (the server counts TTLs in whole seconds, from one second);
// time resolution exact: the server counts each key's TTL down on its own
// clock, and the store rounds a TTL up to whole seconds, never down.
func (s *Store) Limits() store.Limits {
	return store.Limits{MinLeaseDuration: MinTTL, TimeResolution: 0}
}
