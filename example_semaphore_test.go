package leasehold_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store/memstore"
)

// A semaphore of two slots: at most two workers at once, each with a token of
// its own. The fenced resource keys its fence on the slot (Lease.Name).
func ExampleSemaphore() {
	st := memstore.New()
	sem, err := leasehold.NewSemaphore(st, "transcoders", 2, leasehold.Config{Identity: "replica-1"})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	first, _ := sem.Acquire(ctx)
	second, _ := sem.Acquire(ctx)
	fmt.Println("two holders in two slots:", first.Name() != second.Name())

	_, err = sem.TryAcquire(ctx)
	fmt.Println("a third is refused:", errors.Is(err, leasehold.ErrHeld))

	first.Release(ctx) // after the work done under first.Context() has returned
	third, _ := sem.Acquire(ctx)
	fmt.Println("the freed slot is granted again:", third.Name() == first.Name(), "with a higher token:", third.Token() > first.Token())
	second.Release(ctx)
	third.Release(ctx)
	// Output:
	// two holders in two slots: true
	// a third is refused: true
	// the freed slot is granted again: true with a higher token: true
}
