package mysql_test

import (
	"database/sql"
	"fmt"
	"strings"
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
			waitForLockWait(t, raw, db, done)
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

// waitForLockWait waits until a transaction on database db waits for a row
// lock (only this test uses db). It fails at once if the statement answered
// first, and quotes the last error of its own query if it times out.
func waitForLockWait[A any](t *testing.T, raw *sql.DB, db string, answered <-chan A) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var lastErr error
	for {
		select {
		case a := <-answered:
			t.Fatalf("the statement answered before it waited for the row's lock: %+v", a)
		default:
		}
		var n int
		lastErr = raw.QueryRowContext(ctxFor(t), `SELECT COUNT(*) FROM information_schema.INNODB_TRX
WHERE trx_state = 'LOCK WAIT'
  AND trx_mysql_thread_id IN (SELECT id FROM information_schema.PROCESSLIST WHERE db = ?)`, db).Scan(&n)
		if lastErr == nil && n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for the statement to wait for the row's lock (last check: %d waiting, error %v)\n%s", n, lastErr, sessionsOn(raw, db))
		}
		// InnoDB refreshes what INNODB_TRX shows only when the table was
		// last read more than 0.1 s ago: polled every 5 ms it showed the
		// same snapshot, taken before the statement began to wait, for the
		// whole 30 s (1 run in about 20 here).
		timer := time.NewTimer(150 * time.Millisecond)
		<-timer.C
	}
}

// sessionsOn describes the sessions on database db and their transactions,
// for a failure message.
func sessionsOn(raw *sql.DB, db string) string {
	rows, err := raw.Query(`SELECT p.id, COALESCE(p.command, ''), COALESCE(p.state, ''), COALESCE(p.info, ''), p.time,
  COALESCE(x.trx_state, '-'), COALESCE(x.trx_query, '')
FROM information_schema.PROCESSLIST p LEFT JOIN information_schema.INNODB_TRX x ON x.trx_mysql_thread_id = p.id
WHERE p.db = ?`, db)
	if err != nil {
		return "sessions: " + err.Error()
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var id, secs int64
		var cmd, state, info, trxState, trxQuery string
		if err := rows.Scan(&id, &cmd, &state, &info, &secs, &trxState, &trxQuery); err != nil {
			return b.String() + "sessions: " + err.Error()
		}
		fmt.Fprintf(&b, "session %d: %s %q %ds %q; transaction %s %q\n", id, cmd, state, secs, info, trxState, trxQuery)
	}
	return b.String()
}
