package postgres_test

import (
	"strconv"
	"testing"

	"github.com/leasehold/leasehold/store/postgres"
)

// grantTo makes grants of name by raw SQL, one after another, until its epoch
// is upTo; each writes one history entry and every 64th trims the history.
func grantTo(t *testing.T, schema, name string, upTo int) {
	t.Helper()
	admin := adminConn(t)
	if _, err := admin.Exec(ctxFor(t), `DO $$ BEGIN
	WHILE coalesce((SELECT epoch FROM `+schema+`.leader_lease WHERE name = '`+name+`'), 0) < `+strconv.Itoa(upTo)+` LOOP
		INSERT INTO `+schema+`.leader_lease AS l (name, holder, epoch, expires_at) VALUES ('`+name+`', 'h', 1, now() + interval '1 minute')
		ON CONFLICT (name) DO UPDATE SET holder = 'h' || (l.epoch + 1), epoch = l.epoch + 1;
	END LOOP; END $$`); err != nil {
		t.Fatalf("granting %s up to epoch %d: %v", name, upTo, err)
	}
}

// TestHistoryTrimIsBounded: the trigger keeps about the last 1,000 history
// entries of a name, and a trim reads only the entries above the previous
// trim's end, not the ones it deleted before. Until a vacuum removes them
// those are still in the history's indexes, and on a server without
// autovacuum (as on the machines these benchmarks ran on) a trim that
// walked them cost more with every trim.
func TestHistoryTrimIsBounded(t *testing.T) {
	schema := migrated(t)
	admin := adminConn(t)
	ctx := ctxFor(t)
	hist := schema + ".leader_lease_history"
	// Keep every deleted entry in the indexes, whatever the server's
	// autovacuum does.
	if _, err := admin.Exec(ctx, `ALTER TABLE `+hist+` SET (autovacuum_enabled = false)`); err != nil {
		t.Fatal(err)
	}
	grantTo(t, schema, "job", 4031) // 62 trims so far; about 3,000 entries deleted
	var kept, oldest, trimmed int64
	if err := admin.QueryRow(ctx, `SELECT count(*), min(h.id), (SELECT coalesce(w.trimmed, 0) FROM `+schema+`.leader_lease_epochs AS w WHERE w.name = 'job')
		FROM `+hist+` AS h WHERE h.name = 'job'`).Scan(&kept, &oldest, &trimmed); err != nil {
		t.Fatal(err)
	}
	if kept < 1001 || kept > 1000+64 {
		t.Fatalf("the history keeps %d entries of job, want 1,001 to 1,064", kept)
	}
	dead := 4031 - kept // one entry a grant

	// The 4,032nd grant trims. Count what its transaction reads from the
	// history table, by every index and by sequential scan.
	tx, err := admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	// The backend's counts may still hold earlier transactions' reads (they
	// are flushed from time to time): take the difference.
	readSoFar := func() int64 {
		var n int64
		if err := tx.QueryRow(ctx, `SELECT (SELECT coalesce(sum(pg_stat_get_xact_tuples_returned(i.indexrelid)), 0) FROM pg_index AS i WHERE i.indrelid = to_regclass($1))
			+ pg_stat_get_xact_tuples_returned(to_regclass($1))`, hist).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := readSoFar()
	if _, err := tx.Exec(ctx, `UPDATE `+schema+`.leader_lease SET holder = 'h-trim', epoch = epoch + 1 WHERE name = 'job'`); err != nil {
		t.Fatal(err)
	}
	read := readSoFar() - before
	var after int64
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM `+hist+` WHERE name = 'job'`).Scan(&after); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("the trim at epoch 4032 read %d history entries (%d entries deleted by earlier trims); %d entries kept", read, dead, after)
	// The trim reads the entries above the previous trim's end (1,064, or
	// 1,001 of them when the server walks the index in order) to find its
	// cut, and deletes the 64 below the cut. Walking the 3,000 entries
	// deleted before is what it must not do.
	const most = 1000 + 64 + 64 + 64
	if read > most {
		t.Fatalf("the trim read %d history entries; want at most %d: it walked entries an earlier trim deleted", read, most)
	}
	if trimmed == 0 || trimmed >= oldest {
		t.Fatalf("trimmed = %d, oldest entry kept %d: want the trim's end just below the oldest entry", trimmed, oldest)
	}
	if after != 1000 {
		t.Fatalf("after the trim the history keeps %d entries of job, want 1,000", after)
	}
	// Another name's trim is its own: "other" starts from nothing.
	grantTo(t, schema, "other", 1088)
	if err := admin.QueryRow(ctx, `SELECT count(*) FROM `+hist+` WHERE name = 'other'`).Scan(&kept); err != nil {
		t.Fatal(err)
	}
	if kept != 1000 {
		t.Fatalf("the history keeps %d entries of other after its trim at 1,088, want 1,000", kept)
	}
	if err := admin.QueryRow(ctx, `SELECT count(*) FROM `+hist+` WHERE name = 'job'`).Scan(&after); err != nil || after != 1000 {
		t.Fatalf("job's history after other's trims: %d entries, %v; want 1,000", after, err)
	}
}

// TestMigrateToSchema3: a schema 2 database (no trimmed column, triggers
// marked schema 2) is not current; Migrate adds the column and installs the
// triggers of this version (schema 4), whose trim works there. A later schema than this
// version's counts as current and is left as it is (a process of this
// version during a rolling upgrade does not put its triggers back over a
// newer version's), compared as a number; a comment that names no version
// is not current.
func TestMigrateToSchema3(t *testing.T) {
	schema := migrated(t)
	admin := adminConn(t)
	ctx := ctxFor(t)
	mark := func(comment string) {
		t.Helper()
		for _, fn := range []string{"leader_lease_changed", "leader_lease_guard"} {
			if _, err := admin.Exec(ctx, `COMMENT ON FUNCTION `+schema+`.`+fn+`() IS '`+comment+`'`); err != nil {
				t.Fatal(err)
			}
		}
	}
	marked := func() string {
		t.Helper()
		var c string
		if err := admin.QueryRow(ctx, `SELECT coalesce(obj_description(to_regprocedure($1), 'pg_proc'), '')`, schema+".leader_lease_changed()").Scan(&c); err != nil {
			t.Fatal(err)
		}
		return c
	}
	st := openStore(t, schema, postgres.Options{})
	isCurrent := func() bool {
		t.Helper()
		ok, err := st.MigrationCurrent(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if _, err := admin.Exec(ctx, `ALTER TABLE `+schema+`.leader_lease_epochs DROP COLUMN trimmed`); err != nil {
		t.Fatal(err)
	}
	mark("leasehold schema 2")
	if isCurrent() {
		t.Fatal("a schema 2 database is current")
	}
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if !isCurrent() || marked() != "leasehold schema 4" {
		t.Fatalf("after Migrate: current %v, marked %q; want current, schema 4", isCurrent(), marked())
	}
	grantTo(t, schema, "job", 1088)
	var kept int64
	var trimmed *int64
	if err := admin.QueryRow(ctx, `SELECT (SELECT count(*) FROM `+schema+`.leader_lease_history WHERE name = 'job'),
		(SELECT trimmed FROM `+schema+`.leader_lease_epochs WHERE name = 'job')`).Scan(&kept, &trimmed); err != nil {
		t.Fatal(err)
	}
	if kept != 1000 || trimmed == nil {
		t.Fatalf("after 1,088 grants: %d entries kept, trimmed %v; want 1,000 and the trim's end", kept, trimmed)
	}

	for _, c := range []struct {
		comment string
		current bool
	}{
		{"leasehold schema 5", true},
		{"leasehold schema 10", true}, // a number, not a string: "10" < "4"
		{"leasehold schema 1", false},
		{"written by hand", false},
		{"", false},
	} {
		mark(c.comment)
		if got := isCurrent(); got != c.current {
			t.Errorf("marked %q: current %v, want %v", c.comment, got, c.current)
		}
		if err := st.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		want := "leasehold schema 4"
		if c.current {
			want = c.comment // left as it is
		}
		if got := marked(); got != want {
			t.Errorf("marked %q, after Migrate: %q, want %q", c.comment, got, want)
		}
	}
}
