package redis_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store"
	lhredis "github.com/leasehold/leasehold/store/redis"
)

// A lock around a critical section, against the Redis on 127.0.0.1:6379
// (keys under the prefix leasehold-example:). It needs a server, so go test
// compiles it but does not run it: the store's tests cover the same calls.
func Example() {
	ctx := context.Background()
	st, err := lhredis.Open(ctx, "redis://127.0.0.1:6379/0?prefix=leasehold-example:")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer st.Close()

	lk, err := leasehold.NewLock(st, "nightly-report", leasehold.Config{Identity: "worker-1"})
	if err != nil {
		fmt.Println(err)
		return
	}
	held, err := lk.Acquire(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	// Do the work under held.Context(), and send held.Term() (token and
	// holder) with every write to the resource, whose fence refuses an older
	// term: a lower token, or the same token from another holder.
	fmt.Println("holding; token above 0:", held.Token() > 0)

	// Meanwhile another worker is refused.
	other, _ := leasehold.NewLock(st, "nightly-report", leasehold.Config{Identity: "worker-2"})
	_, err = other.TryAcquire(ctx)
	fmt.Println("worker-2 refused:", errors.Is(err, store.ErrHeld))

	if err := held.Release(ctx); err != nil {
		fmt.Println(err)
	}
}

// The store's calls, as a lease: grant, refusal, release, and a higher
// token for the next holder.
func ExampleOpen() {
	ctx := context.Background()
	st, err := lhredis.Open(ctx, "redis://127.0.0.1:6379/0?prefix=leasehold-example:")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer st.Close()

	a, err := st.Acquire(ctx, "cron/cleanup", "host-a", 15*time.Second, "")
	if err != nil {
		fmt.Println(err)
		return
	}
	_, err = st.Acquire(ctx, "cron/cleanup", "host-b", 15*time.Second, "")
	fmt.Println("host-b held off:", errors.Is(err, store.ErrHeld))
	st.Release(ctx, a.Term)
	b, _ := st.Acquire(ctx, "cron/cleanup", "host-b", 15*time.Second, "")
	fmt.Println("host-b token is higher:", b.Token > a.Token)
	st.Release(ctx, b.Term)
}
