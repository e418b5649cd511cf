package postgres_test

import (
	"context"
	"errors"
	"math"
	"net"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/postgres"
)

func TestBadTableName(t *testing.T) {
	dsn := testDSN(t)
	bad := []struct{ table, schema, culprit string }{
		{"x; DROP TABLE y", "", "x; DROP TABLE y"},
		{`leader_lease"; DROP TABLE y; --`, "", `DROP TABLE y`},
		{"Leader_Lease", "", "Leader_Lease"}, // upper case means something else quoted and unquoted
		{"1lease", "", "1lease"},
		{"lease-table", "", "lease-table"},
		{"a.b.c", "", "b.c"},
		{".lease", "", ".lease"},
		{"lease.", "", "lease."},
		{"s.lease", "other", "other"},
		{strings.Repeat("t", 56), "", "limit is 55"}, // leaves no room for _history
		{"lease", "bad schema", "bad schema"},
		{"lease", "Public", "Public"},
	}
	for _, c := range bad {
		st, err := postgres.Open(ctxFor(t), dsn, postgres.Options{Table: c.table, Schema: c.schema})
		if err == nil {
			st.Close()
			t.Errorf("Open(table %q, schema %q) succeeded, want ErrInvalid", c.table, c.schema)
			continue
		}
		if !errors.Is(err, store.ErrInvalid) {
			t.Errorf("Open(table %q, schema %q): err = %v, want ErrInvalid", c.table, c.schema, err)
		}
		if !strings.Contains(err.Error(), c.culprit) && !strings.Contains(strconv.Quote(err.Error()), c.culprit) {
			t.Errorf("Open(table %q, schema %q): error %q does not name what was wrong (%q)", c.table, c.schema, err, c.culprit)
		}
	}
	// The same through a URL, and through the constructors that take a pool.
	u, _ := url.Parse(withParams(t, dsn, "table", "x; DROP TABLE y"))
	if _, err := postgres.OpenURL(ctxFor(t), u); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("OpenURL with table=x; DROP TABLE y: err = %v, want ErrInvalid", err)
	}
	conn := adminConn(t)
	if _, err := postgres.NewConn(ctxFor(t), conn, postgres.Options{Table: "x; DROP TABLE y"}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("NewConn with a bad table: err = %v, want ErrInvalid", err)
	}
	// Good names are accepted, qualified or not.
	for _, good := range []postgres.Options{{Table: "leases"}, {Table: "app.leases"}, {Table: "_x1", Schema: "s_2"}, {Table: strings.Repeat("t", 55)}} {
		st, err := postgres.NewConn(ctxFor(t), conn, good)
		if err != nil {
			t.Errorf("NewConn(%+v): %v", good, err)
			continue
		}
		st.Close()
	}
}

// closedPort returns a loopback port nothing listens on.
func closedPort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	return port
}

func TestUnreachableDatabase(t *testing.T) {
	const secret = "s3cret-pa55"
	port := closedPort(t)
	dsns := []string{
		"postgres://leasehold:" + secret + "@127.0.0.1:" + strconv.Itoa(port) + "/test?sslmode=disable&connect_timeout=5",
		"host=127.0.0.1 port=" + strconv.Itoa(port) + " user=leasehold password=" + secret + " dbname=test sslmode=disable connect_timeout=5",
	}
	for _, dsn := range dsns {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		st, err := postgres.Open(ctx, dsn, postgres.Options{})
		cancel()
		if err == nil {
			st.Close()
			t.Fatalf("Open on a closed port succeeded")
		}
		if errors.Is(err, store.ErrInvalid) {
			t.Errorf("Open on a closed port: err = %v; a connection failure is not bad input", err)
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("the error shows the password: %v", err)
		}
		if !strings.Contains(err.Error(), "127.0.0.1") || !strings.Contains(err.Error(), "connect") {
			t.Errorf("the error does not say where it failed to connect: %v", err)
		}
	}
	u, _ := url.Parse(dsns[0])
	if _, err := postgres.OpenURL(ctxFor(t), u); err == nil || strings.Contains(err.Error(), secret) {
		t.Errorf("OpenURL on a closed port: err = %v; want an error without the password", err)
	}
}

