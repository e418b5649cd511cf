package etcd

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store"
)

// These tests run etcd's own concurrency package (what `etcdctl lock` and
// `etcdctl elect` use) against leasehold on one name.

func newSession(t *testing.T, cli *clientv3.Client, ttl int) *concurrency.Session {
	t.Helper()
	s, err := concurrency.NewSession(cli, concurrency.WithTTL(ttl))
	if err != nil {
		t.Fatalf("etcd session: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func lockTimings() leasehold.Timings {
	return leasehold.Timings{LeaseDuration: 6 * time.Second}
}

// waitDone waits for ch with a deadline.
func waitDone[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: not within 20s", what)
		panic("unreachable")
	}
}

// TestInteropMutex: an etcd Mutex and a leasehold Lock on one name exclude
// each other in both directions, and each waiter gets the lock when the
// other side unlocks.
func TestInteropMutex(t *testing.T) {
	m := shared(t)
	prefix := uniquePrefix("mutex")
	st := openStore(t, prefix, m.clientURL)
	cli := newClient(t, m.clientURL)
	ctx := testCtx(t, 60*time.Second)
	mu := concurrency.NewMutex(newSession(t, cli, 10), st.ContenderPrefix("job"))
	lk, err := leasehold.NewLock(st, "job", leasehold.Config{Identity: "lh", Timings: lockTimings()})
	if err != nil {
		t.Fatal(err)
	}

	// etcd Mutex first: leasehold is refused and sees who holds.
	if err := mu.Lock(ctx); err != nil {
		t.Fatalf("Mutex.Lock: %v", err)
	}
	mutexKey := mu.Key()
	wantHolder := "etcd:" + strings.TrimPrefix(mutexKey, st.ContenderPrefix("job")+"/")
	_, err = lk.TryAcquire(ctx)
	var he *leasehold.HeldError
	if !errors.As(err, &he) || !errors.Is(err, store.ErrHeld) {
		t.Fatalf("leasehold TryAcquire while an etcd Mutex holds: %v, want a HeldError", err)
	}
	if he.Record.Holder != wantHolder || !he.Record.Live() {
		t.Fatalf("held record %+v, want holder %s, live", he.Record, wantHolder)
	}
	gr, err := cli.Get(ctx, mutexKey)
	if err != nil || len(gr.Kvs) != 1 || he.Record.Token != gr.Kvs[0].CreateRevision {
		t.Fatalf("held record token %d, want the Mutex key's create revision (%v, %v)", he.Record.Token, gr, err)
	}
	// A waiting leasehold Lock gets it once the Mutex unlocks, not before.
	var unlocked atomic.Bool
	got := make(chan *leasehold.Lease, 1)
	go func() {
		h, err := lk.Acquire(ctx)
		if err != nil {
			t.Errorf("leasehold Acquire: %v", err)
		}
		if !unlocked.Load() {
			t.Errorf("leasehold acquired while the etcd Mutex held the lock")
		}
		got <- h
	}()
	waitContenders(t, st, "job", 1) // leasehold does not queue: only the Mutex key is there
	unlocked.Store(true)
	if err := mu.Unlock(ctx); err != nil {
		t.Fatalf("Mutex.Unlock: %v", err)
	}
	held := waitDone(t, got, "leasehold Acquire after Mutex.Unlock")
	if held == nil {
		t.FailNow()
	}
	if held.Token() <= gr.Kvs[0].CreateRevision {
		t.Fatalf("leasehold token %d not above the Mutex's %d", held.Token(), gr.Kvs[0].CreateRevision)
	}

	// leasehold first: the Mutex is refused, and waits until leasehold releases.
	mu2 := concurrency.NewMutex(newSession(t, cli, 10), st.ContenderPrefix("job"))
	if err := mu2.TryLock(ctx); !errors.Is(err, concurrency.ErrLocked) {
		t.Fatalf("Mutex.TryLock while leasehold holds: %v, want ErrLocked", err)
	}
	var released atomic.Bool
	locked := make(chan error, 1)
	go func() {
		err := mu2.Lock(ctx)
		if err == nil && !released.Load() {
			t.Errorf("etcd Mutex locked while leasehold held the lock")
		}
		locked <- err
	}()
	waitContenders(t, st, "job", 2) // the Mutex queued its key behind leasehold's
	// While the Mutex waits, a leasehold TryAcquire by another holder is refused.
	if _, err := lk.TryAcquire(ctx); !errors.Is(err, store.ErrHeld) {
		t.Fatalf("second leasehold TryAcquire while leasehold holds: %v, want ErrHeld", err)
	}
	released.Store(true)
	if err := held.Release(ctx); err != nil {
		t.Fatalf("leasehold Release: %v", err)
	}
	if err := waitDone(t, locked, "Mutex.Lock after leasehold released"); err != nil {
		t.Fatalf("Mutex.Lock: %v", err)
	}
	r, err := st.Get(ctx, "job")
	if err != nil || !r.Live() || !strings.HasPrefix(r.Holder, "etcd:") || r.Token <= held.Token() {
		t.Fatalf("Get while the second Mutex holds = %+v, %v; want a live etcd: holder above token %d", r, err, held.Token())
	}
	if err := mu2.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// waitContenders polls until the name's contender prefix holds n keys.
func waitContenders(t *testing.T, st *Store, name string, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := st.Client().Get(context.Background(), st.ContenderPrefix(name)+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		if resp.Count == int64(n) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d contender keys under %q, want %d", resp.Count, name, n)
		}
		time.Sleep(5 * time.Millisecond) // polling a real server's state
	}
}

// TestInteropElection: etcd's Election (etcdctl elect) and a leasehold
// Elector on one name. The Election's observers see the leasehold leader's
// identity as the proposal.
func TestInteropElection(t *testing.T) {
	m := shared(t)
	prefix := uniquePrefix("elect")
	st := openStore(t, prefix, m.clientURL)
	cli := newClient(t, m.clientURL)
	ctx := testCtx(t, 60*time.Second)
	el := concurrency.NewElection(newSession(t, cli, 10), st.ContenderPrefix("svc"))
	if err := el.Campaign(ctx, "etcd-leader"); err != nil {
		t.Fatalf("Campaign: %v", err)
	}

	var leading atomic.Bool // the etcd Election leads
	leading.Store(true)
	e, err := leasehold.NewElector(st, "svc", leasehold.Config{Identity: "lh", Timings: lockTimings()})
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan int64, 1)
	stop := make(chan struct{})
	runErr := make(chan error, 1)
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		runErr <- e.Run(rctx, func(ctx context.Context, l *leasehold.Lease) error {
			if leading.Load() {
				t.Errorf("leasehold elector leads while the etcd Election leads")
			}
			started <- l.Token()
			select {
			case <-stop:
			case <-ctx.Done():
			}
			return nil
		})
	}()
	// The elector sees the etcd leader.
	deadline := time.Now().Add(20 * time.Second)
	for {
		r, err := e.Holder(ctx)
		if err == nil && r.Live() && r.Metadata == "etcd-leader" && strings.HasPrefix(r.Holder, "etcd:") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("leasehold does not see the etcd leader: %+v, %v", r, err)
		}
		time.Sleep(10 * time.Millisecond) // polling a real server's state
	}
	leading.Store(false)
	if err := el.Resign(ctx); err != nil {
		t.Fatalf("Resign: %v", err)
	}
	token := waitDone(t, started, "leasehold leads after Resign")

	// etcd's observers see leasehold's identity as the leader's proposal.
	lr, err := el.Leader(ctx)
	if err != nil || len(lr.Kvs) != 1 || string(lr.Kvs[0].Value) != e.Identity() || lr.Kvs[0].CreateRevision != token {
		t.Fatalf("Election.Leader while leasehold leads = %v, %v; want value %q at create revision %d", lr, err, e.Identity(), token)
	}

	// A new campaign waits until leasehold steps down.
	el2 := concurrency.NewElection(newSession(t, cli, 10), st.ContenderPrefix("svc"))
	var stepped atomic.Bool
	campaigned := make(chan error, 1)
	go func() {
		err := el2.Campaign(ctx, "etcd-again")
		if err == nil && !stepped.Load() {
			t.Errorf("etcd Campaign won while leasehold led")
		}
		campaigned <- err
	}()
	waitContenders(t, st, "svc", 2)
	stepped.Store(true)
	cancel() // the elector stops: its work returns, then it releases
	if err := waitDone(t, runErr, "elector Run to return"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v, want context.Canceled", err)
	}
	if err := waitDone(t, campaigned, "Campaign after leasehold stepped down"); err != nil {
		t.Fatalf("Campaign: %v", err)
	}
	if err := el2.Resign(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestInteropNeverTwoHolders: etcd Mutexes, an etcd Election and leasehold
// Locks hammer one name; an in-process counter checks that no two of them
// are ever in the critical section together, that tokens (a Mutex's and an
// Election's: their key's create revision) rise from one holder to the
// next, and each holder's fenced write inside etcd must apply. The fair
// case's leasehold Locks wait in etcd's queue (Config.Fair).
func TestInteropNeverTwoHolders(t *testing.T) {
	for _, fair := range []bool{false, true} {
		t.Run(map[bool]string{false: "default", true: "fair"}[fair], func(t *testing.T) { neverTwoHolders(t, fair) })
	}
}

func neverTwoHolders(t *testing.T, fair bool) {
	m := shared(t)
	prefix := uniquePrefix("excl")
	ctx := testCtx(t, 90*time.Second)
	const rounds = 15
	var inside atomic.Int32
	var entries atomic.Int32
	var lastToken atomic.Int64
	cs := func(who string, token int64, fenced func() (bool, error)) {
		if n := inside.Add(1); n != 1 {
			t.Errorf("%s entered the critical section with %d others inside", who, n-1)
		}
		entries.Add(1)
		if prev := lastToken.Swap(token); token <= prev {
			t.Errorf("%s holds with token %d after a holder with token %d", who, token, prev)
		}
		ok, err := fenced()
		if err != nil || !ok {
			t.Errorf("%s: fenced write inside etcd: applied=%v err=%v", who, ok, err)
		}
		inside.Add(-1)
	}
	var wg sync.WaitGroup
	// leasehold Locks.
	for i := 0; i < 2; i++ {
		st := openStore(t, prefix, m.clientURL)
		lk, err := leasehold.NewLock(st, "hot", leasehold.Config{Identity: fmt.Sprintf("lh%d", i), Timings: lockTimings(), Fair: fair})
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; r < rounds; r++ {
				h, err := lk.Acquire(ctx)
				if err != nil {
					t.Errorf("leasehold Acquire: %v", err)
					return
				}
				cs(h.Term().Holder, h.Token(), func() (bool, error) {
					cmp, err := st.Fence(h.Context(), h.Term())
					if err != nil {
						return false, err
					}
					resp, err := st.Client().Txn(h.Context()).If(fenceCmp(cmp)).Then(clientv3.OpPut(prefix+"data", h.Term().Holder)).Commit()
					return err == nil && resp.Succeeded, err
				})
				if err := h.Release(ctx); err != nil {
					t.Errorf("leasehold Release: %v", err)
				}
			}
		}()
	}
	// etcd Mutexes, each with its own client and session, like separate processes.
	for i := 0; i < 2; i++ {
		cli := newClient(t, m.clientURL)
		sess := newSession(t, cli, 10)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; r < rounds; r++ {
				mu := concurrency.NewMutex(sess, prefix+"hot")
				if err := mu.Lock(ctx); err != nil {
					t.Errorf("Mutex.Lock: %v", err)
					return
				}
				rev := createRev(ctx, cli, mu.Key())
				cs("mutex "+mu.Key(), rev, func() (bool, error) {
					resp, err := cli.Txn(ctx).If(mu.IsOwner()).Then(clientv3.OpPut(prefix+"data", mu.Key())).Commit()
					return err == nil && resp.Succeeded, err
				})
				if err := mu.Unlock(ctx); err != nil {
					t.Errorf("Mutex.Unlock: %v", err)
				}
			}
		}()
	}
	// An etcd Election.
	{
		cli := newClient(t, m.clientURL)
		sess := newSession(t, cli, 10)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; r < rounds; r++ {
				el := concurrency.NewElection(sess, prefix+"hot")
				if err := el.Campaign(ctx, "elect-"+strconv.Itoa(r)); err != nil {
					t.Errorf("Campaign: %v", err)
					return
				}
				cs("election "+el.Key(), el.Rev(), func() (bool, error) {
					resp, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(el.Key()), "=", el.Rev())).
						Then(clientv3.OpPut(prefix+"data", el.Key())).Commit()
					return err == nil && resp.Succeeded, err
				})
				if err := el.Resign(ctx); err != nil {
					t.Errorf("Resign: %v", err)
				}
			}
		}()
	}
	wg.Wait()
	if got, want := entries.Load(), int32(5*rounds); got != want {
		t.Fatalf("%d critical sections ran, want %d", got, want)
	}
}

