package mysql_test

import (
	"database/sql"
	"errors"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/store"
	lhmysql "github.com/leasehold/leasehold/store/mysql"
)

// doorEvents records a Store's doorbell events and lets a test wait for one.
type doorEvents struct {
	mu     sync.Mutex
	counts map[string]int
	ch     chan string
}

func watchDoors(t *testing.T, s *lhmysql.Store) *doorEvents {
	t.Helper()
	e := &doorEvents{counts: map[string]int{}, ch: make(chan string, 1000)}
	if !lhmysql.SetDoorEvents(s, func(kind, name string) {
		e.mu.Lock()
		e.counts[kind]++
		e.mu.Unlock()
		select {
		case e.ch <- kind:
		default:
		}
	}) {
		t.Fatal("the store keeps no doorbells")
	}
	return e
}

func (e *doorEvents) count(kind string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.counts[kind]
}

// next waits for event kind (skipping others) for up to 10 s.
func (e *doorEvents) next(t *testing.T, who, kind string) {
	t.Helper()
	timer := time.NewTimer(10 * time.Second)
	defer timer.Stop()
	for {
		select {
		case k := <-e.ch:
			if k == kind {
				return
			}
		case <-timer.C:
			t.Fatalf("%s: no doorbell %q event within 10 s", who, kind)
		}
	}
}

// A release through one Store wakes a waiter on another at once: the
// waiter's poller is set never to poll (a WatchInterval of an hour), so
// only the doorbell can wake it. The control: the same waiter with its
// doorbells off is not woken.
func TestDoorbellWakesAWaiterOnAnotherStore(t *testing.T) {
	db := migrated(t)
	for _, tc := range []struct {
		name        string
		waiterBells int
	}{
		{"waiter with doorbells", 0},
		{"control: waiter without", -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctxFor(t)
			holder := openStore(t, db, lhmysql.Options{WatchInterval: time.Hour})
			waiter := openStore(t, db, lhmysql.Options{WatchInterval: time.Hour, Doorbells: tc.waiterBells})
			he := watchDoors(t, holder)
			bells := tc.waiterBells == 0
			var we *doorEvents
			if bells {
				we = watchDoors(t, waiter)
			}
			name := "job-" + randomSuffix()
			rec, err := holder.Acquire(ctx, name, "a", 30*time.Second, "")
			if err != nil {
				t.Fatal(err)
			}
			he.next(t, "holder", "held")
			woken, err := waiter.Watch(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			if bells {
				we.next(t, "waiter", "waiting")
			}
			if err := holder.Release(ctx, rec.Term); err != nil {
				t.Fatal(err)
			}
			wait := 10 * time.Second
			if !bells {
				wait = time.Second
			}
			timer := time.NewTimer(wait)
			defer timer.Stop()
			select {
			case <-woken:
				if !bells {
					t.Fatal("the waiter was woken with no doorbell and no poll")
				}
			case <-timer.C:
				if bells {
					t.Fatalf("the waiter was not woken within %v of the release", wait)
				}
			}
			if got := waiter.Polls(); got != 0 {
				t.Errorf("the waiter polled %d times; this test needs it not to", got)
			}
		})
	}
}

