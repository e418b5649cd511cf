package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The fair queue (store.Queuer) of lease name N is N's rows in
// <table>_queue, one per waiter's place: (name, holder), its position seq
// and its expiry, and N's row in <table>_qseq, the last position given out.
// Enqueue is one transaction:
//
//  1. it raises N's counter (INSERT ... ON DUPLICATE KEY UPDATE, the new
//     value coming back through LAST_INSERT_ID). The row lock it takes is
//     held to the end of the transaction, so the enqueues of N run one after
//     another, in the order of their positions;
//  2. it deletes N's expired places, writes or refreshes the waiter's place,
//     and counts the live places before it. The count is the transaction's
//     first consistent read, so (REPEATABLE READ or READ COMMITTED) its
//     snapshot is taken after the lock, and sees every place queued before.
//
// Expiry is UTC_TIMESTAMP(6), fixed when each statement starts. The
// statements of step 2 start after the counter's lock was granted, so a
// long wait for it does not shorten a place; a refresh never moves a place's
// expiry back (GREATEST), whatever a statement delayed by another lock saw as
// its now. A place only orders who tries: a wrong expiry delays or hurries a
// waiter, never grants anything.
//
// MySQL pushes nothing, so a waiter learns that it moved up through the
// poller: for the names queued through this Store, it also reads the
// position of the first live place, and a change wakes the watchers. A
// place that leaves through this Store (Dequeue, or expired places Enqueue
// dropped) wakes them at once.

func (s *Store) enqueueSQL() (bump, drop, place, ahead string) {
	r := s.n.replacer()
	return r.Replace(`INSERT INTO {{qs}} (name, n) VALUES (?, LAST_INSERT_ID(1)) ON DUPLICATE KEY UPDATE n = LAST_INSERT_ID(n + 1)`),
		r.Replace(`DELETE FROM {{q}} WHERE name = ? AND expires_at <= {{now}}`),
		r.Replace(`INSERT INTO {{q}} (name, holder, seq, expires_at) VALUES (?, ?, ?, {{now}} + INTERVAL ? MICROSECOND)
ON DUPLICATE KEY UPDATE expires_at = GREATEST(expires_at, VALUES(expires_at))`),
		r.Replace(`SELECT COUNT(*) FROM {{q}} AS o JOIN {{q}} AS me ON me.name = o.name AND me.holder = ?
WHERE o.name = ? AND o.seq < me.seq AND o.expires_at > {{now}}`)
}

// Enqueue implements store.Queuer (see above): two statements for a
// waiter whose place is live, the transaction above for a new place.
func (s *Store) Enqueue(ctx context.Context, name, holder string, ttl time.Duration) (int, error) {
	if err := s.life.Check(ctx); err != nil {
		return 0, err
	}
	op := "enqueue " + strconv.Quote(name)
	if err := kit.CheckEnqueue(name, holder, ttl); err != nil {
		return 0, err
	}
	bump, drop, place, count := s.enqueueSQL()
	var ahead, dropped int64
	s.qmu.Lock()
	if s.queued == nil {
		s.queued = map[string]map[string]bool{}
	}
	if s.queued[name] == nil {
		s.queued[name] = map[string]bool{}
	}
	s.queued[name][holder] = true
	s.qmu.Unlock()
	// The fast path: a waiter whose place is live refreshes it and counts
	// the places before it, two autocommit statements without the
	// counter's lock. Every place before it was queued by an enqueue that
	// held the counter's lock before this place's did, and so committed
	// before this place existed: the count sees it.
	n, _, err := exec(ctx, s.db, s.n.replacer().Replace(`UPDATE {{q}} SET expires_at = GREATEST(expires_at, {{now}} + INTERVAL ? MICROSECOND)
WHERE name = ? AND holder = ? AND expires_at > {{now}}`), ttlMicros(ttl), name, holder)
	if err != nil {
		return 0, s.opErr(op, err)
	}
	if n == 1 {
		err := query(ctx, s.db, count, []any{holder, name}, func(r *sql.Rows) error { return r.Scan(&ahead) })
		if err != nil {
			return 0, s.opErr(op, err)
		}
		return int(ahead), nil
	}
	// A deadlock rolls the whole transaction back: it is sent again whole.
	err = retry(ctx, func() error {
		tx, err := s.db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		res, err := tx.ExecContext(ctx, bump, name)
		if err != nil {
			return err
		}
		seq, err := res.LastInsertId()
		if err != nil {
			return err
		}
		if seq <= 0 {
			return fmt.Errorf("the queue counter of %q came back as %d", name, seq)
		}
		if res, err = tx.ExecContext(ctx, drop, name); err != nil {
			return err
		}
		if dropped, err = res.RowsAffected(); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, place, name, holder, seq, ttlMicros(ttl)); err != nil {
			return err
		}
		if err := tx.QueryRowContext(ctx, count, holder, name).Scan(&ahead); err != nil {
			return err
		}
		return tx.Commit()
	})
	if err != nil {
		return 0, s.opErr(op, err)
	}
	if dropped > 0 {
		s.hub.Notify(name)
	}
	return int(ahead), nil
}

// Dequeue implements store.Queuer: one DELETE; the watchers of name on this
// Store are woken at once, those on others at their poller's next read.
func (s *Store) Dequeue(ctx context.Context, name, holder string) error {
	if err := s.life.Check(ctx); err != nil {
		return err
	}
	op := "dequeue " + strconv.Quote(name)
	if err := kit.CheckDequeue(name, holder); err != nil {
		return err
	}
	n, _, err := exec(ctx, s.db, s.n.replacer().Replace(`DELETE FROM {{q}} WHERE name = ? AND holder = ?`), name, holder)
	if err != nil {
		return s.opErr(op, err)
	}
	s.qmu.Lock()
	if hs := s.queued[name]; hs != nil {
		delete(hs, holder)
		if len(hs) == 0 {
			delete(s.queued, name)
		}
	}
	s.qmu.Unlock()
	if n > 0 {
		s.hub.Notify(name)
	}
	return nil
}

// readQueueHeads sets the qhead of the names queued through this Store to
// the position of their queue's first live place.
func (s *Store) readQueueHeads(ctx context.Context, names []string, out map[string]leaseState) error {
	s.qmu.Lock()
	var queued []any
	for _, n := range names {
		if len(s.queued[n]) > 0 {
			queued = append(queued, n)
		}
	}
	s.qmu.Unlock()
	for len(queued) > 0 {
		chunk := queued[:min(len(queued), 500)]
		queued = queued[len(chunk):]
		q := s.n.replacer().Replace(`SELECT name, MIN(seq) FROM {{q}} WHERE expires_at > {{now}} AND name IN (?` + strings.Repeat(",?", len(chunk)-1) + `) GROUP BY name`)
		err := query(ctx, s.db, q, chunk, func(r *sql.Rows) error {
			var name string
			var head int64
			if err := r.Scan(&name, &head); err != nil {
				return err
			}
			st := out[name]
			st.qhead = head
			out[name] = st
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}
