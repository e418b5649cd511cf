package mysql_test

import (
	"testing"

	"github.com/leasehold/leasehold/store"
	lhmysql "github.com/leasehold/leasehold/store/mysql"
	"github.com/leasehold/leasehold/store/storetest"
)

// dbOf is the database a harness's stores open on.
func dbOf(t *testing.T, open func() (store.Store, error)) string {
	st, err := open()
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var db string
	if err := st.(*lhmysql.Store).DB().QueryRowContext(ctxFor(t), `SELECT DATABASE()`).Scan(&db); err != nil {
		t.Fatal(err)
	}
	return db
}

// mysqlLosses are the losses the README speaks of, for the conformance
// suite: the tokens survive each.
func mysqlLosses() []storetest.Loss {
	return []storetest.Loss{
		{Name: "DELETE of the row", Survives: true, Lose: func(t *testing.T, open func() (store.Store, error), name string) error {
			_, err := rawDB(t, dbOf(t, open)).ExecContext(ctxFor(t), `DELETE FROM leader_lease WHERE name = ?`, name)
			return err
		}},
		{Name: "REPLACE of the row", Survives: true, Lose: func(t *testing.T, open func() (store.Store, error), name string) error {
			_, err := rawDB(t, dbOf(t, open)).ExecContext(ctxFor(t), `REPLACE INTO leader_lease (name, epoch) VALUES (?, 1)`, name)
			return err
		}},
		{Name: "TRUNCATE of the table (fires no trigger)", Survives: true, Lose: func(t *testing.T, open func() (store.Store, error), name string) error {
			mustExec(t, rawDB(t, dbOf(t, open)), `TRUNCATE TABLE leader_lease`)
			return nil
		}},
		{Name: "row deleted with the triggers dropped", Survives: true, Lose: func(t *testing.T, open func() (store.Store, error), name string) error {
			db := rawDB(t, dbOf(t, open))
			mustExec(t, db, "DROP TRIGGER leader_lease_lh_bd")
			mustExec(t, db, `DELETE FROM leader_lease WHERE name = ?`, name)
			return nil
		}},
	}
}
