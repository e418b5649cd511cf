package pgxfence_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/fence"
	"github.com/leasehold/leasehold/fence/sqlfence"
	"github.com/leasehold/leasehold/fence/sqlfence/pgxfence"
	"github.com/leasehold/leasehold/internal/testenv"
)

// The adapters on a real PostgreSQL: Migrate through Execer, a claim through
// Tx (admitted, then refused as stale and rolled back), a pipelined claim
// through Batch, and another dialect's fence refusing a pgx transaction. The
// fence's own behaviour is tested in package sqlfence, through these same
// adapters.
func TestAdaptersOnPostgres(t *testing.T) {
	testenv.RequireTCP(t, "PostgreSQL", "127.0.0.1:5432", "start PostgreSQL with user postgres (trust) and database test, or set LEASEHOLD_TEST_POSTGRES")
	dsn := testenv.Env("LEASEHOLD_TEST_POSTGRES", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect to PostgreSQL: %v", err)
	}
	defer c.Close(context.Background())
	b := make([]byte, 6)
	rand.Read(b)
	schema := "pgxfence_" + hex.EncodeToString(b)
	if _, err := c.Exec(ctx, `CREATE SCHEMA `+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Exec(context.Background(), `DROP SCHEMA `+schema+` CASCADE`) })
	f, err := sqlfence.New(sqlfence.Config{Dialect: sqlfence.Postgres, Table: schema + ".leasehold_fence"})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 { // idempotent
		if err := f.Migrate(ctx, pgxfence.Execer(c)); err != nil {
			t.Fatalf("Migrate: %v", err)
		}
	}

	claim := func(holder string, token int64) error {
		tx, err := c.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		if err := f.Claim(ctx, pgxfence.Tx(tx), "r", holder, token); err != nil {
			if tx.Commit(ctx) == nil {
				t.Errorf("claim of %s#%d refused (%v), yet its transaction committed", holder, token, err)
			}
			return err
		}
		return tx.Commit(ctx)
	}
	if err := claim("node-b", 2); err != nil {
		t.Fatalf("claim of token 2: %v", err)
	}
	var se *fence.StaleError
	if err := claim("node-a", 1); !errors.As(err, &se) || se.Highest != 2 {
		t.Fatalf("claim of stale token 1: %v, want a StaleError with highest 2", err)
	}

	tx, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	batch := &pgx.Batch{}
	if err := f.QueueClaim(pgxfence.Batch(batch), "r", "node-a", 1); err != nil {
		t.Fatal(err)
	}
	if err := tx.SendBatch(ctx, batch).Close(); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("pipelined stale claim: %v, want ErrStale", err)
	}
	tx.Rollback(ctx)

	tx, err = c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := sqlfence.SQLiteFence.Claim(ctx, pgxfence.Tx(tx), "r", "node-b", 3); !errors.Is(err, fence.ErrInvalid) {
		t.Fatalf("SQLite fence with a pgx transaction: %v, want ErrInvalid", err)
	}
	if tx.Commit(ctx) == nil {
		t.Fatal("the refused transaction could still commit")
	}
	if pgxfence.Tx(nil) != nil || pgxfence.Batch(nil) != nil {
		t.Fatal("a nil pgx value must give a nil adapter, which the fence refuses")
	}
}
