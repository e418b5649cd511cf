package leasehold_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/memstore"
)

// handoverAt runs Handover in a goroutine; its answer arrives on the channel.
type handoverAnswer struct {
	res leasehold.HandoverResult
	err error
}

func handoverAsync(st store.Store, opts leasehold.HandoverOptions) <-chan handoverAnswer {
	out := make(chan handoverAnswer, 1)
	go func() {
		res, err := leasehold.Handover(context.Background(), st, "sweeper", opts)
		out <- handoverAnswer{res, err}
	}()
	return out
}

// A hand-over to a named successor: the holder's work is cancelled with
// ErrHandedOver, the term ends only after the work returned, the successor
// leads from that instant with a higher token, and the other waiting node
// does not take the lease.
func TestHandoverToSuccessor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture()
		recA := &recorder{}
		a := newElector(t, f.faulty(), "node-a", recA, nil)
		b := newElector(t, f.faulty(), "node-b", nil, nil)
		c := newElector(t, f.faulty(), "node-c", nil, nil)
		workA, termsA := worker(2 * time.Second) // takes 2 s to drain
		workB, termsB := worker(0)
		workC, termsC := worker(0)
		stopA, _ := running(a, workA)
		synctest.Wait()
		stopB, _ := running(b, workB)
		stopC, _ := running(c, workC)
		time.Sleep(3 * time.Second)

		asked := time.Now()
		ans := <-handoverAsync(memstore.Open(f.backend), leasehold.HandoverOptions{To: b.Identity()})
		if ans.err != nil {
			t.Fatalf("Handover: %v", ans.err)
		}
		time.Sleep(30 * time.Second) // long past the preference window
		stopC()                      // first: node-b's release at its stop would let node-c in
		stopB()
		stopA()

		ga, gb, gc := termsA(), termsB(), termsC()
		if len(ga) == 0 || ga[0].token != 1 || !ga[0].stopped.Equal(asked) || !errors.Is(ga[0].cause, leasehold.ErrHandedOver) {
			t.Fatalf("node-a's first term = %+v, want token 1 cancelled with ErrHandedOver at the request", ga)
		}
		returned := ga[0].returned
		if len(gb) != 1 || !gb[0].started.Equal(returned) || gb[0].token != 3 {
			t.Fatalf("node-b terms = %+v, want token 3 (above the reservation's 2) from node-a's return at +%v",
				gb, returned.Sub(asked))
		}
		if len(gc) != 0 {
			t.Errorf("node-c led during the hand-over: %+v", gc)
		}
		rel := recA.of(leasehold.EventReleased)
		if len(rel) == 0 || rel[0].at.Before(returned) || rel[0].Err != nil {
			t.Errorf("node-a's term ended at %+v, want after its work returned at +%v", rel, returned.Sub(asked))
		}
		if !ans.res.TookOver || ans.res.Next.Holder != b.Identity() || ans.res.Ended != 2*time.Second || ans.res.TookOverAfter != 2*time.Second {
			t.Errorf("result = %+v, want node-b took over 2 s after the request", ans.res)
		}
		if d := ans.res.TookOverAfter; d >= leasehold.DefaultTimings().LeaseDuration/5 {
			t.Errorf("took over after %v, want well under a lease duration", d)
		}
		if r := f.get(t, "sweeper.handover"); r.Live() {
			t.Errorf("request still live after the hand-over: %+v", r)
		}
	})
}