func createRev(ctx context.Context, cli *clientv3.Client, key string) int64 {
	resp, err := cli.Get(ctx, key)
	if err != nil || len(resp.Kvs) == 0 {
		return -1
	}
	return resp.Kvs[0].CreateRevision
}

// TestInteropFairQueue: a fair leasehold Lock and an etcd Mutex share etcd's
// queue on one name, in both orders: whoever queued first behind the
// holder gets the lock first, and they never hold together. The negative
// control: a Lock without Fair, which writes no place, waits first and
// still gets the lock second (the order check can fail).
func TestInteropFairQueue(t *testing.T) {
	for _, c := range []struct {
		name          string
		leaseholdWait bool // the leasehold Lock starts waiting before the Mutex
		fair          bool
		want          string
	}{
		{"leasehold first", true, true, "leasehold"},
		{"mutex first", false, true, "mutex"},
		{"leasehold first, not fair (control)", true, false, "mutex"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := fairInteropOrder(t, c.leaseholdWait, c.fair); got != c.want {
				t.Fatalf("%s got the lock first, want %s", got, c.want)
			}
		})
	}
}

// fairInteropOrder: a leasehold term holds "job"; a leasehold Lock and an
// etcd Mutex start waiting, in the order given; the term is released. It
// returns who got the lock first, after checking the tokens and that the
// second got it only once the first let go.
func fairInteropOrder(t *testing.T, leaseholdFirst, fair bool) string {
	m := shared(t)
	prefix := uniquePrefix("fairq")
	st, holderSt := openStore(t, prefix, m.clientURL), openStore(t, prefix, m.clientURL)
	cli := newClient(t, m.clientURL)
	ctx := testCtx(t, 60*time.Second)
	h, err := holderSt.Acquire(ctx, "job", "h", 10*time.Second, "")
	if err != nil {
		t.Fatal(err)
	}
	refused := make(chan struct{})
	var once sync.Once
	lk, err := leasehold.NewLock(st, "job", leasehold.Config{Identity: "w", Timings: lockTimings(), Fair: fair,
		OnEvent: func(ev leasehold.Event) {
			if ev.Kind == leasehold.EventAcquireAttempt && errors.Is(ev.Err, store.ErrHeld) {
				once.Do(func() { close(refused) })
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	mu := concurrency.NewMutex(newSession(t, cli, 10), st.ContenderPrefix("job"))

	var inside atomic.Int32
	type turn struct {
		who   string
		token int64
	}
	got := make(chan turn, 2)
	letGo := map[string]chan struct{}{"leasehold": make(chan struct{}), "mutex": make(chan struct{})}
	enter := func(who string, token int64) {
		if n := inside.Add(1); n != 1 {
			t.Errorf("%s holds the lock with %d others", who, n-1)
		}
		got <- turn{who, token}
		<-letGo[who]
		inside.Add(-1)
	}
	var wg sync.WaitGroup
	startLeasehold := func() {
		n := contenders(t, st, "job")
		wg.Go(func() {
			l, err := lk.Acquire(ctx)
			if err != nil {
				t.Errorf("leasehold Acquire: %v", err)
				return
			}
			enter("leasehold", l.Token())
			if err := l.Release(ctx); err != nil {
				t.Errorf("leasehold Release: %v", err)
			}
		})
		if fair {
			waitContenders(t, st, "job", n+1) // its place
		} else {
			<-refused // it waits, with no key of its own
		}
	}
	startMutex := func() {
		n := contenders(t, st, "job")
		wg.Go(func() {
			if err := mu.Lock(ctx); err != nil {
				t.Errorf("Mutex.Lock: %v", err)
				return
			}
			enter("mutex", createRev(ctx, cli, mu.Key()))
			if err := mu.Unlock(ctx); err != nil {
				t.Errorf("Mutex.Unlock: %v", err)
			}
		})
		waitContenders(t, st, "job", n+1)
	}
	if leaseholdFirst {
		startLeasehold()
		startMutex()
	} else {
		startMutex()
		startLeasehold()
	}
	if fair {
		// The leasehold waiter's place ranks in etcd's queue: while it is
		// behind another key, its holder's Acquire is refused.
		if _, err := st.Acquire(ctx, "job", "w", 10*time.Second, ""); !errors.Is(err, store.ErrHeld) {
			t.Fatalf("Acquire by the queued holder while h holds: %v, want ErrHeld", err)
		}
	}
	if err := holderSt.Release(ctx, h.Term); err != nil {
		t.Fatal(err)
	}
	first := waitDone(t, got, "the first waiter to get the lock")
	if first.token <= h.Token {
		t.Errorf("%s's token %d is not above the released term's %d", first.who, first.token, h.Token)
	}
	r, err := st.Get(ctx, "job")
	if err != nil || !r.Live() || r.Token != first.token {
		t.Errorf("Get while %s holds: %+v, %v; want a live term with token %d", first.who, r, err, first.token)
	}
	if fair && first.who == "mutex" {
		// The place behind the Mutex cannot take the lease.
		if _, err := st.Acquire(ctx, "job", "w", 10*time.Second, ""); !errors.Is(err, store.ErrHeld) {
			t.Errorf("Acquire by the queued holder while the Mutex holds: %v, want ErrHeld", err)
		}
	}
	select {
	case second := <-got:
		t.Fatalf("%s got the lock while %s held it", second.who, first.who)
	default:
	}
	close(letGo[first.who])
	second := waitDone(t, got, "the second waiter to get the lock")
	if second.token <= first.token {
		t.Errorf("%s's token %d is not above %s's %d", second.who, second.token, first.who, first.token)
	}
	close(letGo[second.who])
	wg.Wait()
	if fair {
		if n := contenders(t, st, "job"); n != 0 {
			t.Errorf("%d contender keys left, want none", n)
		}
	}
	return first.who
}

// contenders counts the keys under name's contender prefix.
func contenders(t *testing.T, st *Store, name string) int {
	t.Helper()
	resp, err := st.Client().Get(context.Background(), st.ContenderPrefix(name)+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return int(resp.Count)
}
