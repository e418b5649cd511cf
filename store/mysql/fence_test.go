package mysql_test

import (
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold/fence"
	"github.com/leasehold/leasehold/fence/sqlfence"
	"github.com/leasehold/leasehold/store"
	lhmysql "github.com/leasehold/leasehold/store/mysql"
)

// TestSQLFenceWithStoreTokens: sqlfence's MySQL fence, in the same
// database, with tokens from this store. A holder whose term was ended by
// force (as a paused holder's would expire) writes after its successor: its
// write is refused and rolled back, the successor's stays. Negative
// control: the same stale write without the claim commits, so the refusal
// comes from the fence.
func TestSQLFenceWithStoreTokens(t *testing.T) {
	db := migrated(t)
	st := openStore(t, db, lhmysql.Options{})
	app := rawDB(t, db)
	ctx := ctxFor(t)
	if err := sqlfence.MySQLFence.Migrate(ctx, app); err != nil {
		t.Fatal(err)
	}
	mustExec(t, app, `CREATE TABLE invoices (id INT PRIMARY KEY, status VARCHAR(32))`)
	mustExec(t, app, `INSERT INTO invoices VALUES (1, 'new')`)
	write := func(term store.Term, status string, claim bool) error {
		tx, err := app.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if claim {
			if err := sqlfence.MySQLFence.Claim(ctx, sqlfence.SQLTx(tx), "invoices", term.Holder, term.Token); err != nil {
				return err
			}
		}
		if _, err := tx.ExecContext(ctx, `UPDATE invoices SET status = ? WHERE id = 1`, status); err != nil {
			return err
		}
		return tx.Commit()
	}
	status := func() string {
		var s string
		if err := app.QueryRowContext(ctx, `SELECT status FROM invoices WHERE id = 1`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	a, err := st.Acquire(ctx, "billing", "node-a", time.Minute, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := write(a.Term, "by-a", true); err != nil {
		t.Fatalf("the holder's fenced write: %v", err)
	}
	if _, err := st.ForceRelease(ctx, "billing"); err != nil {
		t.Fatal(err)
	}
	b, err := st.Acquire(ctx, "billing", "node-b", time.Minute, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := write(b.Term, "by-b", true); err != nil {
		t.Fatalf("the successor's fenced write: %v", err)
	}
	err = write(a.Term, "stale-a", true)
	var se *fence.StaleError
	if !errors.Is(err, fence.ErrStale) || !errors.As(err, &se) {
		t.Fatalf("the old holder's fenced write: %v, want fence.ErrStale", err)
	}
	if s := status(); s != "by-b" {
		t.Fatalf("after the refused write the row says %q, want by-b", s)
	}
	if err := write(a.Term, "stale-a", false); err != nil {
		t.Fatalf("the negative control's unfenced write: %v", err)
	}
	if s := status(); s != "stale-a" {
		t.Fatalf("the unfenced stale write did not land (%q): the control cannot tell the fence from something else", s)
	}
	var _ *sql.DB = app
}
