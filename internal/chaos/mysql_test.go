package chaos

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	mysqldrv "github.com/go-sql-driver/mysql"

	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/store/mysql"
)

// mysqlChaosConns is the max_connections the MySQL chaos run needs. Its
// 119 processes used at most 246 connections at once in session 25 (155
// with doorbells=0: a doorbell is a connection of its own), and the
// faults hold some open; the rest is for the tests beside it.
const mysqlChaosConns = 400

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
	// Twenty groups of nodes, with the connections that faults leave open
	// (a paused or cut-off node's) and the other packages' MySQL tests
	// running beside them, need more than MariaDB's default of 151
	// connections (146 were seen in use by this run alone).
	var maxConns int
	if err := db.QueryRowContext(context.Background(), "SELECT @@max_connections").Scan(&maxConns); err != nil {
		t.Fatalf("read max_connections: %v", err)
	}
	if maxConns < mysqlChaosConns {
		testenv.Missing(t, fmt.Sprintf("a MySQL server that allows %d connections (it allows %d)", mysqlChaosConns, maxConns),
			fmt.Sprintf("SET GLOBAL max_connections = %d (.ci/run does)", mysqlChaosConns))
	}
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
	// Two connections per handle (a node's renewals and acquires, and its
	// watch poller): with the default pool of ten kept idle, twenty groups
	// of nodes held every connection MariaDB allows by default (151), and
	// the other packages' MySQL tests running beside them failed with
	// "Too many connections".
	return "mysql://" + cfg.User + "@" + cfg.Addr + "/" + name + "?" + mysql.ParamMaxOpenConns + "=2"
}
