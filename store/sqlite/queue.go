package sqlite

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/storekit"
)

var (
	_ store.Queuer           = (*Store)(nil)
	_ store.UnqueuedAcquirer = (*Store)(nil)
)

// The queue of a lease name is its rows in the table <table>_queue (see
// Migrate): a place is (name, holder), its position seq (AUTOINCREMENT:
// never reused, so a later place is always behind an earlier one) and its
// expiry on SQLite's clock. Enqueue runs in one BEGIN IMMEDIATE
// transaction, which holds the file's write lock, so every waiter of every
// process on the host sees the places in one order. SQLite has no watch:
// a fair waiter reads its place again each retry period.

// Enqueue implements store.Queuer: it drops the expired places of name
// (its own included: an expired place goes to the back), writes or
// refreshes holder's place, and counts the live places ahead of it.
func (s *Store) Enqueue(ctx context.Context, name, holder string, ttl time.Duration) (int, error) {
	if err := s.life.Check(ctx); err != nil {
		return 0, err
	}
	if err := kit.CheckEnqueue(name, holder, ttl); err != nil {
		return 0, err
	}
	op := fmt.Sprintf("enqueue %q", name)
	q := quote(s.queue)
	tx, err := s.db.BeginTx(ctx, nil) // BEGIN IMMEDIATE: the write lock first
	if err != nil {
		return 0, s.queueFail(op, err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `DELETE FROM `+q+` WHERE name = ?1 AND expires_at <= `+nowMS, name); err != nil {
		return 0, s.queueFail(op, err)
	}
	// An existing place is live (the expired ones are gone): keep its seq,
	// and never move its expiry back.
	if _, err := tx.ExecContext(ctx, `INSERT INTO `+q+` AS p (name, holder, expires_at) VALUES (?1, ?2, `+nowMS+` + ?3)
		ON CONFLICT (name, holder) DO UPDATE SET expires_at = MAX(p.expires_at, excluded.expires_at)`,
		name, holder, storekit.CeilMillis(ttl)); err != nil {
		return 0, s.queueFail(op, err)
	}
	var ahead int
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM `+q+` AS p
		WHERE p.name = ?1 AND p.expires_at > `+nowMS+` AND p.seq < (SELECT seq FROM `+q+` WHERE name = ?1 AND holder = ?2)`, name, holder).Scan(&ahead); err != nil {
		return 0, s.queueFail(op, err)
	}
	if err := tx.Commit(); err != nil {
		return 0, s.queueFail(op, err)
	}
	return ahead, nil
}

// Dequeue implements store.Queuer.
func (s *Store) Dequeue(ctx context.Context, name, holder string) error {
	if err := s.life.Check(ctx); err != nil {
		return err
	}
	if err := kit.CheckDequeue(name, holder); err != nil {
		return err
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return s.queueFail(fmt.Sprintf("dequeue %q", name), err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `DELETE FROM `+quote(s.queue)+` WHERE name = ?1 AND holder = ?2`, name, holder); err != nil {
		return s.queueFail(fmt.Sprintf("dequeue %q", name), err)
	}
	if err := tx.Commit(); err != nil {
		return s.queueFail(fmt.Sprintf("dequeue %q", name), err)
	}
	return nil
}

// queueFail is fail for the queue's table: a file opened with create=false
// that an older version made has no queue table until it is migrated.
func (s *Store) queueFail(op string, err error) error {
	err = s.life.ClosedOr(err)
	if err != store.ErrClosed && strings.Contains(err.Error(), "no such table") {
		return kit.Errorf(op, "%s in %s has no queue table %s (made by an older version): open it once with create=true, or run `leasehold migrate`: %w", s.table, s.path, s.queue, ErrNoSchema)
	}
	return kit.Wrap(op, err)
}