func TestBadConnectionString(t *testing.T) {
	const secret = "s3cret-pa55"
	for _, c := range []struct{ dsn, why string }{
		{"postgres://leasehold:" + secret + "@127.0.0.1:notaport/test", "invalid port"},
		{"host=127.0.0.1 password=" + secret + " port=notaport", "invalid port"},
		{"host=127.0.0.1 password='" + secret + " x' port=notaport", "invalid port"},
		{"postgres://leasehold@127.0.0.1:notaport/test?password=" + secret, "invalid port"},
		{"postgres://leasehold:" + secret + "@127.0.0.1/test?sslmode=sometimes", "sslmode"},
		{"postgres://leasehold:" + secret + "@[::1/test", "IPv6"},
	} {
		_, err := postgres.Open(ctxFor(t), c.dsn, postgres.Options{})
		if !errors.Is(err, store.ErrInvalid) {
			t.Errorf("Open(%s): err = %v, want ErrInvalid", postgres.Redact(c.dsn), err)
			continue
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("the error shows the password: %v", err)
		}
		if !strings.Contains(err.Error(), c.why) {
			t.Errorf("Open(%s): error %q does not say why (%s)", postgres.Redact(c.dsn), err, c.why)
		}
	}
	for _, raw := range []string{
		"mysql://root@127.0.0.1/test",
		"postgres://127.0.0.1/test?create_if_missing=maybe",
		"postgres://127.0.0.1/test?watch=sometimes",
		"postgres://127.0.0.1/test?session_port=http",
		"postgres://127.0.0.1/test?prepared_statements=often",
	} {
		u, _ := url.Parse(raw)
		_, err := postgres.OpenURL(ctxFor(t), u)
		if !errors.Is(err, store.ErrInvalid) {
			t.Errorf("OpenURL(%s): err = %v, want ErrInvalid", raw, err)
			continue
		}
		if name := strings.SplitN(u.RawQuery, "=", 2)[0]; u.RawQuery != "" && !strings.Contains(err.Error(), name) {
			t.Errorf("OpenURL(%s): error %q does not name the parameter %s", raw, err, name)
		}
	}
}

func TestRedact(t *testing.T) {
	cases := []struct{ in, secret string }{
		{"postgres://u:hunter2@h/db", "hunter2"},
		{"postgresql://u:hunter2@h/db?sslmode=verify-full", "hunter2"},
		{"postgres://u@h/db?password=hunter2&sslmode=require", "hunter2"},
		{"postgres://u@h/db?sslpassword=hunter2", "hunter2"},
		{"host=h user=u password=hunter2 dbname=db", "hunter2"},
		{"host=h password='hun ter2' dbname=db", "hun ter2"},
		{"host=h password = hunter2", "hunter2"},
		{"sslpassword=hunter2 host=h", "hunter2"},
	}
	for _, c := range cases {
		got := postgres.Redact(c.in)
		if strings.Contains(got, c.secret) || strings.Contains(got, strings.Fields(c.secret)[0]) {
			t.Errorf("Redact(%q) = %q: the secret is still there", c.in, got)
		}
		if !strings.Contains(got, "xxxxx") {
			t.Errorf("Redact(%q) = %q: want the secret replaced by xxxxx", c.in, got)
		}
	}
	if got := postgres.Redact("postgres://u@h/db?sslmode=disable"); got != "postgres://u@h/db?sslmode=disable" {
		t.Errorf("Redact changed a URL without a password: %q", got)
	}
}

func TestMissingTable(t *testing.T) {
	schema := freshSchema(t)
	st := openStore(t, schema, postgres.Options{})
	ctx := ctxFor(t)
	term := store.Term{Name: "job", Holder: "node-a", Token: 1}
	calls := map[string]error{}
	_, calls["Acquire"] = st.Acquire(ctx, "job", "node-a", time.Minute, "")
	_, calls["Renew"] = st.Renew(ctx, term, time.Minute)
	calls["Release"] = st.Release(ctx, term)
	_, calls["Get"] = st.Get(ctx, "job")
	_, _, calls["RenewMany"] = st.RenewMany(ctx, []store.Term{term}, time.Minute)
	_, calls["List"] = st.List(ctx)
	_, calls["ForceRelease"] = st.ForceRelease(ctx, "job")
	_, calls["History"] = st.History(ctx, "job", 10)
	_, calls["Watch"] = st.Watch(ctx, "job")
	for call, err := range calls {
		if !errors.Is(err, postgres.ErrNotMigrated) {
			t.Errorf("%s on a missing table: err = %v, want ErrNotMigrated", call, err)
			continue
		}
		if !strings.Contains(err.Error(), "leasehold migrate") || !strings.Contains(err.Error(), "Migrate") {
			t.Errorf("%s on a missing table: error %q does not say how to create the table", call, err)
		}
	}
	// Opt-in creation on open.
	st2 := openStore(t, schema, postgres.Options{CreateIfMissing: true})
	if _, err := st2.Acquire(ctx, "job", "node-a", time.Minute, ""); err != nil {
		t.Fatalf("Acquire after CreateIfMissing: %v", err)
	}
}

