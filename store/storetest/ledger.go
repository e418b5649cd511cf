package storetest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store"
)

// Ledger records who leads, in real time, across the electors of one test
// process, for a store's cluster and fault tests: a leader enters when its
// guarded work starts and leaves when its work returns (its context was
// cancelled at its safeUntil, or it lost the term). A leader that enters
// while another is inside ("TWO HOLDERS"), or with a token not above the
// last one that entered, fails the test. Pass Work to Elector.Run.
//
// The ledger keeps a timestamped log (entries, exits, and the test's own
// Note lines); it goes to the test's log when the test fails or runs with
// -v. It is safe for concurrent use.
type Ledger struct {
	errorf func(format string, args ...any)
	logf   func(format string, args ...any)

	mu     sync.Mutex
	active map[string]int64 // who is inside Work, with its token
	last   int64            // the last token that entered
	terms  int              // how many terms entered
	log    []string
}

// NewLedger returns an empty ledger that reports to t.
func NewLedger(t testing.TB) *Ledger {
	l := newLedger(t.Errorf, t.Logf)
	t.Cleanup(func() {
		if t.Failed() || testing.Verbose() {
			l.dump()
		}
	})
	return l
}

func newLedger(errorf, logf func(string, ...any)) *Ledger {
	return &Ledger{errorf: errorf, logf: logf, active: map[string]int64{}}
}

// Work is an elector's guarded work: it enters the ledger (checking that
// nobody else leads and that the token rises), waits for its context, and
// leaves.
func (l *Ledger) Work(ctx context.Context, ld *leasehold.Lease) error {
	l.enter(ld.Term().Holder, ld.Token(), fmt.Sprintf("%s (safe until +%v)", ld.Term(), time.Until(ld.SafeUntil()).Round(time.Millisecond)))
	<-ctx.Done()
	l.leave(ld.Term().Holder, fmt.Sprintf("%s (%v)", ld.Term(), context.Cause(ctx)))
	return nil
}

func (l *Ledger) enter(who string, token int64, what string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for other, tok := range l.active {
		l.errorf("TWO HOLDERS: %s leads with token %d while %s still leads with token %d", who, token, other, tok)
	}
	if token <= l.last {
		l.errorf("%s leads with token %d, not above the previous %d", who, token, l.last)
	}
	l.last = token
	l.terms++
	l.active[who] = token
	l.log = append(l.log, time.Now().Format("15:04:05.000")+" leads: "+what)
}

func (l *Ledger) leave(who, what string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.active, who)
	l.log = append(l.log, time.Now().Format("15:04:05.000")+" steps down: "+what)
}

// Note adds a line to the ledger's log.
func (l *Ledger) Note(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.log = append(l.log, time.Now().Format("15:04:05.000")+" "+fmt.Sprintf(format, args...))
}

// Leading returns who leads now ("" if nobody) and its token.
func (l *Ledger) Leading() (string, int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for who, tok := range l.active {
		return who, tok
	}
	return "", 0
}

// Terms returns how many terms have entered the ledger.
func (l *Ledger) Terms() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.terms
}

func (l *Ledger) dump() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.log {
		l.logf("%s", s)
	}
}

// WaitFor polls cond (every 20 ms: a real store's state, not a sleep as
// synchronisation) until it holds, or fails the test after d, saying what
// did not happen.
func WaitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(20 * time.Millisecond) // polling
	}
}

// Elector is one leasehold elector the ledger started (Ledger.Start),
// running in the background until the test ends.
type Elector struct {
	cancel  context.CancelFunc
	done    chan error
	mu      sync.Mutex
	renewed int
}

// Start runs an elector for lease "leader" on st with identity id and the
// given timings, its work Work, until the test ends (or Stop). Its
// acquisitions, failed renewals and losses go to the ledger's log; its
// successful renewals are counted (Renewals).
func (l *Ledger) Start(t testing.TB, st store.Store, id string, timings leasehold.Timings) *Elector {
	t.Helper()
	el := &Elector{done: make(chan error, 1)}
	e, err := leasehold.NewElector(st, "leader", leasehold.Config{
		Identity: id, Timings: timings,
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
	t.Cleanup(el.Stop)
	return el
}

// Renewals is how many renewals of the elector have succeeded.
func (el *Elector) Renewals() int {
	el.mu.Lock()
	defer el.mu.Unlock()
	return el.renewed
}

// Stop stops the elector and waits (up to 20 s) for its Run to return.
func (el *Elector) Stop() {
	el.cancel()
	select {
	case <-el.done:
	case <-time.After(20 * time.Second):
	}
}
