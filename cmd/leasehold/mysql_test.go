package main_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/leasehold/leasehold/internal/testenv"
)

// TestTwoRunsMySQL: twoRuns through mysql:// on the machine's MariaDB, in a
// database of the test's own.
func TestTwoRunsMySQL(t *testing.T) { twoRuns(t, mysqlURL(t)+"?create_if_missing=true") }

// TestMySQLOperatorCommands: migrate, then status, history and release
// --force through the real binary on mysql://, the password-free root of
// the test server; each answers without error on a lease it made.
func TestMySQLOperatorCommands(t *testing.T) {
	u := mysqlURL(t)
	if code, out, errOut := leasehold(t, nil, "migrate", "--store", u); code != 0 {
		t.Fatalf("migrate: exit %d\n%s%s", code, out, errOut)
	}
	if code, out, errOut := leasehold(t, nil, "run", "--store", u, "--lease", "ops", "--", "true"); code != 0 {
		t.Fatalf("run: exit %d\n%s%s", code, out, errOut)
	}
	for _, args := range [][]string{
		{"status", "--store", u, "ops"},
		{"history", "--store", u, "ops"},
		{"release", "--force", "--store", u, "ops"},
	} {
		code, out, errOut := leasehold(t, nil, args...)
		if code != 0 {
			t.Fatalf("%v: exit %d\n%s%s", args, code, out, errOut)
		}
		if args[0] == "history" && len(out) == 0 {
			t.Fatalf("history printed nothing for a lease that had a term")
		}
	}
}

// TestDoctorSaysTheSchemaIsBehindMySQL: doctor on a MySQL database whose
// fair queue tables are missing (as a version before them migrated it) says
// to run leasehold migrate and still exits 0; after migrate it says the
// schema is current. The first answer is the control of the second.
func TestDoctorSaysTheSchemaIsBehindMySQL(t *testing.T) {
	u := mysqlURL(t)
	if code, out, errOut := leasehold(t, nil, "migrate", "--store", u); code != 0 {
		t.Fatalf("migrate: exit %d\n%s%s", code, out, errOut)
	}
	db, err := sql.Open("mysql", testenv.MySQLDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	name := u[strings.LastIndex(u, "/")+1:]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := db.ExecContext(ctx, "DROP TABLE "+name+".leader_lease_queue, "+name+".leader_lease_qseq"); err != nil {
		t.Fatal(err)
	}
	doctor := func() string {
		t.Helper()
		code, out, errOut := leasehold(t, nil, "doctor", "--store", u, "--samples", "1")
		if code != 0 {
			t.Fatalf("doctor: exit %d\n%s%s", code, out, errOut)
		}
		return out
	}
	if got := doctor(); !strings.Contains(got, "schema made by an earlier version") || !strings.Contains(got, "leasehold migrate") {
		t.Fatalf("doctor without the queue tables says:\n%s\nwant it to say to run leasehold migrate", got)
	}
	if code, out, errOut := leasehold(t, nil, "migrate", "--store", u); code != 0 {
		t.Fatalf("migrate: exit %d\n%s%s", code, out, errOut)
	}
	if got := doctor(); !strings.Contains(got, "schema current") {
		t.Fatalf("doctor after migrate says:\n%s\nwant it to say the schema is current", got)
	}
}

func mysqlURL(t *testing.T) string {
	t.Helper()
	db, err := sql.Open("mysql", testenv.MySQLDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	var b [4]byte
	rand.Read(b[:])
	name := "lh_e2e_" + hex.EncodeToString(b[:])
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := db.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		db.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name)
	})
	return "mysql://root@127.0.0.1:3306/" + name
}

// TestFairRunMySQL: fairRun on MySQL/MariaDB, whose queue is the places in
// the <table>_queue table, in the order of their seq. Each new place takes
// its seq from the name's counter in <table>_qseq, so the counter is the
// number of places ever written: a, which found nobody queued, took the
// lease without one (AcquireUnqueued's conditional grant).
func TestFairRunMySQL(t *testing.T) {
	u := mysqlURL(t)
	db, err := sql.Open("mysql", testenv.MySQLDSN(t)+u[strings.LastIndexByte(u, '/')+1:])
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	fairRun(t, u+"?create_if_missing=true", timingArgs, func() []string {
		return sqlHolders(t, db, `SELECT holder FROM leader_lease_queue WHERE name = 'fair-job' AND expires_at > UTC_TIMESTAMP(6) ORDER BY seq`)
	}, func() int {
		var n int
		if err := db.QueryRow(`SELECT n FROM leader_lease_qseq WHERE name = 'fair-job'`).Scan(&n); err != nil {
			return 0 // no table or no row: no place was ever written
		}
		return n
	})
}
