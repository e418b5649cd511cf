package mysql_test

import (
	"context"
	"crypto/sha1"
	"database/sql"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	lhmysql "github.com/leasehold/leasehold/store/mysql"
)

// migrateLock holds, on a connection of its own, the GET_LOCK lock Migrate
// takes for db's lease table, as a process stopped in the middle of a
// migration would (SIGSTOP, a GC pause, its network cut: the server keeps
// the lock while the connection stays open). release gives it back.
func migrateLock(t *testing.T, db string) (release func()) {
	t.Helper()
	sum := sha1.Sum([]byte("migrate\x00" + db + "\x00" + lhmysql.DefaultTable + "\x00"))
	name := "leasehold:" + hex.EncodeToString(sum[:])
	c, err := rawDB(t, db).Conn(ctxFor(t))
	if err != nil {
		t.Fatal(err)
	}
	var got sql.NullInt64
	if err := c.QueryRowContext(ctxFor(t), `SELECT GET_LOCK(?, 0)`, name).Scan(&got); err != nil || got.Int64 != 1 {
		t.Fatalf("GET_LOCK of the migration: %v, %v", got, err)
	}
	done := false
	release = func() {
		if done {
			return
		}
		done = true
		if err := c.QueryRowContext(ctxFor(t), `SELECT RELEASE_LOCK(?)`, name).Scan(&got); err != nil || got.Int64 != 1 {
			t.Errorf("RELEASE_LOCK of the migration: %v, %v", got, err)
		}
		c.Close()
	}
	return release
}

// Opening with CreateIfMissing a store whose schema is current does not
// wait for another process's migration lock. In a chaos run every node
// process opens the store so, on every start and restart: with the check
// under the lock, one process paused or cut off while it held the lock
// kept every other process in every lease group from opening the store
// for as long (up to Migrate's 30 s, then an error), and the harness's
// kills, which wait for the restarted node, stopped.
func TestOpenDoesNotWaitForAnotherMigrationWhenCurrent(t *testing.T) {
	db := migrated(t)
	release := migrateLock(t, db)
	defer release()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	start := time.Now()
	st, err := lhmysql.Open(ctx, dbConfig(t, db), lhmysql.Options{CreateIfMissing: true})
	if err != nil {
		t.Fatalf("open with CreateIfMissing on a current schema, while another process holds the migration lock: %v (after %v)", err, time.Since(start).Round(time.Millisecond))
	}
	defer st.Close()
	if _, err := st.Acquire(ctx, "job", "a", time.Minute, ""); err != nil {
		t.Fatal(err)
	}

	// The negative control: with something to do (a trigger dropped by
	// hand), Migrate waits for the lock, and does it once the lock is free.
	mustExec(t, rawDB(t, db), "DROP TRIGGER leader_lease_lh_bd")
	short, cancel2 := context.WithTimeout(context.Background(), time.Second)
	defer cancel2()
	if err := st.Migrate(short); err == nil {
		t.Fatal("Migrate re-created the triggers while another migration held the lock")
	} else if !errors.Is(err, context.DeadlineExceeded) {
		t.Logf("Migrate while the lock was held: %v", err)
	}
	release()
	if err := st.Migrate(ctxFor(t)); err != nil {
		t.Fatalf("Migrate after the lock was released: %v", err)
	}
	var n int
	if err := rawDB(t, db).QueryRowContext(ctxFor(t), `SELECT COUNT(*) FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = ? AND TRIGGER_NAME = 'leader_lease_lh_bd'`, db).Scan(&n); err != nil || n != 1 {
		t.Fatalf("the dropped trigger was not re-created: %d, %v", n, err)
	}
}
