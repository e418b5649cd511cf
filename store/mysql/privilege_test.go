package mysql_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/leasehold/leasehold/store"
	lhmysql "github.com/leasehold/leasehold/store/mysql"
	"github.com/leasehold/leasehold/store/storetest"
)

// leaseUser creates a user with a password and no privileges, dropped at
// cleanup; it returns the user and its password.
func leaseUser(t *testing.T) (string, string) {
	t.Helper()
	user, pass := "lh_u_"+randomSuffix(), "pw-"+randomSuffix()
	mustExec(t, rawDB(t, ""), fmt.Sprintf(`CREATE USER '%s'@'%%' IDENTIFIED BY '%s'`, user, pass))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := rawDB(t, "").ExecContext(ctx, fmt.Sprintf(`DROP USER '%s'@'%%'`, user)); err != nil {
			t.Errorf("drop user %s: %v", user, err)
		}
	})
	return user, pass
}

// grantLeasePrivileges runs the GRANTs the README gives, and no more.
func grantLeasePrivileges(t *testing.T, db, user string) {
	t.Helper()
	admin := rawDB(t, "")
	for _, q := range []string{
		`GRANT SELECT, INSERT, UPDATE ON %[1]s.leader_lease TO '%[2]s'@'%%'`,
		`GRANT SELECT ON %[1]s.leader_lease_history TO '%[2]s'@'%%'`,
		`GRANT SELECT ON %[1]s.leader_lease_epochs TO '%[2]s'@'%%'`,
		`GRANT SELECT, INSERT, UPDATE, DELETE ON %[1]s.leader_lease_queue TO '%[2]s'@'%%'`,
		`GRANT SELECT, INSERT, UPDATE ON %[1]s.leader_lease_qseq TO '%[2]s'@'%%'`,
	} {
		mustExec(t, admin, fmt.Sprintf(q, db, user))
	}
}

func userConfig(t *testing.T, db, user, pass string) *mysql.Config {
	cfg := dbConfig(t, db)
	cfg.User, cfg.Passwd = user, pass
	return cfg
}

// TestLeastPrivilege runs the conformance suite, its losses included, as a
// user that has only the privileges the README lists; then the optional
// capabilities, a GET_LOCK lock, a no-op Migrate; and checks that the user
// cannot do what it was not granted.
func TestLeastPrivilege(t *testing.T) {
	user, pass := leaseUser(t)
	setup := func(t *testing.T) string {
		db := migrated(t) // by the admin
		grantLeasePrivileges(t, db, user)
		return db
	}
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T) func() (store.Store, error) {
			db := setup(t)
			return func() (store.Store, error) {
				return lhmysql.Open(context.Background(), userConfig(t, db, user, pass), lhmysql.Options{})
			}
		},
		MinTTL:   harnessMinTTL,
		QueueTTL: harnessQueueTTL,
		Losses:   mysqlLosses()[2:3], // TRUNCATE by the admin: the user's next grant reads the mark
	})

	t.Run("Capabilities", func(t *testing.T) {
		db := setup(t)
		ctx := ctxFor(t)
		st, err := lhmysql.Open(ctx, userConfig(t, db, user, pass), lhmysql.Options{CreateIfMissing: true})
		if err != nil {
			t.Fatalf("Open with CreateIfMissing as the lease user: %v", err)
		}
		defer st.Close()
		held, err := st.Acquire(ctx, "job", "node-a", time.Minute, "")
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := st.RenewMany(ctx, []store.Term{held.Term}, time.Minute); err != nil {
			t.Fatalf("RenewMany: %v", err)
		}
		if _, err := st.List(ctx); err != nil {
			t.Fatalf("List: %v", err)
		}
		if _, err := st.ForceRelease(ctx, "job"); err != nil {
			t.Fatalf("ForceRelease: %v", err)
		}
		if h, err := st.History(ctx, "job", 10); err != nil || len(h) != 2 {
			t.Fatalf("History = %+v, %v; want acquired and force-released (written by the trigger)", h, err)
		}
		l, err := st.TryGetLock(ctx, "cron", "node-a", lhmysql.LockOptions{})
		if err != nil {
			t.Fatalf("TryGetLock: %v", err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		conn := st.DB()
		for _, q := range []string{
			`DELETE FROM leader_lease`,
			`TRUNCATE TABLE leader_lease`,
			`INSERT INTO leader_lease_history (name, epoch, ended, event, at) VALUES ('x', 1, 0, 'forged', UTC_TIMESTAMP(6))`,
			`UPDATE leader_lease_epochs SET epoch = 0`,
			`DROP TRIGGER leader_lease_lh_bd`,
		} {
			var me *mysql.MySQLError
			if _, err := conn.ExecContext(ctx, q); !errors.As(err, &me) || (me.Number != 1142 && me.Number != 1227 && me.Number != 1044) {
				t.Errorf("%s as the lease user: %v, want a privilege error", q, err)
			}
		}
	})

	t.Run("MigrateNeedsDDL", func(t *testing.T) {
		db := freshDB(t)
		_, err := lhmysql.Open(ctxFor(t), userConfig(t, db, user, pass), lhmysql.Options{CreateIfMissing: true})
		var me *mysql.MySQLError
		if !errors.As(err, &me) || (me.Number != 1142 && me.Number != 1044) {
			t.Fatalf("CreateIfMissing without CREATE: %v, want a privilege error from migrate", err)
		}
	})
}
