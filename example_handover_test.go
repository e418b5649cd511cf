package leasehold_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sync"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store/memstore"
)

// A graceful hand-over: the leader is asked to step down, its work stops as
// on shutdown, and the named successor takes over at once, with a higher
// token, without waiting for the lease to expire.
func ExampleHandover() {
	backend := memstore.NewBackend(nil) // in production: the store your nodes share
	newElector := func(id string) *leasehold.Elector {
		e, err := leasehold.NewElector(memstore.Open(backend), "invoice-sweeper", leasehold.Config{Identity: id})
		if err != nil {
			log.Fatal(err)
		}
		return e
	}
	a, b := newElector("replica-1"), newElector("replica-2")

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	leading := make(chan string, 2)
	stopped := make(chan error, 1)
	run := func(e *leasehold.Elector) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e.Run(ctx, func(ctx context.Context, l *leasehold.Lease) error {
				leading <- fmt.Sprintf("%s leads with token %d", e.Identity()[:9], l.Token())
				<-ctx.Done()
				if e == a {
					stopped <- context.Cause(ctx) // drain here: the term ends after this returns
				}
				return nil
			})
		}()
	}
	run(a)
	fmt.Println(<-leading)
	run(b) // waits: replica-1 holds the lease

	res, err := leasehold.Handover(context.Background(), memstore.Open(backend), "invoice-sweeper",
		leasehold.HandoverOptions{To: b.Identity()})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("replica-1 stopped:", errors.Is(<-stopped, leasehold.ErrHandedOver))
	fmt.Println(<-leading)
	fmt.Println("successor took over:", res.TookOver)
	cancel()
	wg.Wait()
	// Output:
	// replica-1 leads with token 1
	// replica-1 stopped: true
	// replica-2 leads with token 3
	// successor took over: true
}
