package nats

import (
	"testing"
	"time"

	"github.com/leasehold/leasehold"
)

func TestZZFairLock(t *testing.T) {
	srv := shared(t)
	st := openStore(t, srv.url(), uniqueBucket("zz"))
	ctx := testCtx(t, 30*time.Second)
	for _, fair := range []bool{false, true} {
		var evs []string
		lk, err := leasehold.NewLock(st, "job", leasehold.Config{Identity: "me", Fair: fair, OnEvent: func(e leasehold.Event) {
			if len(evs) < 30 {
				evs = append(evs, e.Kind.String()+" "+e.Latency.String())
			}
		}})
		if err != nil {
			t.Fatal(err)
		}
		var acq, rel time.Duration
		const n = 100
		for range n {
			t0 := time.Now()
			l, err := lk.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			t1 := time.Now()
			l.Release(ctx)
			acq += t1.Sub(t0)
			rel += time.Since(t1)
		}
		t.Logf("fair=%v acquire %v release %v; %v", fair, acq/n, rel/n, evs[:12])
	}
}
