package postgres_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/store/postgres"
)

// channelOf computes a lease table's NOTIFY channel on the server, apart
// from the store's code, as the README gives it to raw SQL clients:
// 'leasehold_' and the first 16 hex digits of md5('schema.table').
func channelOf(t *testing.T, conn *pgx.Conn, schema, table string) string {
	t.Helper()
	var ch string
	if err := conn.QueryRow(ctxFor(t), `SELECT 'leasehold_' || substr(md5($1 || '.' || $2), 1, 16)`, schema, table).Scan(&ch); err != nil {
		t.Fatal(err)
	}
	return ch
}

// listenOn is a connection that LISTENs on channel.
func listenOn(t *testing.T, channel string) *pgx.Conn {
	t.Helper()
	conn := adminConn(t)
	if _, err := conn.Exec(ctxFor(t), `LISTEN `+pgx.Identifier{channel}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	return conn
}

// noticesBefore sends a marker on channel after the writes before it have
// committed, and returns the payloads the listener gets on channel before
// the marker: the names of the leases whose grants notified it. A session's
// notifications arrive in commit order, so this waits for nothing that
// might not come.
func noticesBefore(t *testing.T, listener, sender *pgx.Conn, channel string) []string {
	t.Helper()
	marker := "marker-" + randomSuffix()
	if _, err := sender.Exec(ctxFor(t), `SELECT pg_notify($1, $2)`, channel, marker); err != nil {
		t.Fatal(err)
	}
	var got []string
	for {
		ctx, cancel := context.WithTimeout(ctxFor(t), 30*time.Second)
		n, err := listener.WaitForNotification(ctx)
		cancel()
		if err != nil {
			t.Fatalf("waiting for a notification on %s: %v", channel, err)
		}
		if n.Channel != channel {
			continue
		}
		if n.Payload == marker {
			return got
		}
		got = append(got, n.Payload)
	}
}

// functionBody is the definition of the trigger function schema.fn().
func functionBody(t *testing.T, conn *pgx.Conn, schema, fn string) string {
	t.Helper()
	var def string
	if err := conn.QueryRow(ctxFor(t), `SELECT pg_get_functiondef(to_regprocedure($1))`, schema+"."+fn+"()").Scan(&def); err != nil {
		t.Fatal(err)
	}
	return def
}

// TestTriggerNamesItsChannel: since schema 4 the trigger function names its
// table's NOTIFY channel as a literal, computed by Migrate, instead of
// computing it on every grant and release; raw SQL grants still notify the
// channel the documentation gives. A schema 3 database (whose trigger
// computes it) is not current, and Migrate installs the literal. A table
// renamed after its migration is not current either: its trigger still
// names the old table's channel, so a grant on it notifies nobody who
// listens on the new one (shown by a marker sent after the grant that
// arrives with nothing before it), until Migrate makes the renamed table's own trigger.
func TestTriggerNamesItsChannel(t *testing.T) {
	schema := migrated(t)
	admin := adminConn(t)
	ctx := ctxFor(t)
	channel := channelOf(t, admin, schema, "leader_lease")
	def := functionBody(t, admin, schema, "leader_lease_changed")
	if !strings.Contains(def, "pg_notify('"+channel+"'") || strings.Contains(def, "md5(") {
		t.Fatalf("the trigger function does not name its channel %s as a literal:\n%s", channel, def)
	}
	listener := listenOn(t, channel)
	if _, err := admin.Exec(ctx, `INSERT INTO `+schema+`.leader_lease (name, holder, epoch, expires_at) VALUES ('job', 'raw', 1, now() + interval '1 minute')`); err != nil {
		t.Fatal(err)
	}
	if got := noticesBefore(t, listener, admin, channel); !slices.Equal(got, []string{"job"}) {
		t.Fatalf("a raw grant notified %q on %s, want the lease's name", got, channel)
	}

	// A schema 3 trigger: the channel computed on every call.
	st := openStore(t, schema, postgres.Options{})
	old := strings.Replace(def, "'"+channel+"'", "'leasehold_' || substr(md5(TG_TABLE_SCHEMA || '.' || TG_TABLE_NAME), 1, 16)", 1)
	if _, err := admin.Exec(ctx, old); err != nil {
		t.Fatal(err)
	}
	for _, fn := range []string{"leader_lease_changed", "leader_lease_guard"} {
		if _, err := admin.Exec(ctx, `COMMENT ON FUNCTION `+schema+`.`+fn+`() IS 'leasehold schema 3'`); err != nil {
			t.Fatal(err)
		}
	}
	if ok, err := st.MigrationCurrent(ctx); err != nil || ok {
		t.Fatalf("a schema 3 database: current %v, %v; want not current", ok, err)
	}
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, err := st.MigrationCurrent(ctx); err != nil || !ok {
		t.Fatalf("after Migrate: current %v, %v; want current", ok, err)
	}
	if got := functionBody(t, admin, schema, "leader_lease_changed"); got != def {
		t.Fatalf("after Migrate from schema 3 the trigger function is\n%s\nwant\n%s", got, def)
	}

	// Renamed: the old trigger notifies the old table's channel.
	if _, err := admin.Exec(ctx, `ALTER TABLE `+schema+`.leader_lease RENAME TO jobs_lease`); err != nil {
		t.Fatal(err)
	}
	renamed := openStore(t, schema, postgres.Options{Table: "jobs_lease"})
	if ok, err := renamed.MigrationCurrent(ctx); err != nil || ok {
		t.Fatalf("a renamed table before Migrate: current %v, %v; want not current", ok, err)
	}
	newChannel := channelOf(t, admin, schema, "jobs_lease")
	newListener := listenOn(t, newChannel)
	grant := `UPDATE ` + schema + `.jobs_lease SET holder = $1, epoch = epoch + 1 WHERE name = 'job'`
	if _, err := admin.Exec(ctx, grant, "raw-2"); err != nil {
		t.Fatal(err)
	}
	if got := noticesBefore(t, newListener, admin, newChannel); len(got) != 0 {
		t.Fatalf("before Migrate, a grant on the renamed table notified %q on its channel; want nothing", got)
	}
	if got := noticesBefore(t, listener, admin, channel); !slices.Equal(got, []string{"job"}) {
		t.Fatalf("before Migrate, the renamed table's grant notified %q on the old channel, want the lease's name", got)
	}
	if err := renamed.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, grant, "raw-3"); err != nil {
		t.Fatal(err)
	}
	if got := noticesBefore(t, newListener, admin, newChannel); !slices.Equal(got, []string{"job"}) {
		t.Fatalf("after Migrate, a grant on the renamed table notified %q on its channel, want the lease's name", got)
	}
	if got := noticesBefore(t, listener, admin, channel); len(got) != 0 {
		t.Fatalf("after Migrate, a grant on the renamed table notified %q on the old channel; want nothing", got)
	}
}
