package zookeeper

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
)

// ledger records who leads, in real time, across electors in this process:
// a leader enters when its work starts and leaves when its work returns
// (its context was cancelled at its safeUntil, or it lost the term). Two
// entries at once, or a token not above the last, fail the test.
type ledger struct {
	t      *testing.T
	mu     sync.Mutex
	active map[string]int64
	last   int64
	starts map[string]int
	log    []string
}

func newLedger(t *testing.T) *ledger {
	l := &ledger{t: t, active: map[string]int64{}, starts: map[string]int{}}
	t.Cleanup(func() {
		if t.Failed() || testing.Verbose() {
			l.dump()
		}
	})
	return l
}

func (l *ledger) note(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.log = append(l.log, time.Now().Format("15:04:05.000")+" "+fmt.Sprintf(format, args...))
}

func (l *ledger) dump() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.log {
		l.t.Log(s)
	}
}

// work is the electors' guarded work: it enters the ledger, waits for its
// context, and leaves.
func (l *ledger) work(ctx context.Context, ld *leasehold.Lease) error {
	who, token := ld.Term().Holder, ld.Token()
	l.mu.Lock()
	for other, tok := range l.active {
		l.t.Errorf("TWO HOLDERS: %s leads with token %d while %s still leads with token %d", who, token, other, tok)
	}
	if token <= l.last {
		l.t.Errorf("%s leads with token %d, not above the previous %d", who, token, l.last)
	}
	l.last = token
	l.active[who] = token
	l.starts[who]++
	l.log = append(l.log, fmt.Sprintf("%s leads: %s (safe until +%v)", time.Now().Format("15:04:05.000"), ld.Term(), time.Until(ld.SafeUntil()).Round(time.Millisecond)))
	l.mu.Unlock()
	<-ctx.Done()
	l.mu.Lock()
	delete(l.active, who)
	l.log = append(l.log, fmt.Sprintf("%s steps down: %s (%v)", time.Now().Format("15:04:05.000"), ld.Term(), context.Cause(ctx)))
	l.mu.Unlock()
	return nil
}

// leading returns who leads now ("" if nobody) and its token.
func (l *ledger) leading() (string, int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for who, tok := range l.active {
		return who, tok
	}
	return "", 0
}

// elector is one leasehold elector running in the background.
type elector struct {
	st      *Store
	cancel  context.CancelFunc
	done    chan error
	mu      sync.Mutex
	renewed int
}

func (el *elector) renewals() int {
	el.mu.Lock()
	defer el.mu.Unlock()
	return el.renewed
}

// clusterTimings: a 3 s lease trusted for 2 s after each renewal was sent
// (a margin of 1 s, ten ticks of the test servers), renewed every 500 ms.
func clusterTimings() leasehold.Timings {
	return leasehold.Timings{
		LeaseDuration: 3 * time.Second,
		RenewDeadline: 2 * time.Second,
		RenewInterval: 500 * time.Millisecond,
		RetryPeriod:   250 * time.Millisecond,
	}
}

// startElector runs an elector for lease "leader" on st, its work the
// ledger's, until the test ends.
func startElector(t *testing.T, l *ledger, id string, st *Store) *elector {
	t.Helper()
	el := &elector{st: st, done: make(chan error, 1)}
	e, err := leasehold.NewElector(st, "leader", leasehold.Config{
		Identity: id, Timings: clusterTimings(),
		OnEvent: func(ev leasehold.Event) {
			switch ev.Kind {
			case leasehold.EventRenewed:
				el.mu.Lock()
				el.renewed++
				el.mu.Unlock()
			case leasehold.EventRenewFailed, leasehold.EventLost, leasehold.EventAcquired:
				l.note("%s %s %s err=%v", id, ev.Kind, ev.Term, ev.Err)
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	el.cancel = cancel
	go func() { el.done <- e.Run(ctx, l.work) }()
	t.Cleanup(el.stop)
	return el
}

func (el *elector) stop() {
	el.cancel()
	select {
	case <-el.done:
	case <-time.After(20 * time.Second):
	}
}

// waitLedger polls cond until it holds, or fails the test after d.
func waitLedger(t *testing.T, l *ledger, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(20 * time.Millisecond) // polling
	}
}
