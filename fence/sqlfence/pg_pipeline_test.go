package sqlfence_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/fence"
	"github.com/leasehold/leasehold/fence/sqlfence"
	"github.com/leasehold/leasehold/fence/sqlfence/pgxfence"
)

// The pipelined claim: claim and write in one round trip; a stale claim makes
// the database abort the transaction, so the write queued after it never
// runs and the transaction cannot commit.
func TestPostgresQueueClaimRefusesStaleToken_FailsWithoutTokenCheck(t *testing.T) {
	e := newPgEnv(t)
	ctx := context.Background()
	c := pgConnect(t)
	write := func(attempt string, token int64) (error, error) {
		tx, err := c.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		b := &pgx.Batch{}
		if err := e.fence.QueueClaim(pgxfence.Batch(b), "sweeper", hof(token), token); err != nil {
			t.Fatal(err)
		}
		b.Queue(`INSERT INTO `+e.t("attempts")+` VALUES ($1, $2)`, attempt, token)
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err, tx.Commit(ctx)
		}
		return nil, tx.Commit(ctx)
	}
	if err, cerr := write("b-1", 2); err != nil || cerr != nil {
		t.Fatalf("token 2: %v, %v", err, cerr)
	}
	if err, cerr := write("b-2", 2); err != nil || cerr != nil {
		t.Fatalf("token 2 again: %v, %v", err, cerr)
	}
	err, cerr := write("a-1", 1)
	var se *fence.StaleError
	if !errors.As(err, &se) || se.Highest != 2 || se.Token != 1 || se.Resource != "sweeper" {
		t.Fatalf("token 1 after 2: %v, want StaleError{sweeper 1 2}", err)
	}
	if !errors.Is(cerr, pgx.ErrTxCommitRollback) {
		t.Fatalf("Commit after refusal: %v, want pgx.ErrTxCommitRollback (the database aborted it)", cerr)
	}
	if got := e.attempts(t); len(got) != 2 || got["a-1"] != 0 {
		t.Fatalf("committed attempts %v: the refused write left a trace", got)
	}
	if err := e.fence.QueueClaim(pgxfence.Batch(&pgx.Batch{}), "sweeper", hof(0), 0); !errors.Is(err, fence.ErrInvalid) {
		t.Fatalf("token 0: %v", err)
	}
	if err := sqlfence.SQLiteFence.QueueClaim(pgxfence.Batch(&pgx.Batch{}), "sweeper", hof(1), 1); !errors.Is(err, fence.ErrInvalid) {
		t.Fatalf("SQLite fence: %v", err)
	}
}

// The pipelined claim sent as a batch of its own, outside any explicit
// transaction: PostgreSQL runs the statements up to the batch's one Sync as a
// single implicit transaction, so the claim and the write commit together in
// one round trip. A stale claim aborts it: the write never commits. A write
// that fails after a good claim takes the claim down with it, which shows the
// two are one transaction; the negative control sends the same two statements
// in two transactions, where the claim stays committed alone.
func TestPostgresQueueClaimImplicitTransaction_FailsWithoutOneBatch(t *testing.T) {
	e := newPgEnv(t)
	ctx := context.Background()
	c := pgConnect(t)
	batch := func(resource, attempt string, token int64) error {
		b := &pgx.Batch{}
		if err := e.fence.QueueClaim(pgxfence.Batch(b), resource, hof(token), token); err != nil {
			t.Fatal(err)
		}
		b.Queue(`INSERT INTO `+e.t("attempts")+` VALUES ($1, $2)`, attempt, token)
		return c.SendBatch(ctx, b).Close()
	}
	if err := batch("sweeper", "b-1", 2); err != nil {
		t.Fatalf("token 2: %v", err)
	}
	err := batch("sweeper", "a-1", 1)
	var se *fence.StaleError
	if !errors.As(err, &se) || se.Highest != 2 || se.Token != 1 {
		t.Fatalf("token 1 after 2: %v, want StaleError{sweeper 1 2}", err)
	}
	if got := e.attempts(t); len(got) != 1 || got["b-1"] != 2 {
		t.Fatalf("committed attempts %v, want only b-1: the refused write left a trace", got)
	}
	if tx := c.PgConn().TxStatus(); tx != 'I' {
		t.Fatalf("connection left in transaction status %q after the refused batch", tx)
	}

	// A good claim whose write fails (a duplicate key) is not committed.
	if err := batch("other", "b-1", 5); err == nil {
		t.Fatal("duplicate attempt b-1 was accepted")
	}
	if tok := e.fenceToken(t, "other"); tok != 0 {
		t.Fatalf("claim of 'other' committed with token %d although its write failed in the same batch", tok)
	}

	// Negative control: the claim and the write as two transactions.
	if err := pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error {
		return e.fence.Claim(ctx, pgxfence.Tx(tx), "split", hof(5), 5)
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, `INSERT INTO `+e.t("attempts")+` VALUES ($1, $2)`, "b-1", int64(5)); err == nil {
		t.Fatal("duplicate attempt b-1 was accepted")
	}
	if tok := e.fenceToken(t, "split"); tok != 5 {
		t.Fatalf("negative control: the split claim's token is %d, want 5 committed alone (the check cannot tell one transaction from two)", tok)
	}
}
