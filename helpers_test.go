package leasehold_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/faultstore"
	"github.com/leasehold/leasehold/store/memstore"
)

// recorder keeps every event with the (virtual) time it happened.
type recorder struct {
	mu     sync.Mutex
	events []stamped
	hooks  []func(leasehold.Event)
}

type stamped struct {
	at time.Time
	leasehold.Event
}

func (r *recorder) on(e leasehold.Event) {
	r.mu.Lock()
	r.events = append(r.events, stamped{time.Now(), e})
	hooks := append([]func(leasehold.Event){}, r.hooks...)
	r.mu.Unlock()
	for _, h := range hooks {
		h(e)
	}
}

// hook runs f on every later event, from the goroutine that delivers it.
func (r *recorder) hook(f func(leasehold.Event)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.hooks = append(r.hooks, f)
}

func (r *recorder) of(kind leasehold.EventKind) []stamped {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []stamped
	for _, e := range r.events {
		if e.Kind == kind {
			out = append(out, e)
		}
	}
	return out
}

// leadership is what a work function saw of one term.
type leadership struct {
	token                      int64
	started, stopped, returned time.Time
	cause                      error
}

// worker returns a WorkFunc that records each term it runs for, and a way to
// read the records. hold says how long the work keeps running after its
// context is cancelled (to test draining).
func worker(hold time.Duration) (leasehold.WorkFunc, func() []leadership) {
	var mu sync.Mutex
	var terms []leadership
	work := func(ctx context.Context, l *leasehold.Lease) error {
		rec := leadership{token: l.Token(), started: time.Now()}
		<-ctx.Done()
		rec.stopped = time.Now()
		rec.cause = context.Cause(ctx)
		if hold > 0 {
			time.Sleep(hold) // virtual time: work that is slow to stop
		}
		rec.returned = time.Now()
		mu.Lock()
		terms = append(terms, rec)
		mu.Unlock()
		return nil
	}
	return work, func() []leadership {
		mu.Lock()
		defer mu.Unlock()
		return append([]leadership(nil), terms...)
	}
}

// fixture is one shared in-memory backend with a store clock the test can
// move ahead of the holders' clocks.
type fixture struct {
	backend *memstore.Backend
	skew    time.Duration // added to the store's clock
	mu      sync.Mutex
}

func newFixture() *fixture {
	f := &fixture{}
	f.backend = memstore.NewBackend(func() time.Time {
		f.mu.Lock()
		defer f.mu.Unlock()
		return time.Now().Add(f.skew)
	})
	return f
}

func (f *fixture) advanceStoreClock(d time.Duration) {
	f.mu.Lock()
	f.skew += d
	f.mu.Unlock()
}

// faulty returns a new fault-injecting handle on the backend.
func (f *fixture) faulty() *faultstore.Store { return faultstore.New(memstore.Open(f.backend)) }

func (f *fixture) get(t *testing.T, name string) store.Record {
	t.Helper()
	rec, err := memstore.Open(f.backend).Get(context.Background(), name)
	if err != nil {
		t.Fatalf("Get(%q): %v", name, err)
	}
	return rec
}

func newElector(t *testing.T, st store.Store, identity string, rec *recorder, mod func(*leasehold.Config)) *leasehold.Elector {
	t.Helper()
	cfg := leasehold.Config{Identity: identity}
	if rec != nil {
		cfg.OnEvent = rec.on
	}
	if mod != nil {
		mod(&cfg)
	}
	e, err := leasehold.NewElector(st, "sweeper", cfg)
	if err != nil {
		t.Fatalf("NewElector: %v", err)
	}
	return e
}

// running starts e.Run in a goroutine; stop cancels it and returns Run's error.
func running(e *leasehold.Elector, work leasehold.WorkFunc) (stop func() error, done <-chan error) {
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- e.Run(ctx, work) }()
	return func() error { cancel(); return <-errc }, errc
}
