package postgres_test

import (
	"testing"
	"time"

	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/postgres"
)

// now() is the moment a statement's transaction began, and a statement that
// waits for the row's lock (a loaded server, a delayed request) is judged
// against that moment when it finally runs. If such a statement names a
// live term (a renewal, or the holder's own acquire, delayed behind a newer
// grant) and commits after a newer statement moved the expiry later, the
// expiry must not move back to the older statement's start + ttl: the
// holder trusts the newer answer from when it sent it, and a rival would
// take over before that trust ends. The MySQL store had this bug, found by
// a chaos run; this store's statements have the same shape. Fails without
// greatest(expires_at, ...) in the grant and renewal.
func TestStaleStatementNeverShortensALiveTerm(t *testing.T) {
	for _, tc := range []struct {
		name string
		call func(st *postgres.Store, term store.Term) (store.Record, error)
	}{
		{"renew", func(st *postgres.Store, term store.Term) (store.Record, error) {
			return st.Renew(ctxFor(t), term, 10*time.Second)
		}},
		{"acquire by the holder", func(st *postgres.Store, term store.Term) (store.Record, error) {
			return st.Acquire(ctxFor(t), term.Name, term.Holder, 10*time.Second, "")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			schema := migrated(t)
			st := openStore(t, schema, postgres.Options{})
			rec, err := st.Acquire(ctxFor(t), "job", "a", 10*time.Second, "")
			if err != nil {
				t.Fatal(err)
			}
			raw := rawClient(t, schema)
			watch := rawClient(t, schema)
			tx, err := raw.Begin(ctxFor(t))
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctxFor(t))
			if _, err := tx.Exec(ctxFor(t), "SELECT 1 FROM leader_lease WHERE name = 'job' FOR UPDATE"); err != nil {
				t.Fatal(err)
			}
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
				err := watch.QueryRow(ctxFor(t), "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()").Scan(&n)
				return err == nil && n > 0
			})
			// Meanwhile a newer renewal (clock_timestamp(): a statement that
			// began after it) moves the expiry later and commits first.
			var newer time.Time
			if err := tx.QueryRow(ctxFor(t), "UPDATE leader_lease SET expires_at = clock_timestamp() + interval '10 seconds' WHERE name = 'job' RETURNING expires_at").Scan(&newer); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(ctxFor(t)); err != nil {
				t.Fatal(err)
			}
			a := <-done
			if a.err != nil {
				t.Fatalf("the delayed %s: %v", tc.name, a.err)
			}
			var after time.Time
			if err := watch.QueryRow(ctxFor(t), "SELECT expires_at FROM leader_lease WHERE name = 'job'").Scan(&after); err != nil {
				t.Fatal(err)
			}
			if after.Before(newer) {
				t.Fatalf("the delayed %s moved the live term's expiry back from %v to %v (its own start + ttl): a rival can take over while the holder still trusts the newer renewal", tc.name, newer, after)
			}
		})
	}
}
