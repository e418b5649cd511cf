package mysql_test

import (
	"testing"

	lhmysql "github.com/leasehold/leasehold/store/mysql"
)

// TestMigrationCurrent: MigrationCurrent says whether Migrate would find
// anything to do, and changes nothing. A database with nothing in it, one
// whose queue table was dropped (a schema of a version before the fair
// queue) and one with a trigger dropped are not current; after Migrate
// each is. The false answers are the control: the same call on the same
// store answers true once the schema is whole.
func TestMigrationCurrent(t *testing.T) {
	ctx := ctxFor(t)
	db := migrated(t)
	st := openStore(t, db, lhmysql.Options{})
	raw := rawDB(t, db)
	check := func(want bool, when string) {
		t.Helper()
		got, err := st.MigrationCurrent(ctx)
		if err != nil || got != want {
			t.Fatalf("%s: MigrationCurrent = %v, %v; want %v", when, got, err, want)
		}
	}
	migrate := func() {
		t.Helper()
		if err := st.Migrate(ctx); err != nil {
			t.Fatalf("migrate: %v", err)
		}
	}
	count := func(q string) int {
		t.Helper()
		var n int
		if err := raw.QueryRowContext(ctx, q).Scan(&n); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		return n
	}
	const queueTables = `SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'leader_lease_queue'`
	const triggers = `SELECT COUNT(*) FROM information_schema.TRIGGERS WHERE EVENT_OBJECT_SCHEMA = DATABASE()`

	check(true, "after Migrate")

	mustExec(t, raw, "DROP TABLE leader_lease_queue")
	check(false, "with the queue table dropped")
	if n := count(queueTables); n != 0 {
		t.Fatalf("MigrationCurrent created the queue table")
	}
	migrate()
	check(true, "after Migrate put the queue table back")

	var trigger string
	if err := raw.QueryRowContext(ctx, `SELECT TRIGGER_NAME FROM information_schema.TRIGGERS WHERE EVENT_OBJECT_SCHEMA = DATABASE() ORDER BY TRIGGER_NAME LIMIT 1`).Scan(&trigger); err != nil {
		t.Fatal(err)
	}
	before := count(triggers)
	mustExec(t, raw, "DROP TRIGGER `"+trigger+"`")
	check(false, "with trigger "+trigger+" dropped")
	if n := count(triggers); n != before-1 {
		t.Fatalf("MigrationCurrent changed the triggers: %d, want %d", n, before-1)
	}
	migrate()
	check(true, "after Migrate put the trigger back")

	empty := openStore(t, freshDB(t), lhmysql.Options{})
	if got, err := empty.MigrationCurrent(ctx); err != nil || got {
		t.Fatalf("an empty database: MigrationCurrent = %v, %v; want false", got, err)
	}
}
