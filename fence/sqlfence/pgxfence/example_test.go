package pgxfence_test

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/fence/sqlfence"
	"github.com/leasehold/leasehold/fence/sqlfence/pgxfence"
)

// The recommended fenced write on PostgreSQL: the claim queued ahead of the
// write in one batch, sent alone. PostgreSQL runs the batch as one implicit
// transaction, so claim and write commit together in one round trip, the
// round trip the unfenced write takes anyway. A stale term aborts the
// transaction inside the database: Close returns an error matching
// fence.ErrStale and the write never commits.
func Example_pipelinedClaim() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://127.0.0.1:5432/app")
	if err != nil {
		return
	}
	defer pool.Close()
	var lease *leasehold.Lease // held, from Lock.Acquire or an Elector's work
	t := lease.Term()

	b := &pgx.Batch{}
	if err := sqlfence.PostgresFence.QueueClaim(pgxfence.Batch(b), "invoices", t.Holder, t.Token); err != nil {
		return
	}
	b.Queue(`UPDATE invoices SET status = 'paid' WHERE id = $1`, 42)
	if err := pool.SendBatch(ctx, b).Close(); err != nil {
		return // errors.Is(err, fence.ErrStale): a newer term claimed "invoices"
	}

	// Reads between the claim and the writes need a transaction: begin it in
	// the same batch, then commit (two round trips in all).
	b = &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{})
	if err := sqlfence.PostgresFence.QueueClaim(pgxfence.Batch(b), "invoices", t.Holder, t.Token); err != nil {
		return
	}
	b.Queue(`SELECT status FROM invoices WHERE id = $1 FOR UPDATE`, 42)
	br := pool.SendBatch(ctx, b)
	if err := br.Close(); err != nil {
		return
	}
	br.Tx().Commit(ctx)
}
