package sqlfence_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/leasehold/leasehold/fence/sqlfence"
	"github.com/leasehold/leasehold/fence/sqlfence/pgxfence"
)

// BenchmarkPostgresWrite measures the same write (one UPDATE in its own
// transaction) unfenced and fenced, on the real server, one connection:
//
//	unfenced          BEGIN; UPDATE; COMMIT
//	fenced            BEGIN; claim; UPDATE; COMMIT          (one statement more)
//	fenced-pipelined  BEGIN; [claim + UPDATE]; COMMIT       (QueueClaim: no round trip more)
//	autocommit        UPDATE                                (no transaction: one implicit)
//	fenced-batch      [claim + UPDATE]                      (QueueClaim, one batch, one implicit transaction)
//	lease-checked     BEGIN; lease check + claim; UPDATE; COMMIT
//	sql-unfenced, sql-fenced: the same through database/sql
//
// go test -run '^$' -bench PostgresWrite ./fence/sqlfence/
func BenchmarkPostgresWrite(b *testing.B) {
	e := newPgEnv(b)
	ctx := context.Background()
	c := pgConnect(b)
	if _, err := c.Exec(ctx, `INSERT INTO `+e.t("counters")+` VALUES (1, 0)`); err != nil {
		b.Fatal(err)
	}
	update := `UPDATE ` + e.t("counters") + ` SET n = n + 1 WHERE id = 1`
	term := e.grant(b, "bench", hof(1), 1, time.Hour) // the term every sub-benchmark claims as

	run := func(b *testing.B, body func(tx pgx.Tx) error) {
		defer serverCost(b, e, c)()
		for b.Loop() {
			tx, err := c.Begin(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if err := body(tx); err != nil {
				b.Fatal(err)
			}
			if err := tx.Commit(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("unfenced", func(b *testing.B) {
		run(b, func(tx pgx.Tx) error { _, err := tx.Exec(ctx, update); return err })
	})
	b.Run("fenced", func(b *testing.B) {
		run(b, func(tx pgx.Tx) error {
			if err := e.fence.Claim(ctx, pgxfence.Tx(tx), "bench", hof(1), 1); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, update)
			return err
		})
	})
	b.Run("fenced-pipelined", func(b *testing.B) {
		run(b, func(tx pgx.Tx) error {
			batch := &pgx.Batch{}
			if err := e.fence.QueueClaim(pgxfence.Batch(batch), "bench", hof(1), 1); err != nil {
				return err
			}
			batch.Queue(update)
			return tx.SendBatch(ctx, batch).Close()
		})
	})
	// The recommended form for a lone write: the claim and the write in one
	// batch sent outside a transaction (one implicit transaction), against
	// the same write sent alone in autocommit. Both are one round trip.
	auto := func(b *testing.B, body func() error) {
		defer serverCost(b, e, c)()
		for b.Loop() {
			if err := body(); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("autocommit", func(b *testing.B) {
		auto(b, func() error { _, err := c.Exec(ctx, update); return err })
	})
	b.Run("fenced-batch", func(b *testing.B) {
		auto(b, func() error {
			batch := &pgx.Batch{}
			if err := e.fence.QueueClaim(pgxfence.Batch(batch), "bench", hof(1), 1); err != nil {
				return err
			}
			batch.Queue(update)
			return c.SendBatch(ctx, batch).Close()
		})
	})
	b.Run("lease-checked", func(b *testing.B) {
		run(b, func(tx pgx.Tx) error {
			if err := e.fence.ClaimLease(ctx, pgxfence.Tx(tx), term, "bench"); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, update)
			return err
		})
	})

	db := e.sqlDB(b)
	db.SetMaxOpenConns(1)
	runSQL := func(b *testing.B, fenced bool) {
		for b.Loop() {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				b.Fatal(err)
			}
			if fenced {
				if err := e.fence.Claim(ctx, sqlfence.SQLTx(tx), "bench", hof(1), 1); err != nil {
					b.Fatal(err)
				}
			}
			if _, err := tx.ExecContext(ctx, update); err != nil {
				b.Fatal(err)
			}
			if err := tx.Commit(); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("sql-unfenced", func(b *testing.B) { runSQL(b, false) })
	b.Run("sql-fenced", func(b *testing.B) { runSQL(b, true) })
}

// serverCost starts measuring what the writes cost the server, whose clock
// is not this machine's load: the WAL bytes written (the whole server's, so
// run nothing else against it) and the CPU time of c's backend process (the
// first field of /proc/<pid>/schedstat, nanoseconds on a CPU; a busy machine
// still inflates it a little, through caches and migrations, but no longer by
// its waits). The returned func reports both per op. The CPU figure needs the
// server on this host; it is left out otherwise.
func serverCost(b *testing.B, e *pgEnv, c *pgx.Conn) func() {
	ctx := context.Background()
	lsn := func() int64 {
		var n int64
		if err := e.admin.QueryRow(ctx, `SELECT pg_current_wal_lsn() - '0/0'::pg_lsn`).Scan(&n); err != nil {
			b.Fatal(err)
		}
		return n
	}
	pid := c.PgConn().PID()
	cpu := func() (time.Duration, bool) {
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/schedstat", pid))
		if err != nil {
			return 0, false
		}
		f := strings.Fields(string(raw))
		if len(f) == 0 {
			return 0, false
		}
		ns, err := strconv.ParseInt(f[0], 10, 64)
		return time.Duration(ns), err == nil
	}
	wal0 := lsn()
	cpu0, cpuOK := cpu()
	return func() {
		n := float64(b.N)
		b.ReportMetric(float64(lsn()-wal0)/n, "WAL-B/op")
		if cpu1, ok := cpu(); ok && cpuOK {
			b.ReportMetric(float64((cpu1-cpu0).Nanoseconds())/1000/n, "server-µs/op")
		}
	}
}
