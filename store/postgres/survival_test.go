package postgres_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/postgres"
	"github.com/leasehold/leasehold/store/storetest"
)

// wantRefused runs sql (as the table's owner, a superuser here) and wants it
// refused by the guard: SQLSTATE 23001 and a message containing msg.
func wantRefused(t *testing.T, c *pgx.Conn, sql, msg string) {
	t.Helper()
	_, err := c.Exec(ctxFor(t), sql)
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "23001" || !strings.Contains(pe.Message, msg) {
		t.Fatalf("%s: err = %v, want SQLSTATE 23001 saying %q", sql, err, msg)
	}
}

// bypassed runs sql with the triggers off (session_replication_role =
// replica, as logical replication and `pg_restore --disable-triggers` do),
// as a superuser can: how a lease row can be lost despite the guard.
func bypassed(t *testing.T, c *pgx.Conn, sql string, args ...any) {
	t.Helper()
	ctx := ctxFor(t)
	tx, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SET LOCAL session_replication_role = replica`); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, sql, args...); err != nil {
		t.Fatalf("%s with triggers off: %v", sql, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestLeaseRowsRefuseDeleteAndTruncate: the owner of the table, by hand,
// cannot delete or truncate lease rows, rename one, or lower an epoch; the
// row keeps its token; release and force-release (updates) still work and
// the history tells the same story as the row.
func TestLeaseRowsRefuseDeleteAndTruncate(t *testing.T) {
	schema := migrated(t)
	st := openStore(t, schema, postgres.Options{})
	admin := adminConn(t)
	ctx := ctxFor(t)
	tbl := schema + ".leader_lease"
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

	wantRefused(t, admin, `DELETE FROM `+tbl+` WHERE name = 'job'`, "never deleted")
	wantRefused(t, admin, `DELETE FROM `+tbl, "never deleted")
	wantRefused(t, admin, `TRUNCATE `+tbl, "never truncated")
	wantRefused(t, admin, `TRUNCATE `+tbl+` CASCADE`, "never truncated")
	wantRefused(t, admin, `UPDATE `+tbl+` SET epoch = 1 WHERE name = 'job'`, "never decreases")
	wantRefused(t, admin, `UPDATE `+tbl+` SET epoch = 0, holder = NULL WHERE name = 'job'`, "never decreases")
	wantRefused(t, admin, `UPDATE `+tbl+` SET name = 'job2' WHERE name = 'job'`, "never renamed")
	if g, err := st.Get(ctx, "job"); err != nil || g.Term != held.Term || !g.Live() {
		t.Fatalf("after the refused edits Get = %+v, %v; want node-b's live term %v", g, err, held.Term)
	}

	// The store's own writes are updates, and pass.
	if old, err := st.ForceRelease(ctx, "job"); err != nil || old.Term != held.Term {
		t.Fatalf("ForceRelease = %+v, %v", old, err)
	}
	third, err := st.Acquire(ctx, "job", "node-c", time.Minute, "m")
	if err != nil || third.Token != 3 || third.Metadata != "m" {
		t.Fatalf("Acquire after ForceRelease = %+v, %v; want token 3 with its metadata", third, err)
	}
	if _, err := st.Renew(ctx, third.Term, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := st.Release(ctx, third.Term); err != nil {
		t.Fatal(err)
	}
	if g, err := st.Get(ctx, "job"); err != nil || g.Token != 3 || g.Holder != "" {
		t.Fatalf("after Release Get = %+v, %v; want free with token 3", g, err)
	}
	hist, err := st.History(ctx, "job", 10)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, h := range hist {
		got = append(got, fmt.Sprintf("%s %s %d", h.Event, h.Holder, h.Token))
	}
	want := "released node-c 3,acquired node-c 3,force-released node-b 2,acquired node-b 2,released node-a 1,acquired node-a 1"
	if strings.Join(got, ",") != want {
		t.Fatalf("history = %q, want %q", strings.Join(got, ","), want)
	}
}

// TestTokensSurviveALostRow: a lease row lost anyway (triggers bypassed by a
// superuser, the table truncated or dropped, an old copy of the row
// restored) never yields a token at or below one given before, whoever
// re-creates the row: Acquire, the advisory lock, or raw SQL.
func TestTokensSurviveALostRow(t *testing.T) {
	schema := migrated(t)
	st := openStore(t, schema, postgres.Options{})
	admin := adminConn(t)
	raw := rawClient(t, schema)
	ctx := ctxFor(t)
	tbl := schema + ".leader_lease"
	var highest int64
	grant := func(how string, token int64) {
		t.Helper()
		if token <= highest {
			t.Fatalf("%s: token %d, but %d was given before", how, token, highest)
		}
		highest = token
	}
	acquire := func(how string) store.Record {
		t.Helper()
		rec, err := st.Acquire(ctx, "job", "node-a", time.Minute, "meta")
		if err != nil {
			t.Fatalf("%s: Acquire: %v", how, err)
		}
		grant(how, rec.Token)
		if rec.Metadata != "meta" {
			t.Fatalf("%s: granted %+v without its metadata", how, rec)
		}
		if err := st.Release(ctx, rec.Term); err != nil {
			t.Fatalf("%s: Release: %v", how, err)
		}
		return rec
	}
	for range 3 {
		acquire("a normal grant")
	}

	bypassed(t, admin, `DELETE FROM `+tbl+` WHERE name = 'job'`)
	if _, err := st.Get(ctx, "job"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Get after the bypassed DELETE: %v, want ErrNotFound (the row must really be gone for this test)", err)
	}
	acquire("Acquire re-creating a deleted row")

	bypassed(t, admin, `TRUNCATE `+tbl)
	acquire("Acquire after TRUNCATE")

	// Re-created free by raw SQL, as the README's recipe does: the row
	// shows the highest token given, and the raw acquire goes past it.
	bypassed(t, admin, `DELETE FROM `+tbl)
	rawExec(t, raw, `INSERT INTO leader_lease (name) VALUES ('job') ON CONFLICT DO NOTHING`)
	if g, err := st.Get(ctx, "job"); err != nil || g.Token != highest {
		t.Fatalf("a row inserted free by raw SQL shows %+v, %v; want token %d", g, err, highest)
	}
	grant("a raw SQL acquire", rawTryAcquire(t, raw, "job", "raw", 60))
	rawExec(t, raw, `UPDATE leader_lease SET holder = NULL, expires_at = '-infinity' WHERE name = 'job'`)

	// An old copy of the row restored with the triggers on.
	bypassed(t, admin, `DELETE FROM `+tbl)
	rawExec(t, raw, `INSERT INTO leader_lease (name, holder, epoch, expires_at) VALUES ('job', 'old-node', 2, now() + interval '1 hour')`)
	g, err := st.Get(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	grant("a held row restored from an old copy", g.Token)
	if _, err := st.ForceRelease(ctx, "job"); err != nil {
		t.Fatal(err)
	}

	// An old copy restored with the triggers off (pg_restore
	// --disable-triggers): the row is at epoch 1 again, and the next grant,
	// made normally, goes past every token given.
	bypassed(t, admin, `DELETE FROM `+tbl)
	bypassed(t, admin, `INSERT INTO `+tbl+` (name, holder, epoch) VALUES ('job', NULL, 1)`)
	acquire("Acquire over a row restored at epoch 1 with triggers off")

	// The advisory variant re-creating the row.
	bypassed(t, admin, `DELETE FROM `+tbl)
	a, err := st.TryAdvisoryLock(ctx, "job", "node-adv", postgres.AdvisoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	grant("TryAdvisoryLock re-creating a deleted row", a.Token())
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// The whole table dropped and migrated again: the high-water table
	// lives beside it and outlasts it.
	if _, err := admin.Exec(ctx, `DROP TABLE `+tbl); err != nil {
		t.Fatal(err)
	}
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	acquire("Acquire after the table was dropped and migrated again")

	// Nothing here touched another name.
	fresh, err := st.Acquire(ctx, "other", "node-a", time.Minute, "")
	if err != nil || fresh.Token != 1 {
		t.Fatalf("a name never granted = %+v, %v; want token 1", fresh, err)
	}
}

// TestMigrateUpgradesAndSeedsTheHighWaterMark: Migrate on a lease table made
// by hand (or by an earlier version, without the guard) installs the guard
// and seeds the high-water mark from the rows and from the history, so that
// a row deleted before the upgrade, or after it past the triggers, does not
// restart its tokens; and it re-installs a guard trigger disabled by hand.
func TestMigrateUpgradesAndSeedsTheHighWaterMark(t *testing.T) {
	schema := freshSchema(t)
	admin := adminConn(t)
	ctx := ctxFor(t)
	tbl := schema + ".leader_lease"
	// The lease table by hand, and a history as schema 1 left it, which
	// remembers a grant of "gone" whose row was deleted before the guard.
	for _, sql := range []string{
		`CREATE TABLE ` + tbl + ` (name text PRIMARY KEY, holder text, epoch bigint NOT NULL DEFAULT 0, expires_at timestamptz NOT NULL DEFAULT '-infinity')`,
		`INSERT INTO ` + tbl + ` (name, holder, epoch) VALUES ('kept', NULL, 7)`,
		`CREATE TABLE ` + tbl + `_history (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, name text NOT NULL, holder text,
			epoch bigint NOT NULL, event text NOT NULL, at timestamptz NOT NULL DEFAULT now(), metadata text)`,
		`INSERT INTO ` + tbl + `_history (name, holder, epoch, event) VALUES ('gone', 'node-x', 40, 'acquired'), ('gone', 'node-x', 40, 'released')`,
		`DELETE FROM ` + tbl + ` WHERE name = 'nothing'`, // allowed before the guard exists
	} {
		if _, err := admin.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	st := openStore(t, schema, postgres.Options{})
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if rec, err := st.Acquire(ctx, "gone", "node-a", time.Minute, ""); err != nil || rec.Token != 41 {
		t.Fatalf("Acquire of a name whose row was deleted before the upgrade = %+v, %v; want token 41 (history showed 40)", rec, err)
	}
	bypassed(t, admin, `DELETE FROM `+tbl+` WHERE name = 'kept'`)
	if rec, err := st.Acquire(ctx, "kept", "node-a", time.Minute, ""); err != nil || rec.Token != 8 {
		t.Fatalf("Acquire of a row deleted after the upgrade = %+v, %v; want token 8 (the row had 7)", rec, err)
	}
	wantRefused(t, admin, `DELETE FROM `+tbl, "never deleted")

	if _, err := admin.Exec(ctx, `ALTER TABLE `+tbl+` DISABLE TRIGGER leasehold_guard_delete`); err != nil {
		t.Fatal(err)
	}
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	wantRefused(t, admin, `DELETE FROM `+tbl, "never deleted")
}

// pgLosses are the losses the README speaks of, for the conformance suite:
// the tokens survive each (a DELETE and a TRUNCATE are refused by the guard;
// a row deleted with the triggers off comes back above the high-water mark).
func pgLosses() []storetest.Loss {
	table := func(t *testing.T, open func() (store.Store, error)) string {
		st, err := open()
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		return st.(*postgres.Store).Table()
	}
	exec := func(t *testing.T, sql string, args ...any) error {
		_, err := adminConn(t).Exec(ctxFor(t), sql, args...)
		return err
	}
	return []storetest.Loss{
		{Name: "DELETE of the row", Survives: true, Lose: func(t *testing.T, open func() (store.Store, error), name string) error {
			return exec(t, `DELETE FROM `+table(t, open)+` WHERE name = $1`, name)
		}},
		{Name: "TRUNCATE of the table", Survives: true, Lose: func(t *testing.T, open func() (store.Store, error), name string) error {
			return exec(t, `TRUNCATE `+table(t, open))
		}},
		{Name: "row deleted with the triggers off", Survives: true, Lose: func(t *testing.T, open func() (store.Store, error), name string) error {
			bypassed(t, adminConn(t), `DELETE FROM `+table(t, open)+` WHERE name = $1`, name)
			return nil
		}},
	}
}
