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

// Leader election: exactly one replica runs the sweeper, and every write it
// makes carries its fencing token.
func ExampleElector() {
	st := memstore.New() // in production: postgres, sqlite, redis, etcd, kubernetes
	e, err := leasehold.NewElector(st, "invoice-sweeper", leasehold.Config{
		Identity: "replica-1",
	})
	if err != nil {
		log.Fatal(err)
	}
	err = e.Run(context.Background(), func(ctx context.Context, l *leasehold.Lease) error {
		// ctx is cancelled before any rival could take over.
		fmt.Println("leading with token", l.Token())
		return nil // returning steps down and releases the lease
	})
	fmt.Println("run returned:", err)
	// Output:
	// leading with token 1
	// run returned: <nil>
}

// A lock around a short critical section.
func ExampleLock() {
	st := memstore.New()
	lk, err := leasehold.NewLock(st, "invoice-42", leasehold.Config{Identity: "replica-1"})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	held, err := lk.Acquire(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("token", held.Token())

	other, _ := leasehold.NewLock(st, "invoice-42", leasehold.Config{Identity: "replica-2"})
	_, err = other.TryAcquire(ctx)
	fmt.Println("second holder refused:", errors.Is(err, leasehold.ErrHeld))

	if err := held.Release(ctx); err != nil {
		log.Fatal(err)
	}
	again, _ := other.TryAcquire(ctx)
	fmt.Println("after release, token", again.Token())
	again.Release(ctx)
	// Output:
	// token 1
	// second holder refused: true
	// after release, token 2
}

// Timings are validated at construction, with the rule that failed.
func ExampleTimings_Validate() {
	err := leasehold.Timings{LeaseDuration: 10 * time.Second, RenewDeadline: 10 * time.Second}.Validate()
	fmt.Println(err)
	// Output:
	// leasehold: invalid config: leaseDuration 10s must be greater than renewDeadline 10s (rule leaseDuration > renewDeadline > renewInterval > 0): the gap is the safety margin
}

// OnEvent sees every acquire's answer; OutcomeOf says which answers are
// store errors (only an unknown outcome is).
func ExampleOutcomeOf() {
	st := memstore.New()
	onEvent := func(ev leasehold.Event) {
		if ev.Kind == leasehold.EventAcquireAttempt {
			o := leasehold.OutcomeOf(ev.Err)
			fmt.Println("acquire:", o, "store error:", !o.Definite())
		}
	}
	first, _ := leasehold.NewLock(st, "invoice-42", leasehold.Config{Identity: "replica-1", OnEvent: onEvent})
	second, _ := leasehold.NewLock(st, "invoice-42", leasehold.Config{Identity: "replica-2", OnEvent: onEvent})
	ctx := context.Background()
	held, err := first.Acquire(ctx)
	if err != nil {
		log.Fatal(err)
	}
	second.TryAcquire(ctx)
	held.Release(ctx)
	// Output:
	// acquire: applied store error: false
	// acquire: held store error: false
}
