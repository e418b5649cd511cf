package postgres

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/leasehold/leasehold/store"
)

var (
	_ store.Queuer           = (*Store)(nil)
	_ store.UnqueuedAcquirer = (*Store)(nil)
)

// The fair queue of lease name N is N's rows in <table>_queue, one per
// waiter's place: (name, holder) with its position seq and its expiry, and
// N's row in <table>_qseq, the last position given out. Enqueue is one
// transaction of two statements:
//
//  1. it raises N's counter (an upsert, RETURNING the new value). The row
//     lock it takes is held to the end of the transaction, so the enqueues of
//     N run one after another, in the order of their positions;
//  2. it drops N's expired places, writes or refreshes the waiter's place,
//     and counts the live places before it. Under READ COMMITTED (the
//     default) this statement's snapshot is taken after the lock, so it sees
//     every place queued before; under REPEATABLE READ or SERIALIZABLE the
//     counter's upsert fails with a serialization error when another enqueue
//     of N committed since the snapshot, and the transaction is sent again.
//
// Expiry is judged on clock_timestamp(), the server's clock when the
// statement runs, not now(): now() is when the transaction began, before
// the wait for the counter's lock, and a place written as now() + ttl after
// a long wait would be shorter than ttl. A refresh never moves a place's
// expiry back (greatest). A place is only an order of who tries: a wrong
// expiry would delay or hurry a waiter, never grant anything.
//
// A place that leaves (Dequeue, or an expired place Enqueue drops) sends the
// lease table's NOTIFY with the name as payload, in the same transaction, so
// the listener of every Store wakes the watchers of the name.

// channelSQL is the lease table's NOTIFY channel, computed on the server as
// channelFor computes it (the trigger function names it as a literal) from
// the table's resolved schema and name; $tbl is the quoted table.
const channelSQL = `SELECT 'leasehold_' || substr(md5(n.nspname || '.' || c.relname), 1, 16)
	FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = to_regclass($tbl)`

func (s *Store) queueNames() (places, counter string) {
	return ident(s.schema, s.table+"_queue"), ident(s.schema, s.table+"_qseq")
}

// refreshSQL is Enqueue's fast path, one statement: a waiter whose place
// is live refreshes it and counts the live places before it, without the
// counter's lock. Every place before it was queued by an enqueue that held
// the counter's lock before this place's did, and so committed before this
// place existed: any later snapshot sees it. It also drops the expired
// places of the name (and NOTIFYs if it did). No row: the waiter has no
// live place, and takes the slow path.
func (s *Store) refreshSQL() string {
	q, _ := s.queueNames()
	return strings.NewReplacer("{{q}}", q, "{{chan}}", strings.ReplaceAll(channelSQL, "$tbl", "$4")).Replace(`WITH c AS MATERIALIZED (SELECT clock_timestamp() AS t),
me AS (
	UPDATE {{q}} AS p SET expires_at = greatest(p.expires_at, c.t + $3::float8 * interval '1 microsecond')
	FROM c WHERE p.name = $1 AND p.holder = $2 AND p.expires_at > c.t
	RETURNING p.seq
),
dead AS (
	DELETE FROM {{q}} AS d USING c WHERE d.name = $1 AND d.holder <> $2 AND d.expires_at <= c.t RETURNING 1
)
SELECT
	(SELECT count(*) FROM {{q}} AS o, me, c WHERE o.name = $1 AND o.holder <> $2 AND o.seq < me.seq AND o.expires_at > c.t),
	(SELECT count(pg_notify(ch.chan, $1)) FROM (SELECT 1 FROM dead LIMIT 1) AS x, ({{chan}}) AS ch(chan))
FROM me`)
}