// TestHandMadeTable: a table created by hand with the four well-known
// columns needs Migrate, which adds leasehold's columns and the trigger and
// keeps the rows; the raw recipe then still works on it.
func TestHandMadeTable(t *testing.T) {
	schema := freshSchema(t)
	conn := adminConn(t)
	ctx := ctxFor(t)
	if _, err := conn.Exec(ctx, `CREATE TABLE `+schema+`.leader_lease (name text PRIMARY KEY, holder text,
		epoch bigint NOT NULL DEFAULT 0, expires_at timestamptz NOT NULL DEFAULT '-infinity');
		INSERT INTO `+schema+`.leader_lease (name, epoch) VALUES ('job', 41)`); err != nil {
		t.Fatal(err)
	}
	st := openStore(t, schema, postgres.Options{})
	if _, err := st.Acquire(ctx, "job", "node-a", time.Minute, ""); !errors.Is(err, postgres.ErrNotMigrated) || !strings.Contains(err.Error(), "leasehold migrate") {
		t.Fatalf("Acquire on a hand-made four-column table: err = %v, want ErrNotMigrated saying to migrate", err)
	}
	if err := st.Migrate(ctx); err != nil {
		t.Fatalf("Migrate of a hand-made table: %v", err)
	}
	rec, err := st.Acquire(ctx, "job", "node-a", time.Minute, "")
	if err != nil || rec.Token != 42 {
		t.Fatalf("Acquire after Migrate = %+v, %v; want token 42 (the row's epoch kept)", rec, err)
	}
	var epoch int64
	if err := conn.QueryRow(ctx, `UPDATE `+schema+`.leader_lease SET holder=$2, epoch=epoch+1, expires_at=now()+make_interval(secs=>$3)
		WHERE name=$1 AND (holder IS NULL OR holder=$2 OR expires_at<now()) RETURNING epoch`, "job", "node-a", 30.0).Scan(&epoch); err != nil || epoch != 43 {
		t.Fatalf("the raw recipe after Migrate: epoch %d, %v; want 43", epoch, err)
	}
}

