package chaos

import (
	"context"
	"database/sql"
	"testing"
	"time"

	mysqldrv "github.com/go-sql-driver/mysql"

	"github.com/leasehold/leasehold/internal/testenv"
)

// mysqlURL returns a mysql:// URL on the machine's MariaDB (or MySQL), or the
// server LEASEHOLD_TEST_MYSQL names, with a database of the test's own,
// dropped when the test ends.
func mysqlURL(t *testing.T) string {
	t.Helper()
	dsn := testenv.MySQLDSN(t)
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	name := "lh_chaos_" + randomSuffix()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := db.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := db.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name); err != nil {
			t.Logf("drop database %s: %v", name, err)
		}
	})
	cfg, err := mysqldrv.ParseDSN(dsn)
	if err != nil {
		t.Fatalf("LEASEHOLD_TEST_MYSQL does not parse as a go-sql-driver DSN: %v", err)
	}
	// The server LEASEHOLD_TEST_MYSQL names (a server of one's own keeps a
	// run off the shared one), as its user.
	return "mysql://" + cfg.User + "@" + cfg.Addr + "/" + name
}
