package postgres_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/postgres"
)

// waitBlocked polls until a backend of the test database waits on a lock
// while running a statement on schema's table.
func waitBlocked(t *testing.T, conn *pgx.Conn, schema string) {
	t.Helper()
	waitFor(t, "a statement blocked on the row lock", func() bool {
		var n int
		err := conn.QueryRow(ctxFor(t), `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND state = 'active' AND query LIKE '%' || $1 || '%'`, schema).Scan(&n)
		return err == nil && n > 0
	})
}

// TestSerializationFailureRetried makes a renewal and an acquire wait on a
// row lock held by a raw transaction that then commits a change to the row.
// Under REPEATABLE READ and SERIALIZABLE the waiting statement fails with a
// serialization failure (SQLSTATE 40001); the store must send it again and
// succeed, not report the lease as lost. Under READ COMMITTED it succeeds
// without a retry.
func TestSerializationFailureRetried(t *testing.T) {
	for _, level := range []string{"read committed", "repeatable read", "serializable"} {
		t.Run(level, func(t *testing.T) {
			schema := migrated(t)
			st, err := postgres.Open(ctxFor(t), withParams(t, testDSN(t), "pool_max_conns", "2", "default_transaction_isolation", level), postgres.Options{Schema: schema})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			ctx := ctxFor(t)
			held, err := st.Acquire(ctx, "job", "node-a", time.Minute, "m")
			if err != nil {
				t.Fatal(err)
			}
			raw := adminConn(t)
			watcher := adminConn(t)

			// lockRow starts a raw transaction that rewrites the row (no
			// visible change) and holds its lock until commit is called.
			lockRow := func() (commit func()) {
				tx, err := raw.Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := tx.Exec(ctx, `UPDATE `+schema+`.leader_lease SET expires_at = expires_at WHERE name = 'job'`); err != nil {
					t.Fatal(err)
				}
				return func() {
					if err := tx.Commit(ctx); err != nil {
						t.Fatal(err)
					}
				}
			}

			before := postgres.Retries()
			commit := lockRow()
			renewed := make(chan error, 1)
			go func() {
				_, err := st.Renew(ctx, held.Term, 2*time.Minute)
				renewed <- err
			}()
			waitBlocked(t, watcher, schema)
			commit()
			if err := <-renewed; err != nil {
				t.Fatalf("Renew that raced a concurrent update under %s: %v", level, err)
			}
			if err := st.Release(ctx, held.Term); err != nil {
				t.Fatal(err)
			}

			commit = lockRow()
			acquired := make(chan error, 1)
			var rec store.Record
			go func() {
				var err error
				rec, err = st.Acquire(ctx, "job", "node-b", time.Minute, "")
				acquired <- err
			}()
			waitBlocked(t, watcher, schema)
			commit()
			if err := <-acquired; err != nil || rec.Token != held.Token+1 {
				t.Fatalf("Acquire that raced a concurrent update under %s = %+v, %v; want token %d", level, rec, err, held.Token+1)
			}
			retried := postgres.Retries() - before
			if level == "read committed" {
				if retried != 0 {
					t.Errorf("read committed: %d retries, want none (the row is re-read after the lock wait)", retried)
				}
			} else if retried < 2 {
				t.Errorf("%s: %d retries, want at least 2 (one per raced statement)", level, retried)
			}
		})
	}
}

