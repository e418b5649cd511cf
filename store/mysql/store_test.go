package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/leasehold/leasehold/store"
	lhmysql "github.com/leasehold/leasehold/store/mysql"
)

// wantRefused runs q as the table's owner (root here) and wants the guard
// to refuse it (SIGNAL, error 1644) saying msg.
func wantRefused(t *testing.T, db *sql.DB, q, msg string) {
	t.Helper()
	_, err := db.ExecContext(ctxFor(t), q)
	var me *mysql.MySQLError
	if !errors.As(err, &me) || me.Number != 1644 || !strings.Contains(me.Message, msg) {
		t.Fatalf("%s: err = %v, want error 1644 saying %q", q, err, msg)
	}
}

// TestGuardAndHistory: by hand, the owner cannot delete or REPLACE lease
// rows, rename one or lower an epoch; the store's own writes pass; and the
// history tells the same story as the row. Negative control: with the
// DELETE guard dropped, the same DELETE succeeds (so the check can fail).
func TestGuardAndHistory(t *testing.T) {
	db := migrated(t)
	st := openStore(t, db, lhmysql.Options{})
	raw := rawDB(t, db)
	ctx := ctxFor(t)
	first, err := st.Acquire(ctx, "job", "node-a", time.Minute, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Release(ctx, first.Term); err != nil {
		t.Fatal(err)
	}
	held, err := st.Acquire(ctx, "job", "node-b", time.Minute, "")
	if err != nil || held.Token != 2 {
		t.Fatalf("second grant = %+v, %v; want token 2", held, err)
	}
	wantRefused(t, raw, `DELETE FROM leader_lease WHERE name = 'job'`, "never deleted")
	wantRefused(t, raw, `DELETE FROM leader_lease`, "never deleted")
	wantRefused(t, raw, `REPLACE INTO leader_lease (name, epoch) VALUES ('job', 1)`, "never deleted")
	wantRefused(t, raw, `UPDATE leader_lease SET epoch = 1 WHERE name = 'job'`, "never decreases")
	wantRefused(t, raw, `UPDATE leader_lease SET name = 'job2' WHERE name = 'job'`, "never renamed")
	if g, err := st.Get(ctx, "job"); err != nil || g.Term != held.Term || !g.Live() {
		t.Fatalf("after the refused edits Get = %+v, %v; want node-b's live term %v", g, err, held.Term)
	}
	if old, err := st.ForceRelease(ctx, "job"); err != nil || old.Term != held.Term {
		t.Fatalf("ForceRelease = %+v, %v", old, err)
	}
	third, err := st.Acquire(ctx, "job", "node-c", time.Minute, "m")
	if err != nil || third.Token != 3 || third.Metadata != "m" {
		t.Fatalf("Acquire after ForceRelease = %+v, %v; want token 3 with its metadata", third, err)
	}
	if r, err := st.Renew(ctx, third.Term, time.Minute); err != nil || r.Metadata != "m" {
		t.Fatalf("Renew = %+v, %v", r, err)
	}
	if err := st.Release(ctx, third.Term); err != nil {
		t.Fatal(err)
	}
	hist, err := st.History(ctx, "job", 10)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, h := range hist {
		got = append(got, fmt.Sprintf("%s %s %d %s", h.Event, h.Holder, h.Token, h.Metadata))
		if time.Since(h.At) > time.Hour || time.Since(h.At) < -time.Hour {
			t.Errorf("history time %v is not about now (UTC)", h.At)
		}
	}
	want := "released node-c 3 m,acquired node-c 3 m,force-released node-b 2 ,acquired node-b 2 ,released node-a 1 ,acquired node-a 1 "
	if strings.Join(got, ",") != want {
		t.Fatalf("history = %q, want %q", strings.Join(got, ","), want)
	}
	// Negative control: the check above can fail.
	mustExec(t, raw, `DROP TRIGGER leader_lease_lh_bd`)
	if _, err := raw.ExecContext(ctx, `DELETE FROM leader_lease WHERE name = 'job'`); err != nil {
		t.Fatalf("DELETE with the guard dropped: %v (the refusal above must come from the guard)", err)
	}
	// Migrate puts the guard back, and the high-water mark survived.
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	next, err := st.Acquire(ctx, "job", "node-d", time.Minute, "")
	if err != nil || next.Token != 4 {
		t.Fatalf("Acquire after the row was deleted = %+v, %v; want token 4", next, err)
	}
	wantRefused(t, raw, `DELETE FROM leader_lease WHERE name = 'job'`, "never deleted")
}

// TestRawSQLAfterLoss: after TRUNCATE (which fires no trigger), raw SQL
// that re-creates a row is lifted above the high-water mark, and a row
// restored from an old copy does not make the store grant a lower token.
func TestRawSQLAfterLoss(t *testing.T) {
	db := migrated(t)
	st := openStore(t, db, lhmysql.Options{})
	raw := rawDB(t, db)
	ctx := ctxFor(t)
	var last int64
	for range 3 {
		r, err := st.Acquire(ctx, "job", "node-a", time.Minute, "")
		if err != nil {
			t.Fatal(err)
		}
		st.Release(ctx, r.Term)
		last = r.Token
	}
	mustExec(t, raw, `TRUNCATE TABLE leader_lease`)
	mustExec(t, raw, `INSERT INTO leader_lease (name, holder, epoch, expires_at) VALUES ('job', 'raw', 1, UTC_TIMESTAMP(6) + INTERVAL 1 MINUTE)`)
	g, err := st.Get(ctx, "job")
	if err != nil || g.Token != last+1 || g.Holder != "raw" {
		t.Fatalf("a raw grant at epoch 1 after TRUNCATE shows %+v, %v; want token %d (lifted above the mark)", g, err, last+1)
	}
	mustExec(t, raw, `UPDATE leader_lease SET holder = NULL WHERE name = 'job'`)
	mustExec(t, raw, `TRUNCATE TABLE leader_lease`)
	mustExec(t, raw, `INSERT INTO leader_lease (name, epoch) VALUES ('job', 1)`) // an old copy, free
	r, err := st.Acquire(ctx, "job", "node-a", time.Minute, "meta")
	if err != nil || r.Token != last+2 || r.Metadata != "meta" {
		t.Fatalf("Acquire over a row restored at epoch 1 = %+v, %v; want token %d", r, err, last+2)
	}
	if g, _ := st.Get(ctx, "job"); g.Term != r.Term {
		t.Fatalf("the row shows %+v, the store reported %+v", g.Term, r.Term)
	}
	// The table dropped and migrated again.
	st.Release(ctx, r.Term)
	mustExec(t, raw, `DROP TABLE leader_lease`)
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	r2, err := st.Acquire(ctx, "job", "node-a", time.Minute, "")
	if err != nil || r2.Token != last+3 {
		t.Fatalf("Acquire after DROP TABLE and Migrate = %+v, %v; want token %d", r2, err, last+3)
	}
	if o, err := st.Acquire(ctx, "other", "node-a", time.Minute, ""); err != nil || o.Token != 1 {
		t.Fatalf("a name never granted = %+v, %v; want token 1", o, err)
	}
}

// TestSessionTimeZone: a store whose sessions run in another time_zone
// judges expiry exactly as one in UTC (DATETIME has no zone; the store uses
// UTC_TIMESTAMP). Negative control: NOW(6) in that session is hours off.
func TestSessionTimeZone(t *testing.T) {
	db := migrated(t)
	utc := openStore(t, db, lhmysql.Options{})
	cfg := dbConfig(t, db)
	cfg.Params = map[string]string{"time_zone": "'+09:00'"}
	tokyo, err := lhmysql.Open(ctxFor(t), cfg, lhmysql.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer tokyo.Close()
	ctx := ctxFor(t)
	r, err := utc.Acquire(ctx, "job", "node-a", 10*time.Second, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tokyo.Acquire(ctx, "job", "node-b", 10*time.Second, ""); !errors.Is(err, store.ErrHeld) {
		t.Fatalf("a +09:00 session's Acquire of a live lease: %v, want ErrHeld", err)
	}
	g, err := tokyo.Get(ctx, "job")
	if err != nil || g.Term != r.Term || g.Remaining <= 0 || g.Remaining > 10*time.Second {
		t.Fatalf("a +09:00 session's Get = %+v, %v; want the live term with about 10s left", g, err)
	}
	var skew int64
	if err := tokyo.DB().QueryRowContext(ctx, `SELECT TIMESTAMPDIFF(SECOND, UTC_TIMESTAMP(6), NOW(6))`).Scan(&skew); err != nil || skew < 8*3600 {
		t.Fatalf("NOW(6) - UTC_TIMESTAMP(6) in the +09:00 session = %ds, %v; the control needs it to be 9 h", skew, err)
	}
}

// TestPollWaitsAreJittered: the poller's waits spread over [½, 1½) ×
// WatchInterval, so that the polls of Stores in different processes do not
// keep one phase against each other (with a fixed tick, the Store whose
// tick falls just after another's learns of a release first only within
// the sliver between them, every time, and its waiters starve).
func TestPollWaitsAreJittered(t *testing.T) {
	const d = 25 * time.Millisecond
	lo, hi := time.Duration(1<<62), time.Duration(0)
	var sum time.Duration
	const n = 10000
	for range n {
		w := lhmysql.Jitter(d)
		if w < d/2 || w >= d*3/2 {
			t.Fatalf("wait %v for interval %v, want within [%v, %v)", w, d, d/2, d*3/2)
		}
		lo, hi, sum = min(lo, w), max(hi, w), sum+w
	}
	if lo > d*6/10 || hi < d*14/10 {
		t.Errorf("waits spread over [%v, %v] in %d draws, want nearly [%v, %v)", lo, hi, n, d/2, d*3/2)
	}
	if mean := sum / n; mean < d*95/100 || mean > d*105/100 {
		t.Errorf("mean wait %v, want about the interval %v", mean, d)
	}
}

// TestPollerDrawsItsWaits: the poller draws every wait between two polls
// (the draw is Jitter's, above) for the Store's WatchInterval, rather than
// keeping a fixed tick. The draws are counted through a stand-in that
// returns the interval; the control is the count itself: a poller that
// drew once and then ticked would stop at one.
func TestPollerDrawsItsWaits(t *testing.T) {
	db := migrated(t)
	const every = 5 * time.Millisecond
	st := openStore(t, db, lhmysql.Options{WatchInterval: every})
	draws := make(chan time.Duration, 100)
	lhmysql.SetPollWait(st, func(d time.Duration) time.Duration {
		select {
		case draws <- d:
		default:
		}
		return d
	})
	ctx, cancel := context.WithTimeout(ctxFor(t), 10*time.Second)
	defer cancel()
	if _, err := st.Watch(ctx, "job"); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		select {
		case d := <-draws:
			if d != every {
				t.Fatalf("draw %d was for %v, want the WatchInterval %v", i, d, every)
			}
		case <-ctx.Done():
			t.Fatalf("the poller drew %d waits, want a draw before every poll", i)
		}
	}
}

// TestWatchLag: the store tells a Lock how late a waiter elsewhere may
// learn of a release (the longest jittered wait between two polls), and
// nothing with the watch off.
func TestWatchLag(t *testing.T) {
	db := migrated(t)
	var st store.Store = openStore(t, db, lhmysql.Options{WatchInterval: 10 * time.Millisecond})
	wl, ok := st.(store.WatchLagger)
	if !ok {
		t.Fatal("*mysql.Store is not a store.WatchLagger")
	}
	if got := wl.WatchLag(); got != 15*time.Millisecond {
		t.Errorf("WatchLag with a 10ms interval = %v, want 15ms", got)
	}
	if got := openStore(t, db, lhmysql.Options{NoWatch: true}).WatchLag(); got != 0 {
		t.Errorf("WatchLag with the watch off = %v, want 0", got)
	}
}
