package zookeeper

import (
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store/storetest"
)

// elector is one leasehold elector running in the background, on its own
// store handle.
type elector struct {
	*storetest.Elector
	st *Store
}

// clusterTimings: a 3 s lease trusted for 2 s after each renewal was sent
// (a margin of 1 s, ten ticks of the test servers), renewed every 500 ms.
func clusterTimings() leasehold.Timings {
	return leasehold.Timings{
		LeaseDuration: 3 * time.Second,
		RenewDeadline: 2 * time.Second,
		RenewInterval: 500 * time.Millisecond,
		RetryPeriod:   250 * time.Millisecond,
	}
}

// startElector runs an elector for lease "leader" on st, its work the
// ledger's, until the test ends.
func startElector(t *testing.T, l *storetest.Ledger, id string, st *Store) *elector {
	t.Helper()
	return &elector{Elector: l.Start(t, st, id, clusterTimings()), st: st}
}