// A doorbell found open while its term is live (here: the holder's Store
// closed, its connections with it, the lease still live) is waited on
// again only after a wait that doubles each time from 5 ms, so a holder
// without a doorbell costs a few reads, not a loop of them: five such
// waits take at least 5+10+20+40+80 ms. Without the backoff, five rings
// take a few milliseconds and this fails (checked by hand).
func TestDoorbellFoundOpenBacksOff(t *testing.T) {
	db := migrated(t)
	ctx := ctxFor(t)
	holder, err := lhmysql.Open(ctx, dbConfig(t, db), lhmysql.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	he := watchDoors(t, holder)
	waiter := openStore(t, db, lhmysql.Options{WatchInterval: time.Hour})
	we := watchDoors(t, waiter)
	name := "job-" + randomSuffix()
	if _, err := holder.Acquire(ctx, name, "a", 30*time.Second, ""); err != nil {
		t.Fatal(err)
	}
	he.next(t, "holder", "held")
	if _, err := waiter.Watch(ctx, name); err != nil {
		t.Fatal(err)
	}
	we.next(t, "waiter", "waiting")
	holder.Close() // the doorbell's connection ends; the lease stays live
	we.next(t, "waiter", "quiet")
	first := time.Now()
	for range 5 {
		we.next(t, "waiter", "quiet")
	}
	if d, min := time.Since(first), 155*time.Millisecond; d < min {
		t.Errorf("five more rings of a doorbell found open took %v; want at least %v (backing off)", d, min)
	}
	if st, err := waiter.Get(ctx, name); err != nil || !st.Live() {
		t.Errorf("the lease after its holder's Store closed: %+v, %v; want it still live", st, err)
	}
}

// A Store holds at most Doorbells doorbells for the terms granted through
// it; the control holds two with a limit of two.
func TestDoorbellLimit(t *testing.T) {
	db := migrated(t)
	ctx := ctxFor(t)
	for _, limit := range []int{1, 2} {
		st := openStore(t, db, lhmysql.Options{Doorbells: limit})
		for i := range 2 {
			if _, err := st.Acquire(ctx, "limit-"+randomSuffix(), "a", 30*time.Second, ""); err != nil {
				t.Fatalf("acquire %d: %v", i, err)
			}
		}
		if got := lhmysql.HeldDoorbells(st); got != limit {
			t.Errorf("Doorbells %d, two leases held: %d doorbells held, want %d", limit, got, limit)
		}
	}
}

// Which stores keep doorbells: Open by default; NewDB (the caller's pool)
// only when asked; none with the watch off or a negative count. The URL's
// doorbells=0 turns them off, and a count that is not one is refused,
// naming the parameter.
func TestDoorbellsWhere(t *testing.T) {
	db := migrated(t)
	ctx := ctxFor(t)
	has := func(s *lhmysql.Store) bool { return lhmysql.SetDoorEvents(s, nil) }
	if !has(openStore(t, db, lhmysql.Options{})) {
		t.Error("Open: no doorbells by default")
	}
	for _, o := range []lhmysql.Options{{Doorbells: -1}, {NoWatch: true}} {
		if has(openStore(t, db, o)) {
			t.Errorf("Open with %+v keeps doorbells", o)
		}
	}
	pool := rawDB(t, db)
	for _, tc := range []struct {
		opts lhmysql.Options
		want bool
	}{{lhmysql.Options{}, false}, {lhmysql.Options{Doorbells: 2}, true}} {
		st, err := lhmysql.NewDB(ctx, pool, tc.opts)
		if err != nil {
			t.Fatal(err)
		}
		if got := has(st); got != tc.want {
			t.Errorf("NewDB with %+v: doorbells %v, want %v", tc.opts, got, tc.want)
		}
		st.Close()
	}
	for q, want := range map[string]int{"": lhmysql.DefaultDoorbells, "doorbells=0": -1, "doorbells=7": 7} {
		u, _ := url.Parse("mysql://root@127.0.0.1:3306/db?" + q)
		_, opts, _, err := lhmysql.ParseURL(u)
		if err != nil || opts.Doorbells != want {
			t.Errorf("ParseURL(%q): Doorbells %d, %v; want %d", q, opts.Doorbells, err, want)
		}
	}
	u, _ := url.Parse("mysql://root@127.0.0.1:3306/db?doorbells=many")
	if _, _, _, err := lhmysql.ParseURL(u); !errors.Is(err, store.ErrInvalid) || !strings.Contains(err.Error(), "doorbells") {
		t.Errorf("ParseURL(doorbells=many) = %v, want ErrInvalid naming doorbells", err)
	}
}

// The doorbell is a second named lock: the GET_LOCK variant's lock of the
// same lease name stays free while a lease holds its doorbell, and the
// doorbell is let go when the term is released.
func TestDoorbellIsNotTheLeasesLock(t *testing.T) {
	db := migrated(t)
	ctx := ctxFor(t)
	st := openStore(t, db, lhmysql.Options{})
	e := watchDoors(t, st)
	rec, err := st.Acquire(ctx, "job", "a", 30*time.Second, "")
	if err != nil {
		t.Fatal(err)
	}
	e.next(t, "holder", "held")
	var free sql.NullInt64
	if err := rawDB(t, db).QueryRowContext(ctx, `SELECT IS_FREE_LOCK(?)`, lhmysql.LockName(db, lhmysql.DefaultTable, "job")).Scan(&free); err != nil || free.Int64 != 1 {
		t.Fatalf("the GET_LOCK variant's lock is taken while a lease holds a doorbell: %v, %v", free, err)
	}
	if err := st.Release(ctx, rec.Term); err != nil {
		t.Fatal(err)
	}
	e.next(t, "holder", "let-go")
}

// A term renewed past its first lease keeps its doorbell: renewals move the
// doorbell's end with the term's. The control, the same term not renewed,
// lets the doorbell go once the first lease has passed on this process's
// clock.
func TestDoorbellKeptThroughRenewals(t *testing.T) {
	db := migrated(t)
	const ttl = 600 * time.Millisecond
	for _, renew := range []bool{true, false} {
		t.Run(map[bool]string{true: "renewed", false: "control: not renewed"}[renew], func(t *testing.T) {
			ctx := ctxFor(t)
			st := openStore(t, db, lhmysql.Options{WatchInterval: time.Hour})
			ev := watchDoors(t, st)
			name := "renew-" + randomSuffix()
			rec, err := st.Acquire(ctx, name, "a", ttl, "")
			if err != nil {
				t.Fatal(err)
			}
			firstEnd := time.Now().Add(ttl)
			ev.next(t, "holder", "held")
			// Renew every ttl/6 (a late renewal still has most of the
			// lease left) until three leases have passed since the grant,
			// so the term outlives its first lease twice over.
			tick := time.NewTicker(ttl / 6)
			defer tick.Stop()
			for time.Now().Before(firstEnd.Add(2 * ttl)) {
				<-tick.C
				if !renew {
					continue
				}
				if _, err := st.Renew(ctx, rec.Term, ttl); err != nil {
					t.Fatalf("renew: %v", err)
				}
			}
			held, letGo := lhmysql.HeldDoorbells(st), ev.count("let-go")
			if renew && (held != 1 || letGo != 0) {
				t.Errorf("after renewals past the first lease: %d doorbells held, %d let go; want 1 held, 0 let go", held, letGo)
			}
			if !renew && (held != 0 || letGo != 1) {
				t.Errorf("a term not renewed, two leases after its end: %d doorbells held, %d let go; want 0 held, 1 let go", held, letGo)
			}
			if renew {
				if err := st.Release(ctx, rec.Term); err != nil {
					t.Fatal(err)
				}
				ev.next(t, "holder", "let-go")
			}
		})
	}
}
