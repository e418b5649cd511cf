package leasehold_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store/memstore"
)

// A scheduled job runs at most once per period across nodes: node-2, in the
// same period, finds it claimed. (The example fixes the wall clock; leave
// Schedule.Now nil in production.)
func ExampleScheduler() {
	st := memstore.New() // in production: postgres, sqlite, redis, etcd, kubernetes
	at := func() time.Time { return time.Date(2026, 12, 3, 9, 30, 0, 0, time.UTC) }
	for _, node := range []string{"node-1", "node-2"} {
		ctx, stop := context.WithCancel(context.Background())
		s, err := leasehold.NewScheduler(st, "hourly-report", leasehold.Config{Identity: node}, leasehold.Schedule{
			Every:  time.Hour,
			Missed: leasehold.MissedRunOnce,
			Now:    at,
			OnSkip: func(p time.Time, err error) {
				fmt.Printf("%s skips %s: claimed already: %v\n", node, p.Format(time.RFC3339), errors.Is(err, leasehold.ErrPeriodClaimed))
				stop()
			},
		})
		if err != nil {
			log.Fatal(err)
		}
		s.Run(ctx, func(ctx context.Context, period time.Time, l *leasehold.Lease) error {
			fmt.Printf("%s runs %s with token %d\n", node, period.Format(time.RFC3339), l.Token())
			stop()
			return nil
		})
	}
	// Output:
	// node-1 runs 2026-12-03T09:00:00Z with token 1
	// node-2 skips 2026-12-03T09:00:00Z: claimed already: true
}

// MaxHold: a holder whose work is stuck cannot keep a lock for ever. At the
// cap the work's context ends and renewing stops; the lock is released once
// the work returns (or expires, if it never does).
func ExampleConfig_maxHold() {
	st := memstore.New()
	lk, err := leasehold.NewLock(st, "compaction", leasehold.Config{
		Identity:  "replica-1",
		KeepAlive: true,
		MaxHold:   100 * time.Millisecond,
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	l, err := lk.Acquire(ctx)
	if err != nil {
		log.Fatal(err)
	}
	<-l.Context().Done() // the work, told to stop
	fmt.Println(context.Cause(l.Context()))
	fmt.Println("released:", l.Release(ctx))
	// Output:
	// leasehold: term reached its maximum hold time
	// released: <nil>
}
