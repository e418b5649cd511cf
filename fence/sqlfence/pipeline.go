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

// QueueClaim queues a claim of the term (holder, token) for resource in b, for
// tx.SendBatch:
// queued ahead of the caller's writes, the claim and the writes reach the
// server in one round trip, so the fence adds no round trip at all
// (PostgreSQL with pgx only).
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
//	t := leader.Term()
//	if err := sqlfence.PostgresFence.QueueClaim(b, "invoices", t.Holder, t.Token); err != nil {
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
func (f *Fence) QueueClaim(b *pgx.Batch, resource, holder string, token int64) error {
	if b == nil {
		return fmt.Errorf("leasehold/sqlfence: %w: batch is nil", fence.ErrInvalid)
	}
	if f.d != Postgres {
		return fmt.Errorf("leasehold/sqlfence: %w: QueueClaim needs the Postgres dialect, this fence is %v", fence.ErrInvalid, f.d)
	}
	if err := fence.ValidateTerm(resource, holder, token); err != nil {
		return fmt.Errorf("leasehold/sqlfence: claim: %w", err)
	}
	q := `WITH c AS (` + f.claimSQL + `)
SELECT CASE WHEN token = $2 AND holder = $3 THEN token ELSE ($4 || token)::bigint END FROM c`
	b.Queue(q, resource, token, holder, staleMarker).QueryRow(func(row pgx.Row) error {
		var got int64
		err := row.Scan(&got)
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "22P02" {
			if i := strings.Index(pe.Message, staleMarker); i >= 0 {
				h, perr := strconv.ParseInt(strings.TrimRight(pe.Message[i+len(staleMarker):], `"`), 10, 64)
				if perr == nil {
					return &fence.StaleError{Resource: resource, Token: token, Highest: h, Holder: holder}
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
