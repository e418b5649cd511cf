package sqlfence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	_ "modernc.org/sqlite"

	"github.com/leasehold/leasehold/fence"
	"github.com/leasehold/leasehold/fence/sqlfence"
)

// openSQLite opens a fresh SQLite file with a fence table and the test
// tables. Writers start with BEGIN IMMEDIATE and wait up to 10s for the
// database lock, as the package docs advise.
func openSQLite(t testing.TB) *sql.DB {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fence.db")
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ctx := context.Background()
	for _, q := range []string{
		`CREATE TABLE attempts (attempt TEXT PRIMARY KEY, token INTEGER NOT NULL)`,
		`CREATE TABLE writes (seq INTEGER PRIMARY KEY AUTOINCREMENT, attempt TEXT NOT NULL, token INTEGER NOT NULL)`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if err := sqlfence.SQLiteFence.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	if err := sqlfence.SQLiteFence.Migrate(ctx, db); err != nil {
		t.Fatalf("second Migrate: %v", err)
	}
	return db
}

// stdWrite is one fenced write through database/sql: the attempt row, the
// claim, the write row, the commit.
func stdWrite(ctx context.Context, db *sql.DB, f *sqlfence.Fence, ph func(int) string, attempt string, token int64) (claimErr, commitErr error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err, nil
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `INSERT INTO attempts VALUES (`+ph(1)+`, `+ph(2)+`)`, attempt, token); err != nil {
		return err, nil
	}
	if err := f.Claim(ctx, sqlfence.SQLTx(tx), "sweeper", hof(token), token); err != nil {
		return err, tx.Commit()
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO writes (attempt, token) VALUES (`+ph(1)+`, `+ph(2)+`)`, attempt, token); err != nil {
		return err, nil
	}
	return nil, tx.Commit()
}

func qmark(int) string { return "?" }

func stdTokens(t testing.TB, db *sql.DB, q string) []int64 {
	t.Helper()
	rows, err := db.Query(q)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var toks []int64
	for rows.Next() {
		var tok int64
		if err := rows.Scan(&tok); err != nil {
			t.Fatal(err)
		}
		toks = append(toks, tok)
	}
	return toks
}

func TestSQLiteClaimRefusesStaleToken_FailsWithoutTokenCheck(t *testing.T) {
	db := openSQLite(t)
	ctx := context.Background()
	f := sqlfence.SQLiteFence
	if err, cerr := stdWrite(ctx, db, f, qmark, "b-1", 2); err != nil || cerr != nil {
		t.Fatalf("token 2: %v, %v", err, cerr)
	}
	err, cerr := stdWrite(ctx, db, f, qmark, "a-1", 1)
	var se *fence.StaleError
	if !errors.As(err, &se) || !errors.Is(err, fence.ErrStale) || se.Highest != 2 || se.Token != 1 || se.Resource != "sweeper" {
		t.Fatalf("token 1 after 2: %v, want StaleError{sweeper 1 2}", err)
	}
	if !errors.Is(cerr, sql.ErrTxDone) {
		t.Fatalf("Commit after refusal: %v, want sql.ErrTxDone", cerr)
	}
	if err, cerr := stdWrite(ctx, db, f, qmark, "b-2", 2); err != nil || cerr != nil {
		t.Fatalf("token 2 again: %v, %v", err, cerr)
	}
	if toks := stdTokens(t, db, `SELECT token FROM attempts ORDER BY attempt`); fmt.Sprint(toks) != "[2 2]" {
		t.Fatalf("committed attempts %v: the refused write left a trace", toks)
	}
	// Bad input and a missing table.
	tx, _ := db.BeginTx(ctx, nil)
	if err := f.Claim(ctx, sqlfence.SQLTx(tx), "sweeper", hof(0), 0); !errors.Is(err, fence.ErrInvalid) {
		t.Fatalf("token 0: %v", err)
	}
	other, _ := sqlfence.New(sqlfence.Config{Dialect: sqlfence.SQLite, Table: "nope"})
	tx, _ = db.BeginTx(ctx, nil)
	if err := other.Claim(ctx, sqlfence.SQLTx(tx), "sweeper", hof(1), 1); err == nil || errors.Is(err, fence.ErrStale) {
		t.Fatalf("missing table: %v", err)
	} else if want := "Migrate"; !strings.Contains(err.Error(), want) {
		t.Fatalf("missing table error %q does not say how to create it", err)
	}
	if err := f.Claim(ctx, nil, "sweeper", hof(1), 1); !errors.Is(err, fence.ErrInvalid) {
		t.Fatalf("nil tx: %v", err)
	}
}

// Writers on separate connections race interleaved tokens on one SQLite
// file; SQLite serialises them on its database lock.
func TestSQLiteConcurrentWriters_FailsWithoutTokenCheck(t *testing.T) {
	db := openSQLite(t)
	db.SetMaxOpenConns(4)
	ctx := context.Background()
	var era atomic.Int64
	era.Store(1)
	var mu sync.Mutex
	accepted, refused := 0, 0
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 11))
			for i := range 25 {
				if rng.IntN(5) == 0 {
					era.Add(1)
				}
				tok := max(1, era.Load()-int64(rng.IntN(3)))
				err, cerr := stdWrite(ctx, db, sqlfence.SQLiteFence, qmark, fmt.Sprintf("w%d-%d", w, i), tok)
				mu.Lock()
				switch {
				case err == nil && cerr == nil:
					accepted++
				case errors.Is(err, fence.ErrStale):
					refused++
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
		t.Fatalf("write %d has token %d after %d", i, toks[i], toks[i-1])
	}
	if n := len(stdTokens(t, db, `SELECT token FROM attempts`)); n != accepted || len(toks) != accepted {
		t.Fatalf("%d attempts and %d writes committed, %d accepted", n, len(toks), accepted)
	}
	if refused == 0 || accepted == 0 {
		t.Fatalf("no contention: %d accepted, %d refused", accepted, refused)
	}
}
