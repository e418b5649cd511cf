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

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leasehold/leasehold/fence"
	"github.com/leasehold/leasehold/fence/sqlfence"
	"github.com/leasehold/leasehold/fence/sqlfence/pgxfence"
)

// Each test below names the check it stands behind: remove that check (the
// token comparison in the claim, the row lock, the lease check) and it fails.

// write is one fenced write through pgx: the caller's attempt row (before the
// claim), the claim, and the caller's write row (after it).
func pgWrite(ctx context.Context, e *pgEnv, c *pgx.Conn, attempt string, token int64) (commitErr, claimErr error) {
	tx, err := c.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `INSERT INTO `+e.t("attempts")+` VALUES ($1, $2)`, attempt, token); err != nil {
		return nil, err
	}
	if err := e.fence.Claim(ctx, pgxfence.Tx(tx), "sweeper", hof(token), token); err != nil {
		return tx.Commit(ctx), err
	}
	if _, err := tx.Exec(ctx, `INSERT INTO `+e.t("writes")+` (attempt, token) VALUES ($1, $2)`, attempt, token); err != nil {
		return nil, err
	}
	return tx.Commit(ctx), nil
}

func TestPostgresClaimRefusesStaleToken_FailsWithoutTokenCheck(t *testing.T) {
	e := newPgEnv(t)
	ctx := context.Background()
	c := pgConnect(t)

	if cerr, err := pgWrite(ctx, e, c, "b-1", 2); err != nil || cerr != nil {
		t.Fatalf("node-b token 2: claim %v, commit %v", err, cerr)
	}
	cerr, err := pgWrite(ctx, e, c, "a-1", 1)
	var se *fence.StaleError
	if !errors.Is(err, fence.ErrStale) || !errors.As(err, &se) || se.Highest != 2 || se.Token != 1 || se.Resource != "sweeper" {
		t.Fatalf("node-a token 1 after 2: err = %v, want StaleError{sweeper 1 2}", err)
	}
	if !errors.Is(cerr, pgx.ErrTxClosed) {
		t.Fatalf("Commit after refusal: %v, want pgx.ErrTxClosed (Claim rolled back)", cerr)
	}
	if cerr, err := pgWrite(ctx, e, c, "b-2", 2); err != nil || cerr != nil {
		t.Fatalf("node-b token 2 again (same term): claim %v, commit %v", err, cerr)
	}
	got := e.attempts(t)
	if len(got) != 2 || got["b-1"] != 2 || got["b-2"] != 2 {
		t.Fatalf("committed attempts %v: the refused write left a trace", got)
	}
	if h := e.fenceToken(t, "sweeper"); h != 2 {
		t.Fatalf("fence row %d, want 2", h)
	}
}

// The same through database/sql (the pgx stdlib driver).
func TestPostgresDatabaseSQLClaimRefusesStaleToken_FailsWithoutTokenCheck(t *testing.T) {
	e := newPgEnv(t)
	ctx := context.Background()
	db := e.sqlDB(t)
	write := func(attempt string, token int64) (error, error) {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		if _, err := tx.ExecContext(ctx, `INSERT INTO `+e.t("attempts")+` VALUES ($1, $2)`, attempt, token); err != nil {
			t.Fatal(err)
		}
		if err := e.fence.Claim(ctx, sqlfence.SQLTx(tx), "sweeper", hof(token), token); err != nil {
			return err, tx.Commit()
		}
		return nil, tx.Commit()
	}
	if err, cerr := write("b", 2); err != nil || cerr != nil {
		t.Fatalf("token 2: %v, %v", err, cerr)
	}
	err, cerr := write("a", 1)
	var se *fence.StaleError
	if !errors.As(err, &se) || se.Highest != 2 {
		t.Fatalf("token 1 after 2: %v", err)
	}
	if !errors.Is(cerr, sql.ErrTxDone) {
		t.Fatalf("Commit after refusal: %v, want sql.ErrTxDone", cerr)
	}
	if got := e.attempts(t); len(got) != 1 || got["b"] != 2 {
		t.Fatalf("committed attempts %v", got)
	}
}

