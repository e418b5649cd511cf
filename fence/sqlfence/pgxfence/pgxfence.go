// Package pgxfence adapts pgx v5 to package sqlfence, so that only the users
// of pgx link it: a transaction (Tx), a pool, connection or transaction for
// Migrate (Execer), and a batch for QueueClaim (Batch). The fence's
// operations stay methods of sqlfence.Fence:
//
//	tx, _ := pool.Begin(ctx)
//	defer tx.Rollback(ctx)
//	t := lease.Term()
//	if err := sqlfence.PostgresFence.Claim(ctx, pgxfence.Tx(tx), "invoices", t.Holder, t.Token); err != nil {
//		return err // errors.Is(err, fence.ErrStale): a newer term has written; tx is rolled back
//	}
//	// ... the caller's writes ...
//	return tx.Commit(ctx)
//
// pgx speaks PostgreSQL only: a fence of another dialect refuses these
// transactions with an error matching fence.ErrInvalid.
package pgxfence

import (
	"context"
	"database/sql"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leasehold/leasehold/fence/sqlfence"
)

// Tx adapts a pgx transaction to sqlfence.Tx. A nil tx gives a nil Tx. If tx
// is a nested transaction (a savepoint), a refused claim rolls back only that
// savepoint: do not commit the outer transaction either.
func Tx(tx pgx.Tx) sqlfence.Tx {
	if tx == nil {
		return nil
	}
	return pgxTx{tx}
}

type pgxTx struct{ tx pgx.Tx }

func (t pgxTx) QueryRow(ctx context.Context, q string, args ...any) sqlfence.Row {
	return t.tx.QueryRow(ctx, q, args...) // pgx.ErrNoRows matches sql.ErrNoRows
}

func (t pgxTx) Exec(ctx context.Context, q string, args ...any) (sql.Result, error) {
	tag, err := t.tx.Exec(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	return result{tag}, nil
}

func (t pgxTx) Rollback(ctx context.Context) error { return t.tx.Rollback(ctx) }

// Dialect tells a fence of another dialect to refuse the transaction.
func (pgxTx) Dialect() sqlfence.Dialect { return sqlfence.Postgres }

// result is a command tag as a sql.Result: PostgreSQL reports no insert id.
type result struct{ tag pgconn.CommandTag }

func (r result) LastInsertId() (int64, error) {
	return 0, errors.New("leasehold/pgxfence: PostgreSQL reports no last insert id")
}

func (r result) RowsAffected() (int64, error) { return r.tag.RowsAffected(), nil }

// Execer adapts what runs a statement in pgx (a *pgxpool.Pool, *pgx.Conn or
// pgx.Tx) to sqlfence.Execer, for Fence.Migrate. A nil db gives a nil Execer.
func Execer(db interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}) sqlfence.Execer {
	if db == nil {
		return nil
	}
	return execer{db.Exec}
}

type execer struct {
	exec func(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

func (e execer) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	tag, err := e.exec(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	return result{tag}, nil
}

// Batch adapts a pgx batch to sqlfence.Batch, for Fence.QueueClaim. Send b
// on its own (pool.SendBatch: one implicit transaction), begun with
// b.BeginTx, or with tx.SendBatch inside the transaction of the caller's
// writes; see Fence.QueueClaim. A nil b gives a nil Batch.
func Batch(b *pgx.Batch) sqlfence.Batch {
	if b == nil {
		return nil
	}
	return batch{b}
}

type batch struct{ b *pgx.Batch }

func (b batch) Queue(q string, args []any, scan func(sqlfence.Row) error) {
	b.b.Queue(q, args...).QueryRow(func(row pgx.Row) error { return scan(row) })
}
