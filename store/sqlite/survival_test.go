package sqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/sqlite"
	"github.com/leasehold/leasehold/store/storetest"
)

// operator opens the file as another program would (the sqlite3 shell, a
// script): a plain connection, without the store's pragmas, in particular
// without recursive_triggers.
func operator(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	return db
}

// grantReleased grants and releases n terms of name, and returns the last
// token.
func grantReleased(t *testing.T, st store.Store, name string, n int) int64 {
	t.Helper()
	ctx := context.Background()
	var last int64
	for i := 0; i < n; i++ {
		rec, err := st.Acquire(ctx, name, "node-a", time.Minute, "")
		if err != nil {
			t.Fatal(err)
		}
		if rec.Token <= last {
			t.Fatalf("token %d after %d", rec.Token, last)
		}
		last = rec.Token
		if err := st.Release(ctx, rec.Term); err != nil {
			t.Fatal(err)
		}
	}
	return last
}

func epochOf(t *testing.T, db *sql.DB, name string) int64 {
	t.Helper()
	var e int64
	if err := db.QueryRow(`SELECT epoch FROM leader_lease WHERE name = ?`, name).Scan(&e); err != nil {
		t.Fatalf("epoch of %q: %v", name, err)
	}
	return e
}

// TestInsertOrReplaceCannotResetEpoch (issue 13, hole 1): INSERT OR REPLACE
// deletes the row it replaces without firing the delete trigger (unless the
// connection set recursive_triggers), so it used to put a lease back at epoch
// 0, and the next grant at token 1. Now an insert at or below the name's
// high-water mark is refused, from any connection.
func TestInsertOrReplaceCannotResetEpoch(t *testing.T) {
	path := filepath.Join(t.TempDir(), "leases.db")
	st := open(t, path)
	last := grantReleased(t, st, "job", 3)
	for _, db := range map[string]*sql.DB{"an operator's connection": operator(t, path), "the store's DB()": st.DB()} {
		for _, q := range []string{
			`INSERT OR REPLACE INTO leader_lease (name, holder, epoch, expires_at, ttl_ms, metadata) VALUES ('job', NULL, 0, 0, 0, '')`,
			`REPLACE INTO leader_lease (name) VALUES ('job')`,
			// The same epoch for another holder: one token, two terms.
			`INSERT OR REPLACE INTO leader_lease (name, holder, epoch, expires_at, ttl_ms) VALUES ('job', 'intruder', 3, CAST(unixepoch('subsec')*1000 AS INTEGER) + 60000, 60000)`,
			`INSERT OR REPLACE INTO leader_lease_high_water (name, epoch) VALUES ('job', 1)`,
		} {
			if _, err := db.Exec(q); err == nil || !strings.Contains(err.Error(), "leasehold:") {
				t.Errorf("%s: err = %v, want the statement refused by a trigger", q, err)
			}
		}
	}
	if e := epochOf(t, st.DB(), "job"); e != last {
		t.Fatalf("epoch after the refused statements = %d, want %d", e, last)
	}
	rec, err := st.Acquire(context.Background(), "job", "node-b", time.Minute, "")
	if err != nil || rec.Token != last+1 {
		t.Fatalf("Acquire after the refused statements = %+v, %v; want token %d", rec, err, last+1)
	}
	// Raising by REPLACE is allowed: it cannot repeat a token.
	if _, err := operator(t, path).Exec(`INSERT OR REPLACE INTO leader_lease (name, epoch) VALUES ('job', 100)`); err != nil {
		t.Fatalf("INSERT OR REPLACE above the high-water mark: %v", err)
	}
	if rec, err := st.Acquire(context.Background(), "job", "node-b", time.Minute, ""); err != nil || rec.Token != 101 {
		t.Fatalf("Acquire after a raise to 100 = %+v, %v; want token 101", rec, err)
	}
}

// TestDeletedRowNotRecreatedAtEpochOne (issue 13, hole 1): a lease row deleted
// past the triggers (the guard dropped by hand) is granted again above every
// token it had, not at epoch 1: the high-water table remembers.
func TestDeletedRowNotRecreatedAtEpochOne(t *testing.T) {
	path := filepath.Join(t.TempDir(), "leases.db")
	last := grantReleased(t, open(t, path), "job", 3)
	deleteRowPastTriggers(t, path, "job")
	fresh := open(t, path) // Open re-creates the dropped trigger, and changes no lease
	rec, err := fresh.Acquire(context.Background(), "job", "node-b", time.Minute, "")
	if err != nil || rec.Token <= last {
		t.Fatalf("Acquire after the row was deleted = %+v, %v; want a token above %d", rec, err, last)
	}
}

// TestHighWaterFilledFromHistory: a file made before the high-water table
// existed, whose lease row was deleted then, is remembered by its history:
// the table Open creates starts above it.
func TestHighWaterFilledFromHistory(t *testing.T) {
	path := filepath.Join(t.TempDir(), "leases.db")
	st := open(t, path)
	last := grantReleased(t, st, "job", 3)
	st.Close()
	db := operator(t, path)
	for _, q := range []string{
		`DROP TABLE leader_lease_high_water`, // its triggers go with it
		`DROP TRIGGER leader_lease_high_insert`,
		`DROP TRIGGER leader_lease_high_update`,
		`DROP TRIGGER leader_lease_insert_above_high`,
		`DROP TRIGGER leader_lease_keep_rows`,
		`DELETE FROM leader_lease WHERE name = 'job'`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	rec, err := open(t, path).Acquire(context.Background(), "job", "node-b", time.Minute, "")
	if err != nil || rec.Token <= last {
		t.Fatalf("Acquire after upgrading a file whose row was deleted = %+v, %v; want a token above %d (its history)", rec, err, last)
	}
}

// deleteRowPastTriggers does what an operator determined to delete a lease
// row must do: drop the trigger that refuses it, and delete.
func deleteRowPastTriggers(t *testing.T, path, name string) {
	t.Helper()
	db := operator(t, path)
	if _, err := db.Exec(`DROP TRIGGER leader_lease_keep_rows`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`DELETE FROM leader_lease WHERE name = ?`, name); err != nil {
		t.Fatal(err)
	}
}

// sqliteLosses are the losses the README speaks of, for the conformance
// suite: the tokens survive both.
func sqliteLosses() []storetest.Loss {
	pathOf := func(t *testing.T, open func() (store.Store, error)) string {
		st, err := open()
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		return st.(*sqlite.Store).Path()
	}
	return []storetest.Loss{
		{
			Name: "INSERT OR REPLACE by hand",
			Lose: func(t *testing.T, open func() (store.Store, error), name string) error {
				_, err := operator(t, pathOf(t, open)).Exec(`INSERT OR REPLACE INTO leader_lease (name, epoch) VALUES (?, 0)`, name)
				return err
			},
			Survives: true,
		},
		{
			Name: "row deleted past the triggers",
			Lose: func(t *testing.T, open func() (store.Store, error), name string) error {
				deleteRowPastTriggers(t, pathOf(t, open), name)
				return nil
			},
			Survives: true,
		},
	}
}
