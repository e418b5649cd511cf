package leasehold_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store/memstore"
)

// BenchmarkElectorHandoff is the core's own share of an Elector's hand-off,
// on the in-memory store (no network): the time from the leader's work
// returning to the next leader's work starting, the waiter settled first
// (two refused attempts: the second after its watch was set). It is
// BenchmarkLockHandoff for an Elector, whose work is a callback.
func BenchmarkElectorHandoff(b *testing.B) {
	ctx := context.Background()
	for _, fair := range []bool{false, true} {
		name := "elector"
		if fair {
			name = "fair"
		}
		b.Run(name, func(b *testing.B) {
			st := memstore.New()
			refused := make(chan struct{}, 16)
			holder, err := leasehold.NewElector(st, "bench", leasehold.Config{Identity: "holder", Fair: fair})
			if err != nil {
				b.Fatal(err)
			}
			waiter, err := leasehold.NewElector(st, "bench", leasehold.Config{Identity: "waiter", Fair: fair, OnEvent: func(e leasehold.Event) {
				if e.Kind == leasehold.EventAcquireAttempt && e.Err != nil {
					refused <- struct{}{}
				}
			}})
			if err != nil {
				b.Fatal(err)
			}
			// lead runs e until its work has started and then until stop
			// closes; it reports the work's start on started.
			lead := func(e *leasehold.Elector, started chan<- time.Time, stop <-chan struct{}) <-chan error {
				done := make(chan error, 1)
				go func() {
					done <- e.Run(ctx, func(ctx context.Context, _ *leasehold.Lease) error {
						started <- time.Now()
						select {
						case <-stop:
						case <-ctx.Done():
						}
						return nil
					})
				}()
				return done
			}
			var total time.Duration
			for i := 0; i < b.N; i++ {
				hStarted, hStop := make(chan time.Time, 1), make(chan struct{})
				hDone := lead(holder, hStarted, hStop)
				<-hStarted
				for len(refused) > 0 {
					<-refused // a refusal of the last turn's, after its release
				}
				wStarted, wStop := make(chan time.Time, 1), make(chan struct{})
				wDone := lead(waiter, wStarted, wStop)
				<-refused
				<-refused
				t0 := time.Now()
				close(hStop)
				total += (<-wStarted).Sub(t0)
				if err := <-hDone; err != nil {
					b.Fatal(err)
				}
				close(wStop)
				if err := <-wDone; err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(total.Nanoseconds())/float64(b.N)/1e3, "µs/handoff")
		})
	}
}