// A successor that never comes holds the lease for the preference window
// only: then another node takes it, never a lease duration later.
func TestHandoverSuccessorNeverComes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture()
		a := newElector(t, f.faulty(), "node-a", nil, nil)
		c := newElector(t, f.faulty(), "node-c", nil, nil)
		workA, termsA := worker(0)
		workC, termsC := worker(0)
		stopA, _ := running(a, workA)
		synctest.Wait()
		stopC, _ := running(c, workC)
		time.Sleep(time.Second)
		asked := time.Now()
		ans := <-handoverAsync(memstore.Open(f.backend), leasehold.HandoverOptions{To: "ghost-00000000", PreferFor: 3 * time.Second})
		if ans.err != nil || ans.res.TookOver {
			t.Fatalf("Handover = %+v, %v: want no error and TookOver false", ans.res, ans.err)
		}
		if r := ans.res.Next; r.Token < 2 || r.Holder == a.Identity() && r.Token == 1 {
			t.Errorf("last record %+v, want the reservation or a later term", r)
		}
		time.Sleep(20 * time.Second)
		stopC()
		stopA()
		ga, gc := termsA(), termsC()
		first := time.Time{}
		for _, l := range append(ga[1:], gc...) {
			if first.IsZero() || l.started.Before(first) {
				first = l.started
			}
		}
		if first.Sub(asked) != 3*time.Second {
			t.Fatalf("after the hand-over the lease was next led at +%v (a: %+v, c: %+v), want +3s, when the reservation expired",
				first.Sub(asked), ga, gc)
		}
	})
}

// Without a successor the holder releases and stands aside, so the waiting
// node takes over at once.
func TestHandoverWithoutSuccessor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture()
		a := newElector(t, f.faulty(), "node-a", nil, nil)
		b := newElector(t, f.faulty(), "node-b", nil, nil)
		workA, termsA := worker(0)
		workB, termsB := worker(0)
		stopA, _ := running(a, workA)
		synctest.Wait()
		stopB, _ := running(b, workB)
		time.Sleep(time.Second)
		asked := time.Now()
		ans := <-handoverAsync(memstore.Open(f.backend), leasehold.HandoverOptions{})
		if ans.err != nil || ans.res.Ended != 0 {
			t.Fatalf("Handover = %+v, %v", ans.res, ans.err)
		}
		time.Sleep(time.Second)
		stopB()
		stopA()
		if gb := termsB(); len(gb) != 1 || !gb[0].started.Equal(asked) || gb[0].token != 2 {
			t.Fatalf("node-b terms = %+v, want token 2 at the request instant", gb)
		}
		if ga := termsA(); len(ga) != 1 {
			t.Errorf("node-a led again while standing aside: %+v", ga)
		}
	})
}

// A dead holder (no Elector answers) does not make the request block the
// lease: Handover times out, and the waiting node takes over when the dead
// term expires on the store's clock, as without any request.
func TestHandoverDeadHolder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture()
		st := memstore.Open(f.backend)
		dead, err := st.Acquire(context.Background(), "sweeper", "dead-1", 15*time.Second, "")
		if err != nil {
			t.Fatal(err)
		}
		b := newElector(t, f.faulty(), "node-b", nil, nil)
		workB, termsB := worker(0)
		stopB, _ := running(b, workB)
		start := time.Now()
		ans := <-handoverAsync(st, leasehold.HandoverOptions{To: b.Identity(), Timeout: 4 * time.Second})
		if !errors.Is(ans.err, leasehold.ErrHandoverTimeout) || time.Since(start) != 4*time.Second {
			t.Fatalf("Handover = %v after %v, want ErrHandoverTimeout after 4s", ans.err, time.Since(start))
		}
		if r := f.get(t, "sweeper.handover"); r.Live() {
			t.Errorf("the request outlived its timeout: %+v", r)
		}
		time.Sleep(20 * time.Second)
		stopB()
		if gb := termsB(); len(gb) != 1 || gb[0].started.Sub(start) != 15*time.Second || gb[0].token != dead.Token+1 {
			t.Fatalf("node-b terms = %+v, want the next token at +15s, when the dead term expired", gb)
		}
	})
}

