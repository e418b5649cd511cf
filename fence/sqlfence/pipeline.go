package sqlfence

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leasehold/leasehold/fence"
)

// staleMarker starts the text that the pipelined claim fails to cast to
// bigint when the token is stale, so that the database itself aborts the
// transaction. The highest token follows it.
const staleMarker = "leasehold/sqlfence: stale fencing token, highest "

// QueueClaim queues a claim of token for resource in b, for tx.SendBatch:
// queued ahead of the caller's writes, the claim and the writes reach the
// server in one round trip, so the fence adds no round trip at all
// (PostgreSQL with pgx only).
//
// If the token is stale, the claim statement fails inside the database, which
// aborts the transaction: the writes queued after it do not run, and the
// transaction can only roll back (a Commit reports pgx.ErrTxCommitRollback).
// The batch's Close (or reading results in order) returns a *fence.StaleError
// carrying the highest token. The server logs that failure as an ERROR, which
// is the price of letting the database enforce it.
//
//	b := &pgx.Batch{}
//	if err := sqlfence.PostgresFence.QueueClaim(b, "invoices", leader.Token()); err != nil {
//		return err
//	}
//	b.Queue(`UPDATE invoices SET status = $2 WHERE id = $1`, id, status)
//	if err := tx.SendBatch(ctx, b).Close(); err != nil {
//		return err // errors.Is(err, fence.ErrStale)
//	}
//	return tx.Commit(ctx)
//
// b must be sent within a transaction (tx.SendBatch); outside one, the claim
// and the writes would not commit together.
func (f *Fence) QueueClaim(b *pgx.Batch, resource string, token int64) error {
	if b == nil {
		return fmt.Errorf("leasehold/sqlfence: %w: batch is nil", fence.ErrInvalid)
	}
	if f.d != Postgres {
		return fmt.Errorf("leasehold/sqlfence: %w: QueueClaim needs the Postgres dialect, this fence is %v", fence.ErrInvalid, f.d)
	}
	if err := validate(resource, token); err != nil {
		return fmt.Errorf("leasehold/sqlfence: claim: %w", err)
	}
	q := `WITH c AS (` + f.claimSQL + `)
SELECT CASE WHEN token = $2 THEN token ELSE ($3 || token)::bigint END FROM c`
	b.Queue(q, resource, token, staleMarker).QueryRow(func(row pgx.Row) error {
		var got int64
		err := row.Scan(&got)
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "22P02" {
			if i := strings.Index(pe.Message, staleMarker); i >= 0 {
				h, perr := strconv.ParseInt(strings.TrimRight(pe.Message[i+len(staleMarker):], `"`), 10, 64)
				if perr == nil {
					return &fence.StaleError{Resource: resource, Token: token, Highest: h}
				}
			}
		}
		if err != nil {
			return f.wrap("claim", resource, token, err)
		}
		if got != token {
			return fmt.Errorf("leasehold/sqlfence: claim %q with token %d: the fence row says %d", resource, token, got)
		}
		return nil
	})
	return nil
}