// TestTableNotALeaseTable: Migrate refuses a table of that name that is
// something else, and changes nothing.
func TestTableNotALeaseTable(t *testing.T) {
	schema := freshSchema(t)
	conn := adminConn(t)
	if _, err := conn.Exec(ctxFor(t), `CREATE TABLE `+schema+`.leader_lease (id int PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	st := openStore(t, schema, postgres.Options{})
	err := st.Migrate(ctxFor(t))
	if !errors.Is(err, postgres.ErrNotMigrated) || !strings.Contains(err.Error(), "not a lease table") {
		t.Fatalf("Migrate over an unrelated table: err = %v, want ErrNotMigrated saying it is not a lease table", err)
	}
}

// TestOddRows edits rows by hand into values leasehold never writes.
func TestOddRows(t *testing.T) {
	schema := migrated(t)
	st := openStore(t, schema, postgres.Options{})
	conn := adminConn(t)
	ctx := ctxFor(t)
	exec := func(t *testing.T, sql string, args ...any) {
		t.Helper()
		if _, err := conn.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	tbl := schema + ".leader_lease"

	t.Run("NullHolderFutureExpiry", func(t *testing.T) {
		exec(t, `INSERT INTO `+tbl+` (name, holder, epoch, expires_at) VALUES ('a', NULL, 7, now() + interval '1 hour')`)
		rec, err := st.Get(ctx, "a")
		if err != nil || rec.Live() || rec.Holder != "" || rec.Token != 7 || rec.Remaining > 0 {
			t.Fatalf("Get = %+v, %v; want a free record with token 7 and no time left", rec, err)
		}
		got, err := st.Acquire(ctx, "a", "node-a", time.Minute, "")
		if err != nil || got.Token != 8 {
			t.Fatalf("Acquire of a NULL-holder row = %+v, %v; want granted with token 8", got, err)
		}
	})
	t.Run("EmptyHolderFutureExpiry", func(t *testing.T) {
		exec(t, `INSERT INTO `+tbl+` (name, holder, epoch, expires_at) VALUES ('b', '', 3, now() + interval '1 hour')`)
		got, err := st.Acquire(ctx, "b", "node-a", time.Minute, "")
		if err != nil || got.Token != 4 {
			t.Fatalf("Acquire of an empty-holder row = %+v, %v; want granted with token 4", got, err)
		}
	})
	t.Run("NegativeEpoch", func(t *testing.T) {
		exec(t, `INSERT INTO `+tbl+` (name, holder, epoch, expires_at) VALUES ('c', NULL, -5, '-infinity')`)
		_, err := st.Acquire(ctx, "c", "node-a", time.Minute, "")
		if !errors.Is(err, postgres.ErrBadRow) || !strings.Contains(err.Error(), "-5") {
			t.Fatalf("Acquire of a negative-epoch row: err = %v, want ErrBadRow naming the epoch", err)
		}
		rec, err := st.Get(ctx, "c")
		if err != nil || rec.Token != -5 || rec.Holder != "" {
			t.Fatalf("after a refused Acquire, Get = %+v, %v; want the row unchanged", rec, err)
		}
		if _, err := st.Renew(ctx, store.Term{Name: "c", Holder: "node-a", Token: 1}, time.Minute); !errors.Is(err, store.ErrNotHeld) {
			t.Fatalf("Renew on a negative-epoch row: err = %v, want ErrNotHeld", err)
		}
	})
	t.Run("EpochAtLimit", func(t *testing.T) {
		exec(t, `INSERT INTO `+tbl+` (name, holder, epoch, expires_at) VALUES ('d', NULL, $1, '-infinity')`, int64(math.MaxInt64))
		_, err := st.Acquire(ctx, "d", "node-a", time.Minute, "")
		if !errors.Is(err, postgres.ErrBadRow) {
			t.Fatalf("Acquire at the bigint limit: err = %v, want ErrBadRow", err)
		}
	})
	t.Run("InfiniteExpiry", func(t *testing.T) {
		exec(t, `INSERT INTO `+tbl+` (name, holder, epoch, expires_at) VALUES ('e', 'ghost', 9, 'infinity')`)
		rec, err := st.Acquire(ctx, "e", "node-a", time.Minute, "")
		if !errors.Is(err, store.ErrHeld) || rec.Holder != "ghost" || rec.Token != 9 || rec.Remaining < 99*365*24*time.Hour {
			t.Fatalf("Acquire of a row held forever = %+v, %v; want ErrHeld by ghost, token 9, about a century left", rec, err)
		}
		old, err := st.ForceRelease(ctx, "e")
		if err != nil || old.Holder != "ghost" || old.Token != 9 {
			t.Fatalf("ForceRelease = %+v, %v; want ghost's record", old, err)
		}
		got, err := st.Acquire(ctx, "e", "node-a", time.Minute, "")
		if err != nil || got.Token != 10 {
			t.Fatalf("Acquire after ForceRelease = %+v, %v; want token 10", got, err)
		}
	})
	t.Run("PastExpiryIsFree", func(t *testing.T) {
		exec(t, `INSERT INTO `+tbl+` (name, holder, epoch, expires_at) VALUES ('f', 'gone', 2, '1970-01-01')`)
		rec, err := st.Get(ctx, "f")
		if err != nil || rec.Live() || rec.Holder != "gone" {
			t.Fatalf("Get = %+v, %v; want gone's expired term", rec, err)
		}
		if got, err := st.Acquire(ctx, "f", "node-a", time.Minute, ""); err != nil || got.Token != 3 {
			t.Fatalf("Acquire of an expired row = %+v, %v; want token 3", got, err)
		}
	})
	t.Run("ListShowsThemAll", func(t *testing.T) {
		recs, err := st.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, r := range recs {
			names = append(names, r.Name)
		}
		if strings.Join(names, ",") != "a,b,c,d,e,f" {
			t.Fatalf("List names = %v, want a..f in order", names)
		}
	})
}
