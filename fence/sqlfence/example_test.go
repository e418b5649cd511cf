package sqlfence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	_ "modernc.org/sqlite"

	"github.com/leasehold/leasehold/fence"
	"github.com/leasehold/leasehold/fence/sqlfence"
)

// The classic example. A sweeper job runs on whichever node holds the lease
// "sweeper". node-a holds it with token 1, then pauses (a GC pause, a VM
// migration, SIGSTOP) past its expiry; node-b takes over with token 2 and
// sweeps; node-a resumes, still believing it leads, and tries to sweep with
// token 1. Its write is refused, in the same transaction, by the database.
// (SQLite here so that it runs anywhere; PostgreSQL and MySQL are the same
// call with sqlfence.PostgresFence or sqlfence.MySQLFence.)
func Example_sweeper() {
	ctx := context.Background()
	db, _ := sql.Open("sqlite", ":memory:")
	defer db.Close()
	db.SetMaxOpenConns(1) // one in-memory database
	db.Exec(`CREATE TABLE sweeper_runs (node TEXT, token INTEGER, swept INTEGER)`)
	if err := sqlfence.SQLiteFence.Migrate(ctx, db); err != nil {
		fmt.Println(err)
		return
	}

	sweep := func(node string, token int64) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if _, err := tx.ExecContext(ctx, `INSERT INTO sweeper_runs VALUES (?, ?, 3)`, node, token); err != nil {
			return err
		}
		if err := sqlfence.SQLiteFence.Claim(ctx, sqlfence.SQLTx(tx), "sweeper", node, token); err != nil {
			return err // the transaction is rolled back: the row above is gone
		}
		return tx.Commit()
	}

	fmt.Println("node-b, token 2:", sweep("node-b", 2))
	err := sweep("node-a", 1) // node-a wakes up from its pause
	fmt.Println("node-a, token 1:", err)
	var stale *fence.StaleError
	if errors.As(err, &stale) {
		fmt.Printf("node-a steps down: token %d < highest %d\n", stale.Token, stale.Highest)
	}
	// The lease store lost data and granted token 2 again, to node-c: the
	// fence knows token 2 is node-b's term.
	err = sweep("node-c", 2)
	fmt.Println("node-c, token 2: stale", errors.Is(err, fence.ErrStale), "reused", errors.Is(err, fence.ErrTokenReused))

	rows, _ := db.Query(`SELECT node, token FROM sweeper_runs`)
	defer rows.Close()
	for rows.Next() {
		var node string
		var token int64
		rows.Scan(&node, &token)
		fmt.Printf("committed: %s with token %d\n", node, token)
	}
	// Output:
	// node-b, token 2: <nil>
	// node-a, token 1: leasehold/fence: stale fencing token for "sweeper": token 1 is below the highest admitted 2
	// node-a steps down: token 1 < highest 2
	// node-c, token 2: stale true reused true
	// committed: node-b with token 2
}

// The direct form: the protected row carries the last term (token and
// holder) that wrote it, and the UPDATE itself refuses a lower token, and the
// same token from another holder. No fence table is needed.
func Example_directForm() {
	ctx := context.Background()
	db, _ := sql.Open("sqlite", ":memory:")
	defer db.Close()
	db.SetMaxOpenConns(1)
	db.Exec(`CREATE TABLE invoices (id INTEGER PRIMARY KEY, status TEXT, last_epoch INTEGER NOT NULL DEFAULT 0, last_holder TEXT NOT NULL DEFAULT '')`)
	db.Exec(`INSERT INTO invoices (id, status) VALUES (42, 'open')`)

	update := func(holder string, epoch int64, status string) {
		// PostgreSQL: the same with $1 … $4.
		res, err := db.ExecContext(ctx, `UPDATE invoices SET status = ?4, last_epoch = ?2, last_holder = ?3
WHERE id = ?1 AND (last_epoch < ?2 OR (last_epoch = ?2 AND last_holder = ?3))`, 42, epoch, holder, status)
		if err != nil {
			fmt.Println(err)
			return
		}
		if n, _ := res.RowsAffected(); n == 0 {
			fmt.Printf("%s epoch %d: refused (another term has written invoice 42)\n", holder, epoch)
			return
		}
		fmt.Printf("%s epoch %d: invoice 42 is %s\n", holder, epoch, status)
	}
	update("node-b", 2, "paid")     // node-b, the current leader
	update("node-a", 1, "void")     // node-a, paused and resumed
	update("node-b", 2, "archived") // node-b's term writes again
	update("node-c", 2, "void")     // epoch 2 granted again after the lease store lost data

	var status string
	db.QueryRow(`SELECT status FROM invoices WHERE id = 42`).Scan(&status)
	fmt.Println("final:", status)
	// Output:
	// node-b epoch 2: invoice 42 is paid
	// node-a epoch 1: refused (another term has written invoice 42)
	// node-b epoch 2: invoice 42 is archived
	// node-c epoch 2: refused (another term has written invoice 42)
	// final: archived
}