func TestHistory(t *testing.T) {
	schema := migrated(t)
	st := openStore(t, schema, postgres.Options{})
	raw := adminConn(t)
	ctx := ctxFor(t)
	a, err := st.Acquire(ctx, "job", "node-a", time.Minute, "addr=a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Renew(ctx, a.Term, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := st.Release(ctx, a.Term); err != nil {
		t.Fatal(err)
	}
	// A raw SQL client takes it (a grant leasehold did not make).
	if _, err := raw.Exec(ctx, `UPDATE `+schema+`.leader_lease SET holder=$2, epoch=epoch+1, expires_at=now()+make_interval(secs=>$3)
		WHERE name=$1 AND (holder IS NULL OR holder=$2 OR expires_at<now())`, "job", "raw-client", 0.05); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the raw client's term to expire", func() bool {
		r, err := st.Get(ctx, "job")
		return err == nil && !r.Live()
	})
	b, err := st.Acquire(ctx, "job", "node-b", time.Minute, "addr=b")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.ForceRelease(ctx, "job"); err != nil {
		t.Fatal(err)
	}
	hist, err := st.History(ctx, "job", 10)
	if err != nil {
		t.Fatal(err)
	}
	type ev struct {
		event, holder string
		token         int64
		meta          string
	}
	want := []ev{
		{"force-released", "node-b", b.Token, "addr=b"},
		{"expired-takeover", "node-b", b.Token, "addr=b"},
		{"acquired", "raw-client", a.Token + 1, ""}, // stale metadata of node-a is not shown
		{"released", "node-a", a.Token, "addr=a"},
		{"acquired", "node-a", a.Token, "addr=a"},
	}
	if len(hist) != len(want) {
		t.Fatalf("History = %+v, want %d entries", hist, len(want))
	}
	for i, w := range want {
		h := hist[i]
		if h.Event != w.event || h.Holder != w.holder || h.Token != w.token || h.Metadata != w.meta || h.Name != "job" || h.At.IsZero() {
			t.Errorf("History[%d] = %+v, want %+v", i, h, w)
		}
	}
	if short, err := st.History(ctx, "job", 2); err != nil || len(short) != 2 || short[0].Event != "force-released" {
		t.Errorf("History limit 2 = %+v, %v", short, err)
	}
	if _, err := st.History(ctx, "job", 0); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("History limit 0: err = %v, want ErrInvalid", err)
	}
}

func TestForceReleaseAndList(t *testing.T) {
	schema := migrated(t)
	st := openStore(t, schema, postgres.Options{})
	ctx := ctxFor(t)
	if _, err := st.ForceRelease(ctx, "never"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("ForceRelease of a name never granted: err = %v, want ErrNotFound", err)
	}
	held, err := st.Acquire(ctx, "job", "node-a", time.Minute, "meta")
	if err != nil {
		t.Fatal(err)
	}
	old, err := st.ForceRelease(ctx, "job")
	if err != nil || old.Term != held.Term || old.Metadata != "meta" || !old.Live() {
		t.Fatalf("ForceRelease = %+v, %v; want the live record as it was", old, err)
	}
	if _, err := st.ForceRelease(ctx, "job"); !errors.Is(err, store.ErrNotHeld) {
		t.Fatalf("second ForceRelease: err = %v, want ErrNotHeld", err)
	}
	if _, err := st.Renew(ctx, held.Term, time.Minute); !errors.Is(err, store.ErrNotHeld) {
		t.Fatalf("evicted holder's Renew: err = %v, want ErrNotHeld", err)
	}
	next, err := st.Acquire(ctx, "job", "node-b", time.Minute, "")
	if err != nil || next.Token != held.Token+1 {
		t.Fatalf("Acquire after ForceRelease = %+v, %v; want token %d", next, err, held.Token+1)
	}
	for _, n := range []string{"z/2", "a", "Z", "z/10"} {
		if _, err := st.Acquire(ctx, n, "node-a", time.Minute, ""); err != nil {
			t.Fatal(err)
		}
	}
	recs, err := st.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range recs {
		names = append(names, r.Name)
	}
	if got := strings.Join(names, " "); got != "Z a job z/10 z/2" {
		t.Fatalf("List = %q, want byte order Z a job z/10 z/2", got)
	}
}

func TestRenewManyEdgeCases(t *testing.T) {
	schema := migrated(t)
	st := openStore(t, schema, postgres.Options{})
	ctx := ctxFor(t)
	a, err := st.Acquire(ctx, "a", `odd"holder\{x,y}`, time.Minute, "")
	if err != nil {
		t.Fatal(err)
	}
	b, err := st.Acquire(ctx, "b", "node", time.Minute, "")
	if err != nil {
		t.Fatal(err)
	}
	terms := []store.Term{a.Term, {Name: "bad name", Holder: "x", Token: 1}, a.Term, b.Term, {Name: "b", Holder: "node", Token: b.Token + 1}}
	recs, errs, err := st.RenewMany(ctx, terms, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if errs[0] != nil || errs[2] != nil || recs[0].Term != a.Term || recs[2].Term != a.Term || recs[0].Remaining <= time.Minute {
		t.Errorf("a term listed twice (with a holder full of array syntax): %+v %v / %+v %v", recs[0], errs[0], recs[2], errs[2])
	}
	if !errors.Is(errs[1], store.ErrInvalid) {
		t.Errorf("invalid term: err = %v, want ErrInvalid", errs[1])
	}
	if errs[3] != nil || recs[3].Term != b.Term {
		t.Errorf("b: %+v, %v", recs[3], errs[3])
	}
	if !errors.Is(errs[4], store.ErrNotHeld) {
		t.Errorf("b with a token not granted: err = %v, want ErrNotHeld", errs[4])
	}
	if recs, errs, err := st.RenewMany(ctx, nil, time.Minute); err != nil || len(recs) != 0 || len(errs) != 0 {
		t.Errorf("empty batch = %v, %v, %v", recs, errs, err)
	}
	if _, _, err := st.RenewMany(ctx, terms, 0); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("batch with ttl 0: err = %v, want ErrInvalid", err)
	}
}

