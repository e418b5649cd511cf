package mysql_test

import (
	"testing"
	"time"

	"github.com/leasehold/leasehold/store"
	lhmysql "github.com/leasehold/leasehold/store/mysql"
)

// UTC_TIMESTAMP(6) is the moment a statement began, and a statement that
// waits for the row's lock (a loaded server, a delayed request) is judged
// against that moment when it finally runs. If such a statement names a
// live term (a renewal, or the holder's own acquire, delayed behind a newer
// grant) and commits after a newer statement moved the expiry later, the
// expiry must not move back to the older statement's start + ttl: the
// holder trusts the newer answer from when it sent it, and a rival would
// take over before that trust ends. A chaos run on MariaDB recorded a
// node's own acquire, given up by its client and run late, re-grant its
// live term with an expiry older than the term's grant, and a rival take
// the next token while the node could still trust its term. Fails without
// GREATEST(expires_at, ...) in the grant and renewal.
func TestStaleStatementNeverShortensALiveTerm(t *testing.T) {
	for _, tc := range []struct {
		name string
		// call is the statement that waits for the lock: the renewal of
		// term, or the acquire by its holder.
		call func(st *lhmysql.Store, term store.Term) (store.Record, error)
	}{
		{"renew", func(st *lhmysql.Store, term store.Term) (store.Record, error) {
			return st.Renew(ctxFor(t), term, 10*time.Second)
		}},
		{"acquire by the holder", func(st *lhmysql.Store, term store.Term) (store.Record, error) {
			return st.Acquire(ctxFor(t), term.Name, term.Holder, 10*time.Second, "")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := migrated(t)
			st := openStore(t, db, lhmysql.Options{})
			rec, err := st.Acquire(ctxFor(t), "job", "a", 10*time.Second, "")
			if err != nil {
				t.Fatal(err)
			}
			raw := rawDB(t, db)
			tx, err := raw.BeginTx(ctxFor(t), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			var x int
			if err := tx.QueryRowContext(ctxFor(t), "SELECT 1 FROM leader_lease WHERE name = 'job' FOR UPDATE").Scan(&x); err != nil {
				t.Fatal(err)
			}
			// The stale statement begins now and waits for the lock.
			type answer struct {
				rec store.Record
				err error
			}
			done := make(chan answer, 1)
			go func() {
				r, err := tc.call(st, rec.Term)
				done <- answer{r, err}
			}()
			waitFor(t, "the statement to wait for the row's lock", func() bool {
				var n int
				err := raw.QueryRowContext(ctxFor(t), "SELECT COUNT(*) FROM information_schema.INNODB_TRX WHERE trx_state = 'LOCK WAIT'").Scan(&n)
				return err == nil && n > 0
			})
			// Meanwhile a newer statement (begun after it) renews the term
			// and commits first, as a renewal sent later but run sooner
			// would.
			if _, err := tx.ExecContext(ctxFor(t), "UPDATE leader_lease SET expires_at = UTC_TIMESTAMP(6) + INTERVAL 10 SECOND WHERE name = 'job'"); err != nil {
				t.Fatal(err)
			}
			var newer string
			if err := tx.QueryRowContext(ctxFor(t), "SELECT DATE_FORMAT(expires_at, '%Y-%m-%d %H:%i:%s.%f') FROM leader_lease WHERE name = 'job'").Scan(&newer); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			a := <-done
			if a.err != nil {
				t.Fatalf("the delayed %s: %v", tc.name, a.err)
			}
			var after string
			var shortened bool
			if err := raw.QueryRowContext(ctxFor(t), "SELECT DATE_FORMAT(expires_at, '%Y-%m-%d %H:%i:%s.%f'), expires_at < ? FROM leader_lease WHERE name = 'job'", newer).Scan(&after, &shortened); err != nil {
				t.Fatal(err)
			}
			if shortened {
				t.Fatalf("the delayed %s moved the live term's expiry back from %s to %s (its own start + ttl): a rival can take over while the holder still trusts the newer renewal", tc.name, newer, after)
			}
		})
	}
}