// Negative controls: a request that names another term, or is not a
// request, changes nothing; the same holder keeps leading.
func TestHandoverRequestForOtherTermIgnored(t *testing.T) {
	for _, meta := range []string{
		"leasehold-handover/v1 token=7 to=- prefer=5s", // another term
		"leasehold-handover/v1 token=1 to=- prefer=0s", // malformed
		"please step down",
	} {
		t.Run(meta, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFixture()
				a := newElector(t, f.faulty(), "node-a", nil, nil)
				workA, termsA := worker(0)
				stopA, _ := running(a, workA)
				synctest.Wait()
				st := memstore.Open(f.backend)
				if _, err := st.Acquire(context.Background(), "sweeper.handover", "someone", 10*time.Second, meta); err != nil {
					t.Fatal(err)
				}
				time.Sleep(8 * time.Second)
				stopA()
				if ga := termsA(); len(ga) != 1 || !errors.Is(ga[0].cause, context.Canceled) {
					t.Fatalf("terms = %+v, want one term ended only by the shutdown", ga)
				}
			})
		})
	}
	// The positive control of the same setup: the right token ends the term.
	synctest.Test(t, func(t *testing.T) {
		f := newFixture()
		a := newElector(t, f.faulty(), "node-a", nil, nil)
		workA, termsA := worker(0)
		stopA, _ := running(a, workA)
		synctest.Wait()
		st := memstore.Open(f.backend)
		if _, err := st.Acquire(context.Background(), "sweeper.handover", "someone", 10*time.Second, "leasehold-handover/v1 token=1 to=- prefer=5s"); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		stopA()
		if ga := termsA(); len(ga) == 0 || !errors.Is(ga[0].cause, leasehold.ErrHandedOver) {
			t.Fatalf("terms = %+v, want the term ended by the request", ga)
		}
	})
}

// noTransfer is a memstore handle without the Transferer capability (it
// forwards the other methods it needs explicitly, embedding nothing).
type noTransfer struct{ s *memstore.Store }

func (n noTransfer) Acquire(ctx context.Context, name, holder string, ttl time.Duration, md string) (store.Record, error) {
	return n.s.Acquire(ctx, name, holder, ttl, md)
}
func (n noTransfer) Renew(ctx context.Context, t store.Term, ttl time.Duration) (store.Record, error) {
	return n.s.Renew(ctx, t, ttl)
}
func (n noTransfer) Release(ctx context.Context, t store.Term) error { return n.s.Release(ctx, t) }
func (n noTransfer) Get(ctx context.Context, name string) (store.Record, error) {
	return n.s.Get(ctx, name)
}
func (n noTransfer) Close() error { return n.s.Close() }
func (n noTransfer) Watch(ctx context.Context, name string) (<-chan struct{}, error) {
	return n.s.Watch(ctx, name)
}

// Without a Transferer the hand-over still ends the term after the work and
// the tokens still rise, but nothing is reserved: the term is released and a
// waiter takes it. The successor's own term is never replaced (an Acquire in
// its name after the release would do that: this test caught it).
func TestHandoverFallbackWithoutTransferer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture()
		a := newElector(t, noTransfer{memstore.Open(f.backend)}, "node-a", nil, nil)
		b := newElector(t, noTransfer{memstore.Open(f.backend)}, "node-b", nil, nil)
		workA, termsA := worker(time.Second)
		workB, termsB := worker(0)
		stopA, _ := running(a, workA)
		synctest.Wait()
		stopB, _ := running(b, workB)
		time.Sleep(time.Second)
		ans := <-handoverAsync(memstore.Open(f.backend), leasehold.HandoverOptions{To: b.Identity()})
		if ans.err != nil || !ans.res.TookOver {
			t.Fatalf("Handover = %+v, %v: want node-b, the only waiter, to take over", ans.res, ans.err)
		}
		if r := f.get(t, "sweeper"); leasehold.IsReservation(r) {
			t.Fatalf("a reservation was written without a Transferer: %+v", r)
		}
		time.Sleep(time.Second)
		stopB()
		stopA()
		ga, gb := termsA(), termsB()
		if len(ga) != 1 || len(gb) != 1 || gb[0].started.Before(ga[0].returned) || gb[0].token <= ga[0].token {
			t.Fatalf("a: %+v, b: %+v: want b to start after a returned, with a higher token", ga, gb)
		}
	})
}