func TestOpenURLParameters(t *testing.T) {
	schema := freshSchema(t)
	u, err := url.Parse(withParams(t, testDSN(t), "table", schema+".my_leases", "create_if_missing", "true", "watch", "false",
		"pool_max_conns", "2", "application_name", "leasehold test"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := postgres.OpenURL(ctxFor(t), u)
	if err != nil {
		t.Fatalf("OpenURL: %v", err)
	}
	defer s.Close()
	st := s.(*postgres.Store)
	if st.Table() != `"`+schema+`"."my_leases"` {
		t.Errorf("Table() = %s, want the schema-qualified my_leases", st.Table())
	}
	if _, err := st.Acquire(ctxFor(t), "job", "node-a", time.Minute, ""); err != nil {
		t.Fatalf("Acquire on the table create_if_missing made: %v", err)
	}
	if _, err := st.Watch(ctxFor(t), "job"); !errors.Is(err, postgres.ErrNoWatch) {
		t.Errorf("Watch with watch=false: err = %v, want ErrNoWatch", err)
	}
	var app string
	conn := adminConn(t)
	if err := conn.QueryRow(ctxFor(t), `SELECT application_name FROM pg_stat_activity WHERE application_name = 'leasehold test' LIMIT 1`).Scan(&app); err != nil {
		t.Errorf("the pool did not get application_name with its space (URL encoding): %v", err)
	}
	// The postgresql scheme too; session_host and session_port point the
	// LISTEN connection elsewhere (here: the same server).
	u2 := *u
	u2.Scheme = "postgresql"
	q := u2.Query()
	q.Set("watch", "true")
	q.Set("session_host", "127.0.0.1")
	q.Set("session_port", u.Port())
	u2.RawQuery = q.Encode()
	s2, err := postgres.OpenURL(ctxFor(t), &u2)
	if err != nil {
		t.Fatalf("OpenURL postgresql://: %v", err)
	}
	defer s2.Close()
	ch, err := s2.(store.Watcher).Watch(ctxFor(t), "job")
	if err != nil {
		t.Fatalf("Watch through the session_host connection: %v", err)
	}
	if err := st.Release(ctxFor(t), store.Term{Name: "job", Holder: "node-a", Token: 1}); err != nil {
		t.Fatal(err)
	}
	select {
	case _, ok := <-ch:
		if !ok {
			t.Fatal("watch channel closed instead of waking after a release")
		}
	case <-ctxFor(t).Done():
		t.Fatal("no wake after a release")
	}
}

// TestWatchWithoutTrigger: a migrated table whose trigger was dropped gives
// Watch an error (waiters poll) instead of a watch that would miss changes.
func TestWatchWithoutTrigger(t *testing.T) {
	schema := migrated(t)
	conn := adminConn(t)
	if _, err := conn.Exec(ctxFor(t), `DROP TRIGGER leasehold_changed_update ON `+schema+`.leader_lease`); err != nil {
		t.Fatal(err)
	}
	st := openStore(t, schema, postgres.Options{})
	_, err := st.Watch(ctxFor(t), "job")
	if !errors.Is(err, postgres.ErrNoWatch) || !errors.Is(err, postgres.ErrNotMigrated) || !strings.Contains(err.Error(), "trigger") {
		t.Fatalf("Watch without the trigger: err = %v, want ErrNoWatch and ErrNotMigrated naming the trigger", err)
	}
	if err := st.Migrate(ctxFor(t)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "Watch to work after Migrate reinstalled the trigger", func() bool {
		ctx, cancel := context.WithCancel(ctxFor(t))
		defer cancel()
		_, err := st.Watch(ctx, "job")
		return err == nil
	})
}
