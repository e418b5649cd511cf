package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/fence/sqlfence"
	"github.com/leasehold/leasehold/fence/sqlfence/pgxfence"
)

// A fenced write against the same write unfenced, on PostgreSQL: the write
// is one UPDATE of one row, committed.
//
//   - tx:            BEGIN; UPDATE; COMMIT
//   - tx+Claim:      BEGIN; sqlfence Claim (the fence row's upsert); UPDATE; COMMIT
//   - tx+ClaimLease: BEGIN; sqlfence ClaimLease (also checks and share-locks the lease row); UPDATE; COMMIT
//   - tx+QueueClaim: BEGIN; [claim + UPDATE in one batch]; COMMIT
//   - batch tx:      [BEGIN + claim + UPDATE in one batch (pgx Batch.BeginTx)]; COMMIT
//   - autocommit:    UPDATE
//   - batch:         [claim + UPDATE in one batch, no BEGIN]: PostgreSQL runs
//                    the statements up to the batch's Sync as one implicit
//                    transaction, so claim and write commit together in one round trip
//   - direct:        UPDATE ... SET last_epoch = $token, last_holder = $holder
//                    WHERE ... AND (last_epoch < $token OR (last_epoch = $token AND last_holder = $holder)) (the row carries the term)
//
// The token is a real one: of a leasehold lock held on the same database.

const (
	fwTx         = "tx (unfenced)"
	fwClaim      = "tx + Claim"
	fwClaimLease = "tx + ClaimLease"
	fwAuto       = "autocommit (unfenced)"
	fwDirect     = "autocommit direct form"
	fwPipelined  = "tx + QueueClaim (pipelined with the write)"
	fwBatchTx    = "batch BEGIN + QueueClaim + write; COMMIT"
	fwBatch      = "one batch: QueueClaim + write (implicit tx)"
)

var fenceKinds = []string{fwTx, fwClaim, fwClaimLease, fwPipelined, fwBatchTx, fwAuto, fwDirect, fwBatch}

type fenceEnv struct {
	e     *pgEnv
	f     *sqlfence.Fence
	held  *leasehold.Lease
	items string
}

func (e *pgEnv) openFence(ctx context.Context) (*fenceEnv, error) {
	f, err := sqlfence.New(sqlfence.Config{Dialect: sqlfence.Postgres, Table: e.schema + ".fence", LeaseTable: e.schema + ".leader_lease"})
	if err != nil {
		return nil, err
	}
	if err := f.Migrate(ctx, pgxfence.Execer(e.pool)); err != nil {
		return nil, err
	}
	fe := &fenceEnv{e: e, f: f, items: e.schema + ".items"}
	if _, err := e.pool.Exec(ctx, `CREATE TABLE `+fe.items+` (id int PRIMARY KEY, val bigint NOT NULL, last_epoch bigint NOT NULL DEFAULT 0, last_holder text NOT NULL DEFAULT '');
INSERT INTO `+fe.items+` SELECT i, 0, 0 FROM generate_series(1, 100) i`); err != nil {
		return nil, err
	}
	lk, err := leasehold.NewLock(e.st, "fence-writer", leasehold.Config{Identity: "writer", KeepAlive: true})
	if err != nil {
		return nil, err
	}
	fe.held, err = lk.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	return fe, nil
}

func (fe *fenceEnv) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fe.held.Release(ctx)
}

// write does one write of kind to row id and returns its latency.
func (fe *fenceEnv) write(ctx context.Context, kind string, id int) (time.Duration, error) {
	pool := fe.e.pool
	term := fe.held.Term()
	tok := term.Token
	upd := `UPDATE ` + fe.items + ` SET val = val + 1 WHERE id = $1`
	start := time.Now()
	var err error
	switch kind {
	case fwAuto:
		_, err = pool.Exec(ctx, upd, id)
	case fwDirect:
		var tag interface{ RowsAffected() int64 }
		tag, err = pool.Exec(ctx, `UPDATE `+fe.items+` SET val = val + 1, last_epoch = $2, last_holder = $3
WHERE id = $1 AND (last_epoch < $2 OR (last_epoch = $2 AND last_holder = $3))`, id, tok, term.Holder)
		if err == nil && tag.RowsAffected() != 1 {
			err = fmt.Errorf("direct form refused token %d", tok)
		}
	case fwPipelined:
		err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			b := &pgx.Batch{}
			if err := fe.f.QueueClaim(pgxfence.Batch(b), "items-pipelined", term.Holder, tok); err != nil {
				return err
			}
			b.Queue(upd, id)
			return tx.SendBatch(ctx, b).Close()
		})
	case fwBatchTx:
		b := &pgx.Batch{}
		b.BeginTx(pgx.TxOptions{})
		if err = fe.f.QueueClaim(pgxfence.Batch(b), "items-batch-tx", term.Holder, tok); err != nil {
			break
		}
		b.Queue(upd, id)
		err = func() error {
			br := pool.SendBatch(ctx, b)
			tx := br.Tx()
			if err := br.Close(); err != nil {
				tx.Rollback(ctx)
				return err
			}
			return tx.Commit(ctx)
		}()
	case fwBatch:
		b := &pgx.Batch{}
		if err = fe.f.QueueClaim(pgxfence.Batch(b), "items-batch", term.Holder, tok); err != nil {
			break
		}
		b.Queue(upd, id)
		err = pool.SendBatch(ctx, b).Close()
	default:
		err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			switch kind {
			case fwClaim:
				if err := fe.f.Claim(ctx, pgxfence.Tx(tx), "items", term.Holder, tok); err != nil {
					return err
				}
			case fwClaimLease:
				if err := fe.f.ClaimLease(ctx, pgxfence.Tx(tx), fe.held.Term(), "items-lease"); err != nil {
					return err
				}
			}
			_, err := tx.Exec(ctx, upd, id)
			return err
		})
	}
	return time.Since(start), err
}
