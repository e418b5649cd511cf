package zookeeper

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store/storetest"
)

// elector is one leasehold elector running in the background.
type elector struct {
	st      *Store
	cancel  context.CancelFunc
	done    chan error
	mu      sync.Mutex
	renewed int
}

func (el *elector) renewals() int {
	el.mu.Lock()
	defer el.mu.Unlock()
	return el.renewed
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
	el := &elector{st: st, done: make(chan error, 1)}
	e, err := leasehold.NewElector(st, "leader", leasehold.Config{
		Identity: id, Timings: clusterTimings(),
		OnEvent: func(ev leasehold.Event) {
			switch ev.Kind {
			case leasehold.EventRenewed:
				el.mu.Lock()
				el.renewed++
				el.mu.Unlock()
			case leasehold.EventRenewFailed, leasehold.EventLost, leasehold.EventAcquired:
				l.Note("%s %s %s err=%v", id, ev.Kind, ev.Term, ev.Err)
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	el.cancel = cancel
	go func() { el.done <- e.Run(ctx, l.Work) }()
	t.Cleanup(el.stop)
	return el
}

func (el *elector) stop() {
	el.cancel()
	select {
	case <-el.done:
	case <-time.After(20 * time.Second):
	}
}