// A stale writer that arrives while a newer one holds the fence row waits for
// it and then loses; a newer writer waiting behind an older one wins after it;
// a writer behind one that rolls back sees the fence as it was. Each case runs
// with both claims made by Claim, and again by QueueClaim (a batch sent in the
// transaction), whose statements differ.
func TestPostgresClaimsSerialiseOnFenceRow_FailsWithoutRowLock(t *testing.T) {
	forms := []struct {
		name  string
		claim func(e *pgEnv, tx pgx.Tx, token int64) error
	}{
		{"Claim", func(e *pgEnv, tx pgx.Tx, token int64) error {
			return e.fence.Claim(context.Background(), pgxfence.Tx(tx), "sweeper", hof(token), token)
		}},
		{"QueueClaim", func(e *pgEnv, tx pgx.Tx, token int64) error {
			b := &pgx.Batch{}
			if err := e.fence.QueueClaim(pgxfence.Batch(b), "sweeper", hof(token), token); err != nil {
				return err
			}
			return tx.SendBatch(context.Background(), b).Close()
		}},
	}
	for _, form := range forms {
		t.Run(form.name, func(t *testing.T) { testClaimsSerialise(t, form.claim) })
	}
}

func testClaimsSerialise(t *testing.T, claim func(e *pgEnv, tx pgx.Tx, token int64) error) {
	for _, tc := range []struct {
		name           string
		first, second  int64
		firstCommits   bool
		wantSecondOK   bool
		wantHighestEnd int64
		// before, if set, is claimed and committed first: with first equal
		// to it, the first claim repeats the row's term and changes nothing,
		// but must hold the row all the same.
		before int64
	}{
		{"stale arrives last", 2, 1, true, false, 2, 0},
		{"newer waits for older", 1, 2, true, true, 2, 0},
		{"older rolls back", 3, 1, false, true, 1, 0},
		{"newer waits for a repeated claim", 2, 3, true, true, 3, 2},
		{"stale waits for a repeated claim", 2, 1, true, false, 2, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newPgEnv(t)
			ctx := context.Background()
			a, b := pgConnect(t), pgConnect(t)
			if tc.before > 0 {
				claimCommitted(t, e, a, tc.before)
			}
			txA, err := a.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer txA.Rollback(ctx)
			if err := claim(e, txA, tc.first); err != nil {
				t.Fatalf("first claim: %v", err)
			}
			txB, err := b.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer txB.Rollback(ctx)
			res := make(chan error, 1)
			go func() { res <- claim(e, txB, tc.second) }()
			e.waitForLockWait(t, b.PgConn().PID())
			select {
			case err := <-res:
				t.Fatalf("second claim returned (%v) while the first held the row", err)
			default:
			}
			if tc.firstCommits {
				err = txA.Commit(ctx)
			} else {
				err = txA.Rollback(ctx)
			}
			if err != nil {
				t.Fatal(err)
			}
			err = <-res
			if tc.wantSecondOK != (err == nil) {
				t.Fatalf("second claim (token %d after %d): %v", tc.second, tc.first, err)
			}
			if err != nil {
				var se *fence.StaleError
				if !errors.As(err, &se) || se.Highest != tc.first {
					t.Fatalf("second claim: %v, want StaleError with highest %d", err, tc.first)
				}
			} else if err := txB.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if h := e.fenceToken(t, "sweeper"); h != tc.wantHighestEnd {
				t.Fatalf("fence row %d, want %d", h, tc.wantHighestEnd)
			}
		})
	}
}