// Bad input is refused with what was wrong, and nothing is written.
func TestHandoverBadInput(t *testing.T) {
	st := memstore.New()
	ctx := context.Background()
	if _, err := st.Acquire(ctx, "sweeper", "node-a-1", time.Minute, ""); err != nil {
		t.Fatal(err)
	}
	long := make([]byte, store.MaxNameLen-3)
	for i := range long {
		long[i] = 'x'
	}
	for _, c := range []struct {
		name string
		opts leasehold.HandoverOptions
		want error
	}{
		{"sweeper", leasehold.HandoverOptions{To: "has space"}, store.ErrInvalid},
		{"sweeper", leasehold.HandoverOptions{To: "node-a-1"}, leasehold.ErrInvalidConfig},
		{"sweeper", leasehold.HandoverOptions{PreferFor: -time.Second}, leasehold.ErrInvalidConfig},
		{"sweeper", leasehold.HandoverOptions{Timeout: -time.Second}, leasehold.ErrInvalidConfig},
		{"nobody", leasehold.HandoverOptions{}, store.ErrNotFound},
		{string(long), leasehold.HandoverOptions{}, store.ErrInvalid},
	} {
		_, err := leasehold.Handover(ctx, st, c.name, c.opts)
		if !errors.Is(err, c.want) {
			t.Errorf("Handover(%.20q, %+v) = %v, want %v", c.name, c.opts, err, c.want)
		}
	}
	if _, err := st.Get(ctx, "sweeper.handover"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a refused hand-over wrote a request: %v", err)
	}
	if err := st.Release(ctx, store.Term{Name: "sweeper", Holder: "node-a-1", Token: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := leasehold.Handover(ctx, st, "sweeper", leasehold.HandoverOptions{}); !errors.Is(err, store.ErrNotHeld) {
		t.Errorf("Handover of a free lease = %v, want ErrNotHeld", err)
	}
}

// getCounter counts Get calls per name on a memstore handle, and says its
// watch wakes on grants (memstore's does) only if grants is set.
type getCounter struct {
	*memstore.Store
	grants bool
	mu     sync.Mutex
	gets   map[string]int
}

func (g *getCounter) Get(ctx context.Context, name string) (store.Record, error) {
	g.mu.Lock()
	g.gets[name]++
	g.mu.Unlock()
	return g.Store.Get(ctx, name)
}

func (g *getCounter) WatchesGrants() bool { return g.grants }

func (g *getCounter) count(name string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.gets[name]
}

// A leader on a store whose watch wakes on grants reads its hand-over request
// name once, when it starts leading, and then only when the watch wakes: no
// read per renew interval. The control, the same store not promising grant
// wake-ups, reads it once per renew interval. Both hand over at once.
func TestHandoverRequestReadOnlyOnWake(t *testing.T) {
	for _, grants := range []bool{true, false} {
		t.Run(fmt.Sprintf("grants=%v", grants), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := memstore.NewBackend(nil)
				st := &getCounter{Store: memstore.Open(b), grants: grants, gets: map[string]int{}}
				a := newElector(t, st, "node-a", nil, nil)
				workA, termsA := worker(0)
				stopA, _ := running(a, workA)
				synctest.Wait()
				lead := 10 * leasehold.DefaultTimings().RenewInterval
				time.Sleep(lead)
				reads := st.count("sweeper.handover")
				switch {
				case grants && reads != 1:
					t.Errorf("request name read %d times in %v of leading, want once", reads, lead)
				case !grants && reads < 10:
					t.Errorf("control: request name read %d times in %v of leading, want one per renew interval", reads, lead)
				}
				asked := time.Now()
				ans := <-handoverAsync(memstore.Open(b), leasehold.HandoverOptions{})
				if ans.err != nil {
					t.Fatalf("Handover: %v", ans.err)
				}
				stopA()
				ga := termsA()
				if len(ga) == 0 || !ga[0].stopped.Equal(asked) || !errors.Is(ga[0].cause, leasehold.ErrHandedOver) {
					t.Fatalf("node-a's first term = %+v, want cancelled with ErrHandedOver at the request", ga)
				}
			})
		})
	}
}
