package mysql_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/leasehold/leasehold/internal/testenv"
	lhmysql "github.com/leasehold/leasehold/store/mysql"
)

func ctxFor(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func randomSuffix() string {
	var b [6]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// serverConfig is the test server's config, with no database.
func serverConfig(t testing.TB) *mysql.Config {
	t.Helper()
	cfg, err := mysql.ParseDSN(testenv.MySQLDSN(t))
	if err != nil {
		t.Fatalf("LEASEHOLD_TEST_MYSQL does not parse as a go-sql-driver DSN: %v", err)
	}
	return cfg
}

// dbConfig is the test server's config on database db.
func dbConfig(t testing.TB, db string) *mysql.Config {
	cfg := serverConfig(t)
	cfg.DBName = db
	return cfg
}

// rawDB is a plain pool (no interpolation, clientFoundRows off: a raw
// client's defaults) on database db, closed at cleanup.
func rawDB(t testing.TB, db string) *sql.DB {
	t.Helper()
	cfg := dbConfig(t, db)
	c, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	d := sql.OpenDB(c)
	t.Cleanup(func() { d.Close() })
	return d
}

// freshDB creates a database with a random name, dropped at cleanup, so
// that no test sees another's leases.
func freshDB(t testing.TB) string {
	t.Helper()
	name := "lh_" + randomSuffix()
	admin := rawDB(t, "")
	if _, err := admin.ExecContext(ctxFor(t), "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		d := rawDB(t, "")
		if _, err := d.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	return name
}

// openStore opens a store on database db, closed at cleanup.
func openStore(t testing.TB, db string, opts lhmysql.Options) *lhmysql.Store {
	t.Helper()
	st, err := lhmysql.Open(ctxFor(t), dbConfig(t, db), opts)
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// migrated returns a fresh database with the lease table in it.
func migrated(t testing.TB) string {
	t.Helper()
	db := freshDB(t)
	st := openStore(t, db, lhmysql.Options{})
	if err := st.Migrate(ctxFor(t)); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	st.Close()
	return db
}

// waitFor polls cond every few milliseconds until it holds or 30 s pass.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		timer := time.NewTimer(5 * time.Millisecond)
		<-timer.C
	}
}

func mustExec(t testing.TB, db *sql.DB, q string, args ...any) {
	t.Helper()
	if _, err := db.ExecContext(ctxFor(t), q, args...); err != nil {
		t.Fatalf("%s: %v", strings.TrimSpace(q), err)
	}
}