// claimCommitted claims token (holder hof(token)) for "sweeper" in a
// transaction of its own on c, and commits it.
func claimCommitted(t *testing.T, e *pgEnv, c *pgx.Conn, token int64) {
	t.Helper()
	ctx := context.Background()
	tx, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if err := e.fence.Claim(ctx, pgxfence.Tx(tx), "sweeper", hof(token), token); err != nil {
		t.Fatalf("claim %d: %v", token, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

// A claim of the term the fence row already holds is admitted without a
// new row version (the row's xmin stays), in each of Claim, ClaimLease and
// QueueClaim; the control: a claim with a higher token makes a new version.
func TestPostgresRepeatedClaimWritesNoRowVersion(t *testing.T) {
	e := newPgEnv(t)
	ctx := context.Background()
	c := pgConnect(t)
	term := e.grant(t, "sweeper", hof(1), 1, 30*time.Second)
	xmin := func() string {
		var x string
		if err := e.admin.QueryRow(ctx, `SELECT xmin::text FROM `+e.fence.Table()+` WHERE resource = 'sweeper'`).Scan(&x); err != nil {
			t.Fatal(err)
		}
		return x
	}
	inTx := func(claim func(pgx.Tx) error) error {
		tx, err := c.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		if err := claim(tx); err != nil {
			return err
		}
		return tx.Commit(ctx)
	}
	claimCommitted(t, e, c, 1)
	first := xmin()
	forms := map[string]func(pgx.Tx) error{
		"Claim": func(tx pgx.Tx) error { return e.fence.Claim(ctx, pgxfence.Tx(tx), "sweeper", hof(1), 1) },
		"ClaimLease": func(tx pgx.Tx) error {
			return e.fence.ClaimLease(ctx, pgxfence.Tx(tx), term, "sweeper")
		},
		"QueueClaim": func(tx pgx.Tx) error {
			b := &pgx.Batch{}
			if err := e.fence.QueueClaim(pgxfence.Batch(b), "sweeper", hof(1), 1); err != nil {
				return err
			}
			return tx.SendBatch(ctx, b).Close()
		},
	}
	for _, name := range []string{"Claim", "ClaimLease", "QueueClaim"} {
		if err := inTx(forms[name]); err != nil {
			t.Fatalf("%s of the row's own term: %v", name, err)
		}
		if x := xmin(); x != first {
			t.Fatalf("%s of the row's own term made a new row version (xmin %s, was %s)", name, x, first)
		}
	}
	claimCommitted(t, e, c, 2)
	if x := xmin(); x == first {
		t.Fatalf("a claim with a higher token left the row version as it was (xmin %s): the check above cannot fail", x)
	}
	if tok, holder := e.fenceTerm(t, "sweeper"); tok != 2 || holder != hof(2) {
		t.Fatalf("fence row (%d, %q), want (2, %q)", tok, holder, hof(2))
	}
}

// Goroutines on separate connections race interleaved tokens on one
// resource. The accepted writes, in lock order, never go back in token; every
// refused write left no trace; the fence row ends at the highest accepted.
func TestPostgresConcurrentWriters_FailsWithoutTokenCheck(t *testing.T) {
	e := newPgEnv(t)
	ctx := context.Background()
	const writers, rounds = 6, 25
	var era atomic.Int64 // the newest token handed out so far
	era.Store(1)
	var mu sync.Mutex
	accepted := map[string]int64{}
	refused := 0
	var wg sync.WaitGroup
	for w := range writers {
		c := pgConnect(t)
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for i := range rounds {
				if rng.IntN(6) == 0 {
					era.Add(1) // a new term is granted
				}
				tok := max(1, era.Load()-int64(rng.IntN(3))) // some writers are behind
				attempt := fmt.Sprintf("w%d-%d", w, i)
				cerr, err := pgWrite(ctx, e, c, attempt, tok)
				var se *fence.StaleError
				switch {
				case err == nil && cerr == nil:
					mu.Lock()
					accepted[attempt] = tok
					mu.Unlock()
				case errors.As(err, &se):
					if se.Highest <= tok || cerr == nil {
						t.Errorf("%s: refused token %d with highest %d, commit %v", attempt, tok, se.Highest, cerr)
					}
					mu.Lock()
					refused++
					mu.Unlock()
				default:
					t.Errorf("%s token %d: claim %v, commit %v", attempt, tok, err, cerr)
				}
			}
		})
	}
	wg.Wait()
	toks := e.writesInOrder(t)
	if i, ok := nonDecreasing(toks); !ok {
		t.Fatalf("accepted write %d has token %d after %d: %v", i, toks[i], toks[i-1], toks)
	}
	got := e.attempts(t)
	if len(got) != len(accepted) {
		t.Fatalf("%d attempts committed, %d accepted: a refused write left a trace", len(got), len(accepted))
	}
	var hi int64
	for a, tok := range accepted {
		if got[a] != tok {
			t.Fatalf("accepted %s (token %d) not committed", a, tok)
		}
		hi = max(hi, tok)
	}
	if h := e.fenceToken(t, "sweeper"); h != hi {
		t.Fatalf("fence row %d, want highest accepted %d", h, hi)
	}
	if refused == 0 || len(accepted) == 0 {
		t.Fatalf("no contention: %d accepted, %d refused", len(accepted), refused)
	}
	t.Logf("%d accepted, %d refused, final token %d", len(accepted), refused, hi)
}

// Under REPEATABLE READ a stale claim that waited for a newer writer fails
// (refused, or a serialization failure), and nothing of it commits.
func TestPostgresRepeatableReadStaleNeverCommits(t *testing.T) {
	e := newPgEnv(t)
	ctx := context.Background()
	a, b := pgConnect(t), pgConnect(t)
	if cerr, err := pgWrite(ctx, e, a, "seed", 1); err != nil || cerr != nil {
		t.Fatal(err, cerr)
	}
	txA, _ := a.Begin(ctx)
	defer txA.Rollback(ctx)
	if err := e.fence.Claim(ctx, pgxfence.Tx(txA), "sweeper", hof(3), 3); err != nil {
		t.Fatal(err)
	}
	txB, err := b.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	defer txB.Rollback(ctx)
	if _, err := txB.Exec(ctx, `INSERT INTO `+e.t("attempts")+` VALUES ('stale', 2)`); err != nil { // takes the snapshot
		t.Fatal(err)
	}
	res := make(chan error, 1)
	go func() { res <- e.fence.Claim(ctx, pgxfence.Tx(txB), "sweeper", hof(2), 2) }()
	e.waitForLockWait(t, b.PgConn().PID())
	if err := txA.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	err = <-res
	var pe *pgconn.PgError
	if !errors.Is(err, fence.ErrStale) && !(errors.As(err, &pe) && pe.Code == "40001") {
		t.Fatalf("stale claim under REPEATABLE READ: %v, want ErrStale or a serialization failure", err)
	}
	if txB.Commit(ctx) == nil {
		t.Fatal("the stale transaction committed")
	}
	if _, ok := e.attempts(t)["stale"]; ok {
		t.Fatal("the stale transaction left a trace")
	}
}

func TestPostgresBadInput(t *testing.T) {
	for _, name := range []string{"x; DROP TABLE y", `"quoted"`, "a.b.c", "1abc", "has space", "a-b", strings.Repeat("a", 64)} {
		if _, err := sqlfence.New(sqlfence.Config{Dialect: sqlfence.Postgres, Table: name}); !errors.Is(err, fence.ErrInvalid) {
			t.Errorf("table %q: err = %v, want ErrInvalid", name, err)
		}
		if _, err := sqlfence.New(sqlfence.Config{Dialect: sqlfence.Postgres, LeaseTable: name}); !errors.Is(err, fence.ErrInvalid) {
			t.Errorf("lease table %q: err = %v, want ErrInvalid", name, err)
		}
	}
	if _, err := sqlfence.New(sqlfence.Config{}); !errors.Is(err, fence.ErrInvalid) {
		t.Errorf("no dialect: err = %v, want ErrInvalid", err)
	}

	e := newPgEnv(t)
	ctx := context.Background()
	c := pgConnect(t)
	for _, tc := range []struct {
		res string
		hol string
		tok int64
	}{{"", "h", 1}, {"r", "h", 0}, {"r", "h", -1}, {"a\x00b", "h", 1}, {"r", "", 1}, {"r", "a b", 1}, {"r", strings.Repeat("h", fence.MaxHolderLen+1), 1}} {
		tx, _ := c.Begin(ctx)
		err := e.fence.Claim(ctx, pgxfence.Tx(tx), tc.res, tc.hol, tc.tok)
		if !errors.Is(err, fence.ErrInvalid) {
			t.Errorf("Claim(%q, %q, %d): %v, want ErrInvalid", tc.res, tc.hol, tc.tok, err)
		}
		if tx.Commit(ctx) == nil {
			t.Errorf("Claim(%q, %q, %d): the transaction could still commit", tc.res, tc.hol, tc.tok)
		}
	}
	if err := e.fence.QueueClaim(pgxfence.Batch(&pgx.Batch{}), "r", "", 1); !errors.Is(err, fence.ErrInvalid) || !strings.Contains(err.Error(), "holder") {
		t.Errorf("QueueClaim with an empty holder: %v, want ErrInvalid naming the holder", err)
	}
	// A missing table says how to create it.
	missing, _ := sqlfence.New(sqlfence.Config{Dialect: sqlfence.Postgres, Table: e.schema + ".nope"})
	tx, _ := c.Begin(ctx)
	err := missing.Claim(ctx, pgxfence.Tx(tx), "r", hof(1), 1)
	if err == nil || !strings.Contains(err.Error(), "Migrate") || errors.Is(err, fence.ErrStale) {
		t.Fatalf("missing table: %v", err)
	}
	// Another dialect's fence refuses a pgx transaction.
	tx, _ = c.Begin(ctx)
	if err := sqlfence.SQLiteFence.Claim(ctx, pgxfence.Tx(tx), "r", hof(1), 1); !errors.Is(err, fence.ErrInvalid) {
		t.Fatalf("SQLite fence with pgx: %v", err)
	}
}

// directFormSQL is the direct form as fence/README.md documents it: the
// protected row carries the term that last wrote it.
const directFormSQL = `UPDATE %s SET status = $4, last_epoch = $2, last_holder = $3
WHERE id = $1 AND (last_epoch < $2 OR (last_epoch = $2 AND last_holder = $3))`

// The direct form: the protected row carries the term.
func TestPostgresDirectFormLastEpoch_FailsWithoutWhereClause(t *testing.T) {
	e := newPgEnv(t)
	ctx := context.Background()
	c := pgConnect(t)
	if _, err := c.Exec(ctx, `INSERT INTO `+e.t("invoices")+` (id, status) VALUES (42, 'open')`); err != nil {
		t.Fatal(err)
	}
	update := func(status string, token int64) int64 {
		tag, err := c.Exec(ctx, fmt.Sprintf(directFormSQL, e.t("invoices")), 42, token, hof(token), status)
		if err != nil {
			t.Fatal(err)
		}
		return tag.RowsAffected()
	}
	if n := update("paid by node-b", 2); n != 1 {
		t.Fatalf("token 2 updated %d rows", n)
	}
	if n := update("void by node-a", 1); n != 0 {
		t.Fatalf("stale token 1 updated %d rows", n)
	}
	if n := update("paid again by node-b", 2); n != 1 {
		t.Fatalf("token 2 again updated %d rows", n)
	}
	var status string
	var epoch int64
	c.QueryRow(ctx, `SELECT status, last_epoch FROM `+e.t("invoices")+` WHERE id = 42`).Scan(&status, &epoch)
	if status != "paid again by node-b" || epoch != 2 {
		t.Fatalf("row = %q epoch %d", status, epoch)
	}
}
