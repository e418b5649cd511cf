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
