package postgres_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/postgres"
	"github.com/leasehold/leasehold/store/storetest"
)

// leaseRole creates a login role with no privileges, dropped at cleanup, and
// returns it and a DSN that logs in as it.
func leaseRole(t *testing.T) (string, string) {
	t.Helper()
	role := "lh_test_role_" + randomSuffix()
	admin := adminConn(t)
	if _, err := admin.Exec(ctxFor(t), `CREATE ROLE `+role+` LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE`); err != nil {
		t.Fatalf("create role: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c := adminConn(t)
		// Its schemas are dropped by their own cleanups, which run first.
		if _, err := c.Exec(ctx, `DROP OWNED BY `+role+`; DROP ROLE `+role); err != nil {
			t.Errorf("drop role %s: %v", role, err)
		}
	})
	u, err := url.Parse(testDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	return role, u.String()
}

// grantLeasePrivileges runs the GRANTs the README gives, and no more.
func grantLeasePrivileges(t *testing.T, schema, role string) {
	t.Helper()
	if _, err := adminConn(t).Exec(ctxFor(t), strings.NewReplacer("{s}", schema, "{r}", role).Replace(`
		GRANT USAGE ON SCHEMA {s} TO {r};
		GRANT SELECT, INSERT, UPDATE ON {s}.leader_lease TO {r};
		GRANT SELECT ON {s}.leader_lease_history TO {r};
		GRANT SELECT, INSERT, UPDATE, DELETE ON {s}.leader_lease_queue TO {r};
		GRANT SELECT, INSERT, UPDATE ON {s}.leader_lease_qseq TO {r};`)); err != nil {
		t.Fatalf("grant: %v", err)
	}
}

// TestLeastPrivilege runs the conformance suite as a role that has only the
// privileges the README lists (USAGE on the schema; SELECT, INSERT, UPDATE
// on the lease table; SELECT on the history table; the fair queue's two
// tables), then the optional
// capabilities, a Lock hand-off through LISTEN/NOTIFY, and a no-op Migrate.
func TestLeastPrivilege(t *testing.T) {
	role, roleDSN := leaseRole(t)
	roleDSN = withParams(t, roleDSN, "pool_max_conns", "2")
	setup := func(t *testing.T) string {
		schema := migrated(t) // by the admin
		grantLeasePrivileges(t, schema, role)
		return schema
	}
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T) func() (store.Store, error) {
			schema := setup(t)
			return func() (store.Store, error) {
				return postgres.Open(context.Background(), roleDSN, postgres.Options{Schema: schema})
			}
		},
		MinTTL:   harnessMinTTL,
		QueueTTL: harnessQueueTTL,
	})

	t.Run("Capabilities", func(t *testing.T) {
		schema := setup(t)
		ctx := ctxFor(t)
		// CreateIfMissing on a current schema runs no DDL, so it works.
		st, err := postgres.Open(ctx, roleDSN, postgres.Options{Schema: schema, CreateIfMissing: true})
		if err != nil {
			t.Fatalf("Open with CreateIfMissing as the lease role: %v", err)
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
		a, err := st.TryAdvisoryLock(ctx, "cron", "node-a", postgres.AdvisoryOptions{})
		if err != nil {
			t.Fatalf("TryAdvisoryLock: %v", err)
		}
		a.Release(ctx)

		// A hand-off woken by NOTIFY: LISTEN needs no privilege.
		other, err := postgres.Open(ctx, roleDSN, postgres.Options{Schema: schema, NoWatch: true})
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close()
		h2, err := other.Acquire(ctx, "job", "node-b", time.Minute, "")
		if err != nil {
			t.Fatal(err)
		}
		got := startWaiter(t, st, "job", slowPoll)
		if err := other.Release(ctx, h2.Term); err != nil {
			t.Fatal(err)
		}
		recvHeld(t, got)

		// And the role cannot do what it was not granted.
		var pe *pgconn.PgError
		conn := roleConn(t, roleDSN)
		if _, err := conn.Exec(ctx, `DELETE FROM `+schema+`.leader_lease`); !errors.As(err, &pe) || pe.Code != "42501" {
			t.Fatalf("DELETE as the lease role: %v, want permission denied", err)
		}
		if _, err := conn.Exec(ctx, `INSERT INTO `+schema+`.leader_lease_history (name, epoch, event) VALUES ('x', 1, 'forged')`); !errors.As(err, &pe) || pe.Code != "42501" {
			t.Fatalf("writing the history as the lease role: %v, want permission denied", err)
		}
	})

	t.Run("MigrateNeedsDDL", func(t *testing.T) {
		schema := freshSchema(t)
		if _, err := adminConn(t).Exec(ctxFor(t), `GRANT USAGE ON SCHEMA `+schema+` TO `+role); err != nil {
			t.Fatal(err)
		}
		_, err := postgres.Open(ctxFor(t), roleDSN, postgres.Options{Schema: schema, CreateIfMissing: true})
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "42501" || !strings.Contains(err.Error(), "migrate") {
			t.Fatalf("CreateIfMissing without CREATE on the schema: %v, want a permission error from migrate", err)
		}
	})
}