func (s *Store) enqueueSQL() (bump, place string) {
	q, c := s.queueNames()
	r := strings.NewReplacer("{{q}}", q, "{{s}}", c, "{{chan}}", strings.ReplaceAll(channelSQL, "$tbl", "$5"))
	bump = r.Replace(`INSERT INTO {{s}} AS c (name, n) VALUES ($1, 1)
ON CONFLICT (name) DO UPDATE SET n = c.n + 1 RETURNING c.n`)
	place = r.Replace(`WITH c AS MATERIALIZED (SELECT clock_timestamp() AS t),
dead AS (
	DELETE FROM {{q}} AS d USING c WHERE d.name = $1 AND d.holder <> $2 AND d.expires_at <= c.t RETURNING 1
),
me AS (
	INSERT INTO {{q}} AS p (name, holder, seq, expires_at)
	SELECT $1, $2, $3::bigint, c.t + $4::float8 * interval '1 microsecond' FROM c
	ON CONFLICT (name, holder) DO UPDATE SET
		seq = CASE WHEN p.expires_at <= excluded.expires_at - $4::float8 * interval '1 microsecond' THEN excluded.seq ELSE p.seq END,
		expires_at = greatest(p.expires_at, excluded.expires_at)
	RETURNING p.seq
)
SELECT
	(SELECT count(*) FROM {{q}} AS o, me, c WHERE o.name = $1 AND o.holder <> $2 AND o.seq < me.seq AND o.expires_at > c.t),
	(SELECT count(pg_notify(ch.chan, $1)) FROM (SELECT 1 FROM dead LIMIT 1) AS x, ({{chan}}) AS ch(chan))`)
	return bump, place
}

// Enqueue implements store.Queuer (see above), on the server's clock: one
// statement for a waiter whose place is live (refreshSQL), the transaction
// above for a new place.
func (s *Store) Enqueue(ctx context.Context, name, holder string, ttl time.Duration) (int, error) {
	if err := s.life.Check(ctx); err != nil {
		return 0, err
	}
	if err := kit.CheckEnqueue(name, holder, ttl); err != nil {
		return 0, err
	}
	var ahead, notified int64
	refreshed := false
	err := s.retry(ctx, func() error {
		var err error
		refreshed, err = queryOne(ctx, s.q, s.refreshSQL(), []any{name, holder, ttlMicros(ttl), s.qtable}, &ahead, &notified)
		return err
	})
	if err != nil {
		return 0, s.opErr("enqueue", strconv.Quote(name), err)
	}
	if refreshed {
		return int(ahead), nil
	}
	bump, place := s.enqueueSQL()
	err = s.retry(ctx, func() error {
		return s.q.inTx(ctx, func(q querier) error {
			var seq int64
			if _, err := queryOne(ctx, q, bump, []any{name}, &seq); err != nil {
				return err
			}
			_, err := queryOne(ctx, q, place, []any{name, holder, seq, ttlMicros(ttl), s.qtable}, &ahead, &notified)
			return err
		})
	})
	if err != nil {
		return 0, s.opErr("enqueue", strconv.Quote(name), err)
	}
	return int(ahead), nil
}

// Dequeue implements store.Queuer: one statement, which also NOTIFYs the
// watchers of name if a place left.
func (s *Store) Dequeue(ctx context.Context, name, holder string) error {
	if err := s.life.Check(ctx); err != nil {
		return err
	}
	if err := kit.CheckDequeue(name, holder); err != nil {
		return err
	}
	q, _ := s.queueNames()
	stmt := strings.NewReplacer("{{q}}", q, "{{chan}}", strings.ReplaceAll(channelSQL, "$tbl", "$3")).Replace(`WITH gone AS (
	DELETE FROM {{q}} AS d WHERE d.name = $1 AND d.holder = $2 RETURNING 1
)
SELECT count(pg_notify(ch.chan, $1)) FROM (SELECT 1 FROM gone LIMIT 1) AS x, ({{chan}}) AS ch(chan)`)
	err := s.retry(ctx, func() error {
		var n int64
		_, err := queryOne(ctx, s.q, stmt, []any{name, holder, s.qtable}, &n)
		return err
	})
	if err != nil {
		return s.opErr("dequeue", strconv.Quote(name), err)
	}
	return nil
}

// AcquireUnqueued implements store.UnqueuedAcquirer: one statement, the
// acquire on the condition that the name's queue holds no live place
// (statements.acquireUnqueued), through its lease function <table>_acqfair
// or, where the database has none, as the statement itself (leaseQuery).
// Under READ COMMITTED the statement's snapshot is taken when it starts: a
// place committed meanwhile is one that arrived with this request, and
// either may go first. When nothing is granted it reads the lease, as
// Acquire does, to return the live term with store.ErrHeld; otherwise it
// answers store.ErrQueued.
func (s *Store) AcquireUnqueued(ctx context.Context, name, holder string, ttl time.Duration, metadata string) (store.Record, error) {
	return s.acquire(ctx, name, holder, ttl, metadata, true)
}
