package sqlfence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/leasehold/leasehold/fence"
	"github.com/leasehold/leasehold/fence/sqlfence"
	"github.com/leasehold/leasehold/internal/testenv"
)

// openMySQL makes a database of its own on the MySQL/MariaDB test server
// (dropped at the end) and opens it with the given extra DSN parameters.
func openMySQL(t testing.TB, params string) (db *sql.DB, admin *sql.DB) {
	t.Helper()
	testenv.RequireTCP(t, "MySQL/MariaDB", "127.0.0.1:3306", "start MariaDB or MySQL with user root and no password, or set LEASEHOLD_TEST_MYSQL")
	base := testenv.Env("LEASEHOLD_TEST_MYSQL", "root@tcp(127.0.0.1:3306)/")
	admin, err := sql.Open("mysql", base)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	name := "sqlfence_" + randomSuffix()
	if _, err := admin.Exec("CREATE DATABASE " + name); err != nil {
		t.Fatalf("create database: %v", err)
	}
	t.Cleanup(func() {
		if _, err := admin.Exec("DROP DATABASE " + name); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	db, err = sql.Open("mysql", base+name+"?"+params)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ctx := context.Background()
	for _, q := range []string{
		`CREATE TABLE attempts (attempt VARCHAR(64) PRIMARY KEY, token BIGINT NOT NULL) ENGINE=InnoDB`,
		`CREATE TABLE writes (seq BIGINT AUTO_INCREMENT PRIMARY KEY, attempt VARCHAR(64) NOT NULL, token BIGINT NOT NULL) ENGINE=InnoDB`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if err := sqlfence.MySQLFence.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	if err := sqlfence.MySQLFence.Migrate(ctx, db); err != nil {
		t.Fatalf("second Migrate: %v", err)
	}
	return db, admin
}

func TestMySQLClaimRefusesStaleToken_FailsWithoutTokenCheck(t *testing.T) {
	// With and without CLIENT_FOUND_ROWS: the claim must not depend on it.
	for _, params := range []string{"", "clientFoundRows=true"} {
		t.Run("params="+params, func(t *testing.T) {
			db, _ := openMySQL(t, params)
			db.SetMaxOpenConns(1) // one session, so LAST_INSERT_ID state carries from claim to claim
			ctx := context.Background()
			f := sqlfence.MySQLFence
			if err, cerr := stdWrite(ctx, db, f, qmark, "b-1", 2); err != nil || cerr != nil {
				t.Fatalf("token 2: %v, %v", err, cerr)
			}
			err, cerr := stdWrite(ctx, db, f, qmark, "a-1", 1)
			var se *fence.StaleError
			if !errors.As(err, &se) || se.Highest != 2 || se.Token != 1 || se.Resource != "sweeper" {
				t.Fatalf("token 1 after 2: %v, want StaleError{sweeper 1 2}", err)
			}
			if !errors.Is(cerr, sql.ErrTxDone) {
				t.Fatalf("Commit after refusal: %v", cerr)
			}
			for i, tok := range []int64{2, 3, 3} { // equal, higher, equal again
				if err, cerr := stdWrite(ctx, db, f, qmark, fmt.Sprintf("b-%d", i+2), tok); err != nil || cerr != nil {
					t.Fatalf("token %d: %v, %v", tok, err, cerr)
				}
			}
			// A fresh resource right after a refusal on the same session.
			stdWrite(ctx, db, f, qmark, "a-2", 2)
			tx, _ := db.BeginTx(ctx, nil)
			if err := f.Claim(ctx, sqlfence.SQLTx(tx), "another", hof(1), 1); err != nil {
				t.Fatalf("fresh resource token 1: %v", err)
			}
			tx.Commit()
			if toks := stdTokens(t, db, `SELECT token FROM attempts ORDER BY attempt`); fmt.Sprint(toks) != "[2 2 3 3]" {
				t.Fatalf("committed attempts %v", toks)
			}
		})
	}
}

func mysqlConnID(t testing.TB, ctx context.Context, tx *sql.Tx) int64 {
	t.Helper()
	var id int64
	if err := tx.QueryRowContext(ctx, `SELECT CONNECTION_ID()`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

// waitMySQLLockWait polls until connection connID is stuck in a statement:
// InnoDB lists its transaction as LOCK WAIT, or the process list shows it
// running the fence's upsert (InnoDB refreshes INNODB_TRX only when it was
// last read more than 0.1 s ago, so at this poll rate it can go on showing
// the snapshot from before the wait).
func waitMySQLLockWait(t testing.TB, admin *sql.DB, connID int64) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		var n int
		err := admin.QueryRow(`SELECT
  (SELECT count(*) FROM information_schema.INNODB_TRX WHERE trx_mysql_thread_id = ? AND trx_state = 'LOCK WAIT') +
  (SELECT count(*) FROM information_schema.PROCESSLIST WHERE id = ? AND info LIKE 'INSERT INTO leasehold_fence%')`, connID, connID).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("connection %d never waited on a lock", connID)
		}
		time.Sleep(2 * time.Millisecond) // poll interval
	}
}

func TestMySQLStaleWriterArrivingLastWaitsAndLoses_FailsWithoutRowLock(t *testing.T) {
	db, admin := openMySQL(t, "")
	ctx := context.Background()
	f := sqlfence.MySQLFence
	txA, _ := db.BeginTx(ctx, nil)
	defer txA.Rollback()
	if err := f.Claim(ctx, sqlfence.SQLTx(txA), "sweeper", hof(2), 2); err != nil {
		t.Fatal(err)
	}
	txB, _ := db.BeginTx(ctx, nil)
	defer txB.Rollback()
	id := mysqlConnID(t, ctx, txB)
	res := make(chan error, 1)
	go func() { res <- f.Claim(ctx, sqlfence.SQLTx(txB), "sweeper", hof(1), 1) }()
	waitMySQLLockWait(t, admin, id)
	select {
	case err := <-res:
		t.Fatalf("stale claim returned (%v) while the newer one held the row", err)
	default:
	}
	if err := txA.Commit(); err != nil {
		t.Fatal(err)
	}
	var se *fence.StaleError
	if err := <-res; !errors.As(err, &se) || se.Highest != 2 {
		t.Fatalf("stale claim after the commit: %v", err)
	}
}

func TestMySQLConcurrentWriters_FailsWithoutTokenCheck(t *testing.T) {
	db, _ := openMySQL(t, "")
	db.SetMaxOpenConns(6)
	ctx := context.Background()
	var era atomic.Int64
	era.Store(1)
	var mu sync.Mutex
	accepted, refused, deadlocks := 0, 0, 0
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 13))
			for i := range 25 {
				if rng.IntN(6) == 0 {
					era.Add(1)
				}
				tok := max(1, era.Load()-int64(rng.IntN(3)))
				err, cerr := stdWrite(ctx, db, sqlfence.MySQLFence, qmark, fmt.Sprintf("w%d-%d", w, i), tok)
				var me *mysql.MySQLError
				mu.Lock()
				switch {
				case err == nil && cerr == nil:
					accepted++
				case errors.Is(err, fence.ErrStale):
					refused++
				case errors.As(err, &me) && me.Number == 1213:
					deadlocks++ // InnoDB rolled the transaction back; the caller would retry
				default:
					t.Errorf("token %d: %v, commit %v", tok, err, cerr)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	toks := stdTokens(t, db, `SELECT token FROM writes ORDER BY seq`)
	if i, ok := nonDecreasing(toks); !ok {
		t.Fatalf("write %d has token %d after %d: %v", i, toks[i], toks[i-1], toks)
	}
	if n := len(stdTokens(t, db, `SELECT token FROM attempts`)); n != accepted || len(toks) != accepted {
		t.Fatalf("%d attempts and %d writes committed, %d accepted", n, len(toks), accepted)
	}
	if refused == 0 || accepted == 0 {
		t.Fatalf("no contention: %d accepted, %d refused", accepted, refused)
	}
	t.Logf("%d accepted, %d refused, %d deadlocks", accepted, refused, deadlocks)
}

func TestMySQLMissingTable(t *testing.T) {
	db, _ := openMySQL(t, "")
	ctx := context.Background()
	f, _ := sqlfence.New(sqlfence.Config{Dialect: sqlfence.MySQL, Table: "nope"})
	tx, _ := db.BeginTx(ctx, nil)
	err := f.Claim(ctx, sqlfence.SQLTx(tx), "r", hof(1), 1)
	if err == nil || !strings.Contains(err.Error(), "Migrate") {
		t.Fatalf("missing table: %v", err)
	}
	tx, _ = db.BeginTx(ctx, nil)
	if err := sqlfence.MySQLFence.CheckLease(ctx, sqlfence.SQLTx(tx), storeTerm("l", "h", 1)); !errors.Is(err, fence.ErrInvalid) {
		t.Fatalf("lease check on MySQL: %v, want ErrInvalid (PostgreSQL only)", err)
	}
}
