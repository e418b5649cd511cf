package mysql_test

import (
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/store"
	lhmysql "github.com/leasehold/leasehold/store/mysql"
)

// TestBadURLs: every malformed URL is refused before connecting, with
// store.ErrInvalid and a message naming what was wrong, never the password.
func TestBadURLs(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "key.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct{ url, want string }{
		{"postgres://u:s3cret@127.0.0.1:3306/db", `scheme "postgres" is not mysql`},
		{"mysql://u:s3cret@127.0.0.1:3306/db?tabel=x", `unknown URL parameter "tabel"`},
		{"mysql://u:s3cret@127.0.0.1:3306/db?table=x;DROP", `does not parse`},
		{"mysql://u:s3cret@127.0.0.1:3306/db?table=x-y", `not a plain SQL identifier`},
		{"mysql://u:s3cret@127.0.0.1:3306/db?table=Leases", `not a plain SQL identifier`},
		{"mysql://u:s3cret@127.0.0.1:3306/db?table=" + strings.Repeat("t", 49), `the limit is 48`},
		{"mysql://u:s3cret@127.0.0.1:3306/db?tls=maybe", `want one of true, false, skip-verify, preferred`},
		{"mysql://u:s3cret@127.0.0.1:3306/db?ca_file=" + filepath.Join(dir, "missing.pem"), `ca_file`},
		{"mysql://u:s3cret@127.0.0.1:3306/db?ca_file=" + notPEM, `holds no PEM certificate`},
		{"mysql://u:s3cret@127.0.0.1:3306/db?ca_file=" + notPEM + "&tls=false", `tls=false`},
		{"mysql://u:s3cret@127.0.0.1:3306/db?cert_file=" + notPEM, `cert_file and key_file go together`},
		{"mysql://u:s3cret@127.0.0.1:3306/db?watch=perhaps", `not true or false`},
		{"mysql://u:s3cret@127.0.0.1:3306/db?watch_interval=-1s", `not a positive duration`},
		{"mysql://u:s3cret@127.0.0.1:3306/db?max_open_conns=0", `from 1 to 10000`},
		{"mysql://u:s3cret@127.0.0.1:3306/db?table=a&table=b", `given 2 times`},
		{"mysql://u:s3cret@127.0.0.1:3306/", `not one database name`},
		{"mysql://u:s3cret@127.0.0.1:3306/a/b", `not one database name`},
		{"mysql://u:s3cret@h1:3306,h2:3306/db", `several hosts`},
		{"mysql:opaque", `names no host`},
	}
	for _, c := range cases {
		u, err := url.Parse(c.url)
		if err != nil {
			t.Fatal(err)
		}
		_, err = lhmysql.OpenURL(ctxFor(t), u)
		switch {
		case !errors.Is(err, store.ErrInvalid):
			t.Errorf("%s: err = %v, want ErrInvalid", store.RedactURL(u), err)
		case !strings.Contains(err.Error(), c.want):
			t.Errorf("%s: err = %v, want it to say %q", store.RedactURL(u), err, c.want)
		case strings.Contains(err.Error(), "s3cret"):
			t.Errorf("%s: the error shows the password: %v", store.RedactURL(u), err)
		}
	}
}

// TestBadOptions: options and arguments refused with ErrInvalid; a store
// on a database without the table says ErrNotMigrated; a connection
// without a database cannot migrate.
func TestBadOptions(t *testing.T) {
	db := freshDB(t)
	ctx := ctxFor(t)
	for _, opts := range []lhmysql.Options{{Table: "x; DROP TABLE y"}, {Table: "1abc"}, {WatchInterval: -time.Second}} {
		if _, err := lhmysql.Open(ctx, dbConfig(t, db), opts); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("Open(%+v): %v, want ErrInvalid", opts, err)
		}
	}
	if _, err := lhmysql.Open(ctx, nil, lhmysql.Options{}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("Open(nil config): %v, want ErrInvalid", err)
	}
	if _, err := lhmysql.NewDB(ctx, nil, lhmysql.Options{}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("NewDB(nil): %v, want ErrInvalid", err)
	}
	if _, err := lhmysql.OpenDSN(ctx, "u:s3cret@tcp(127.0.0.1:3306/db", lhmysql.Options{}); !errors.Is(err, store.ErrInvalid) || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("OpenDSN(bad DSN): %v, want ErrInvalid without the password", err)
	}
	st := openStore(t, db, lhmysql.Options{})
	if _, err := st.Acquire(ctx, "job", "node-a", time.Minute, ""); !errors.Is(err, lhmysql.ErrNotMigrated) || !strings.Contains(err.Error(), "leasehold migrate") {
		t.Errorf("Acquire before Migrate: %v, want ErrNotMigrated saying how to migrate", err)
	}
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := st.History(ctx, "job", 0); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("History limit 0: %v, want ErrInvalid", err)
	}
	if _, err := st.Acquire(ctx, "job", "node-a", 5*time.Millisecond, ""); !errors.Is(err, store.ErrInvalid) || !strings.Contains(err.Error(), "minimum") {
		t.Errorf("Acquire with a 5ms ttl: %v, want ErrInvalid naming the minimum", err)
	}
	noDB, err := lhmysql.Open(ctx, serverConfig(t), lhmysql.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer noDB.Close()
	if err := noDB.Migrate(ctx); !errors.Is(err, store.ErrInvalid) || !strings.Contains(err.Error(), "no database") {
		t.Errorf("Migrate without a database: %v, want ErrInvalid saying so", err)
	}
	// A table that is not a lease table.
	mustExec(t, rawDB(t, db), `CREATE TABLE other (id INT PRIMARY KEY)`)
	o := openStore(t, db, lhmysql.Options{Table: "other"})
	if err := o.Migrate(ctx); !errors.Is(err, lhmysql.ErrNotMigrated) || !strings.Contains(err.Error(), `no column "name"`) {
		t.Errorf("Migrate of a table that is not a lease table: %v, want ErrNotMigrated naming the column", err)
	}
}
