package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/memstore"
)

// TestTermsOf: how the timeline tells how each term ended, from the store's
// history (newest first) and the current record.
func TestTermsOf(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	e := func(sec int, event, holder string, token int64) store.HistoryEntry {
		return store.HistoryEntry{Term: store.Term{Name: "x", Holder: holder, Token: token}, Event: event, At: t0.Add(time.Duration(sec) * time.Second)}
	}
	live := func(holder string, token int64) store.Record {
		return store.Record{Term: store.Term{Name: "x", Holder: holder, Token: token}, Remaining: time.Second}
	}
	cases := []struct {
		name    string
		entries []store.HistoryEntry // newest first
		cur     store.Record
		want    string
	}{
		{"released then taken", []store.HistoryEntry{e(3, "acquired", "b", 2), e(2, "released", "a", 1), e(1, "acquired", "a", 1)}, live("b", 2),
			"2 b holding from 3; 1 a released from 1 to 2"},
		{"expired takeover", []store.HistoryEntry{e(9, "expired-takeover", "b", 2), e(1, "acquired", "a", 1)}, live("b", 2),
			"2 b holding from 9; 1 a expired from 1 to 9"},
		{"same holder again", []store.HistoryEntry{e(4, "acquired", "a", 2), e(1, "acquired", "a", 1)}, live("a", 2),
			"2 a holding from 4; 1 a replaced from 1 to 4"},
		{"force-released, nobody since", []store.HistoryEntry{e(5, "force-released", "a", 1), e(1, "acquired", "a", 1)}, store.Record{Term: store.Term{Name: "x", Token: 1}},
			"1 a force-released from 1 to 5"},
		{"expired, nobody took over", []store.HistoryEntry{e(1, "acquired", "a", 1)}, store.Record{Term: store.Term{Name: "x", Holder: "a", Token: 1}, Remaining: -time.Second},
			"1 a expired from 1"},
		{"history begins mid-term", []store.HistoryEntry{e(2, "released", "a", 7)}, store.Record{Term: store.Term{Name: "x", Token: 7}},
			"7 a released from ? to 2"},
		{"no record", []store.HistoryEntry{e(1, "acquired", "a", 1)}, store.Record{},
			"1 a unknown from 1"},
	}
	for _, c := range cases {
		got := ""
		for i, tv := range termsOf(c.entries, c.cur) {
			if i > 0 {
				got += "; "
			}
			got += fmt.Sprintf("%d %s %s from %s", tv.Token, tv.Holder, tv.End, sec(t0, tv.Started))
			if tv.Ended != nil {
				got += " to " + sec(t0, tv.Ended)
			}
		}
		want := c.want
		if got != want {
			t.Errorf("%s:\n got  %s\n want %s", c.name, got, want)
		}
	}
}

func sec(t0 time.Time, t *time.Time) string {
	if t == nil {
		return "?"
	}
	return fmt.Sprint(int(t.Sub(t0) / time.Second))
}

// noWatch hides a store's Watcher (and its Lister, which the page needs
// only without names).
type noWatch struct{ st store.Store }

func (n noWatch) Acquire(ctx context.Context, name, holder string, ttl time.Duration, md string) (store.Record, error) {
	return n.st.Acquire(ctx, name, holder, ttl, md)
}
func (n noWatch) Renew(ctx context.Context, t store.Term, ttl time.Duration) (store.Record, error) {
	return n.st.Renew(ctx, t, ttl)
}
func (n noWatch) Release(ctx context.Context, t store.Term) error { return n.st.Release(ctx, t) }
func (n noWatch) Get(ctx context.Context, name string) (store.Record, error) {
	return n.st.Get(ctx, name)
}
func (n noWatch) Close() error { return n.st.Close() }

// TestStatusPageWatches: with a store that watches, a change of hands
// reaches the page at once, though the page reads only every hour; without
// the watch (the control) it does not.
func TestStatusPageWatches(t *testing.T) {
	for _, watch := range []bool{true, false} {
		t.Run(fmt.Sprintf("watch=%v", watch), func(t *testing.T) {
			ms := memstore.New()
			var st store.Store = ms
			if !watch {
				st = noWatch{ms}
			}
			ctx, cancel := context.WithCancel(context.Background())
			rec, err := ms.Acquire(ctx, "job", "alpha", time.Minute, "")
			if err != nil {
				t.Fatal(err)
			}
			page, err := newStatusPage(st, "mem", []string{"job"}, time.Hour, 5*time.Second, 10)
			if err != nil {
				t.Fatal(err)
			}
			leave := page.view() // an open page: the refresher reads
			defer leave()
			done := make(chan struct{})
			go func() {
				defer close(done)
				page.run(ctx)
			}()
			defer func() {
				cancel()
				<-done
			}()
			holder := func() string {
				snap, _ := page.current()
				var s pageSnapshot
				json.Unmarshal(snap, &s)
				if len(s.Leases) != 1 {
					return ""
				}
				return s.Leases[0].Holder
			}
			waitFor(t, 10*time.Second, func() bool { return holder() == "alpha" })
			_, changed := page.current()
			if err := ms.Release(ctx, rec.Term); err != nil {
				t.Fatal(err)
			}
			if _, err := ms.Acquire(ctx, "job", "beta", time.Minute, ""); err != nil {
				t.Fatal(err)
			}
			timer := time.NewTimer(5 * time.Second)
			defer timer.Stop()
			select {
			case <-changed:
				if !watch {
					t.Fatalf("a page without a watch read again before its interval")
				}
				waitFor(t, 10*time.Second, func() bool { return holder() == "beta" })
			case <-timer.C:
				if watch {
					t.Fatalf("the page did not see the hand-over within 5s; holder %q", holder())
				}
			}
		})
	}
}

func waitFor(t *testing.T, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v", timeout)
		}
		tm := time.NewTimer(5 * time.Millisecond)
		<-tm.C
	}
}

// countGets counts the Get calls of a store.
type countGets struct {
	noWatch
	gets atomic.Int64
}

func (c *countGets) Get(ctx context.Context, name string) (store.Record, error) {
	c.gets.Add(1)
	return c.noWatch.Get(ctx, name)
}

// TestStatusPageIdle: the page reads the store only while someone looks, so
// a `run --http` nobody opens adds no load; a viewer starts the readings
// (the control) and they stop when it leaves.
func TestStatusPageIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &countGets{noWatch: noWatch{memstore.New()}}
		page, err := newStatusPage(st, "mem", []string{"job"}, 10*time.Millisecond, time.Second, 10)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			page.run(ctx)
		}()
		time.Sleep(time.Second) // virtual time: 100 intervals
		synctest.Wait()
		if n := st.gets.Load(); n != 0 {
			t.Errorf("%d reads with nobody looking, want 0", n)
		}
		leave := page.view()
		time.Sleep(time.Second)
		synctest.Wait()
		if n := st.gets.Load(); n < 50 {
			t.Errorf("%d reads in 1s with a viewer at a 10ms interval, want about 100", n)
		}
		leave()
		time.Sleep(100 * time.Millisecond) // the wait in progress ends
		synctest.Wait()
		before := st.gets.Load()
		time.Sleep(time.Second)
		synctest.Wait()
		if n := st.gets.Load() - before; n != 0 {
			t.Errorf("%d reads after the viewer left, want 0", n)
		}
		cancel()
		<-done
	})
}
