package sqlfence

import (
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/leasehold/leasehold/fence"
)

// staleMarker starts the text that the pipelined claim fails to cast to
// bigint when the token is stale, so that the database itself aborts the
// transaction. The highest token follows it.
const staleMarker = "leasehold/sqlfence: stale fencing token, highest "

// Batch is a pipeline of statements sent to the server in one round trip,
// within the caller's transaction: pgxfence.Batch adapts a *pgx.Batch.
type Batch interface {
	// Queue adds query with args to the batch; when its answer is read, scan
	// is given its first row, whose Scan reports the statement's error, or an
	// error matching sql.ErrNoRows if the statement returned no row.
	Queue(query string, args []any, scan func(Row) error)
}

// QueueClaim queues a claim of the term (holder, token) for resource in b:
// queued ahead of the caller's writes, the claim and the writes reach the
// server in one round trip, so the fence adds no round trip at all
// (PostgreSQL; with pgx, b is pgxfence.Batch(&pgx.Batch{}) sent by
// tx.SendBatch).
//
// If the term is stale (a lower token, or the highest token claimed by
// another holder), the claim statement fails inside the database, which
// aborts the transaction: the writes queued after it do not run, and the
// transaction can only roll back (a Commit reports pgx.ErrTxCommitRollback).
// The batch's Close (or reading results in order) returns a *fence.StaleError
// carrying the highest token (matching fence.ErrTokenReused when it equals
// ours). An empty holder is refused at once. The server logs that failure as an ERROR, which
// is the price of letting the database enforce it.
//
//	b := &pgx.Batch{}
//	t := lease.Term()
//	if err := sqlfence.PostgresFence.QueueClaim(pgxfence.Batch(b), "invoices", t.Holder, t.Token); err != nil {
//		return err
//	}
//	b.Queue(`UPDATE invoices SET status = $2 WHERE id = $1`, id, status)
//	if err := tx.SendBatch(ctx, b).Close(); err != nil {
//		return err // errors.Is(err, fence.ErrStale)
//	}
//	return tx.Commit(ctx)
//
// b may also be sent on its own (pool.SendBatch or conn.SendBatch, no
// transaction open): PostgreSQL runs the statements up to the batch's one
// Sync as a single implicit transaction, so the claim and the writes commit
// together in one round trip. This is the recommended form for writes that
// need no reads between them; b.BeginTx(pgx.TxOptions{}) before the claim
// begins an explicit transaction in the same round trip. Never let a Sync
// fall between the claim and the writes (two batches, or pipeline mode with a
// Sync in between): a claim committed alone no longer holds the fence row
// for the writes.
func (f *Fence) QueueClaim(b Batch, resource, holder string, token int64) error {
	if b == nil {
		return fmt.Errorf("leasehold/sqlfence: %w: batch is nil", fence.ErrInvalid)
	}
	if f.d != Postgres {
		return fmt.Errorf("leasehold/sqlfence: %w: QueueClaim needs the Postgres dialect, this fence is %v", fence.ErrInvalid, f.d)
	}
	if err := fence.ValidateTerm(resource, holder, token); err != nil {
		return fmt.Errorf("leasehold/sqlfence: claim: %w", err)
	}
	b.Queue(f.queueSQL, []any{resource, token, holder}, func(row Row) error {
		var got int64
		err := row.Scan(&got)
		if errors.Is(err, sql.ErrNoRows) {
			// The statement ran: it inserted the row, raised its token to
			// ours, or found it holding this term already. Admitted.
			return nil
		}
		if h, ok := staleHighest(err); ok {
			return &fence.StaleError{Resource: resource, Token: token, Highest: h, Holder: holder}
		}
		if err != nil {
			return f.wrap("claim", resource, token, err)
		}
		return fmt.Errorf("leasehold/sqlfence: claim %q with token %d: the claim returned a row (%d)", resource, token, got)
	})
	return nil
}

// staleHighest recognises the failed cast of a stale pipelined claim
// (SQLSTATE 22P02, invalid text representation, carrying staleMarker) and
// reads the highest token from it, without importing a driver.
func staleHighest(err error) (int64, bool) {
	var st interface{ SQLState() string }
	if err == nil || !errors.As(err, &st) || st.SQLState() != "22P02" {
		return 0, false
	}
	msg := err.Error()
	i := strings.Index(msg, staleMarker)
	if i < 0 {
		return 0, false
	}
	digits := msg[i+len(staleMarker):]
	n := 0
	for n < len(digits) && digits[n] >= '0' && digits[n] <= '9' {
		n++
	}
	h, perr := strconv.ParseInt(digits[:n], 10, 64)
	return h, perr == nil
}
