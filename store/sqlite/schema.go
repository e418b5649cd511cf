package sqlite

import (
	"context"
	"strconv"
	"strings"
)

// nowMS is SQLite's clock in Unix milliseconds. SQLite evaluates 'now' once
// per statement step, so every use in one statement sees the same instant.
const nowMS = `CAST(unixepoch('subsec')*1000 AS INTEGER)`

func quote(ident string) string { return `"` + ident + `"` }

// Migrate implements store.Migrator: it creates the lease table, the history
// table and the triggers if they are missing, and checks an existing lease
// table's shape. It changes no lease.
func (s *Store) Migrate(ctx context.Context) error {
	if err := s.life.Check(ctx); err != nil {
		return err
	}
	t, h, hw, qu := quote(s.table), quote(s.hist), quote(s.high), quote(s.queue)
	// raise keeps the high-water mark of a name at the highest epoch granted.
	raise := `INSERT INTO ` + hw + `(name, epoch) VALUES (NEW.name, NEW.epoch)
			ON CONFLICT (name) DO UPDATE SET epoch = excluded.epoch WHERE excluded.epoch > epoch;`
	stmts := []string{
		`CREATE TABLE IF NOT EXISTS ` + t + ` (
			name       TEXT PRIMARY KEY,
			holder     TEXT,
			epoch      INTEGER NOT NULL DEFAULT 0 CHECK (epoch >= 0),
			expires_at INTEGER NOT NULL DEFAULT 0,
			ttl_ms     INTEGER NOT NULL DEFAULT 0,
			metadata   TEXT NOT NULL DEFAULT ''
		) STRICT`,
		`CREATE TABLE IF NOT EXISTS ` + h + ` (
			id       INTEGER PRIMARY KEY AUTOINCREMENT,
			name     TEXT NOT NULL,
			holder   TEXT NOT NULL,
			epoch    INTEGER NOT NULL,
			event    TEXT NOT NULL,
			at_ms    INTEGER NOT NULL,
			metadata TEXT NOT NULL DEFAULT ''
		) STRICT`,
		`CREATE INDEX IF NOT EXISTS ` + quote(s.hist+"_name") + ` ON ` + h + `(name, id)`,
		// The fair queue (store.Queuer): one row per waiter's place. seq is
		// the place's position: AUTOINCREMENT never hands a value out twice,
		// so a later place always has a higher one. expires_at is SQLite's
		// clock in ms. Added by a later version: CREATE IF NOT EXISTS adds it
		// to a file made before, at its next Open.
		`CREATE TABLE IF NOT EXISTS ` + qu + ` (
			seq        INTEGER PRIMARY KEY AUTOINCREMENT,
			name       TEXT NOT NULL,
			holder     TEXT NOT NULL,
			expires_at INTEGER NOT NULL,
			UNIQUE (name, holder)
		) STRICT`,
		`CREATE INDEX IF NOT EXISTS ` + quote(s.queue+"_order") + ` ON ` + qu + `(name, seq)`,
		// The high-water table outlives a lease row that is removed anyway
		// (an INSERT OR REPLACE deletes the row it replaces without firing
		// delete triggers, unless the connection set recursive_triggers; a
		// trigger dropped by hand): Acquire grants above it, and an insert at
		// or below it is refused. It is filled from the lease rows and the
		// history when it is first made, so a row deleted before then is
		// remembered by its history.
		`CREATE TABLE IF NOT EXISTS ` + hw + ` (
			name  TEXT PRIMARY KEY,
			epoch INTEGER NOT NULL CHECK (epoch > 0)
		) STRICT`,
		`INSERT INTO ` + hw + `(name, epoch)
			SELECT name, MAX(epoch) FROM (SELECT name, epoch FROM ` + t + ` UNION ALL SELECT name, epoch FROM ` + h + `)
			WHERE epoch > 0 GROUP BY name
			ON CONFLICT (name) DO UPDATE SET epoch = excluded.epoch WHERE excluded.epoch > epoch`,
		`CREATE TRIGGER IF NOT EXISTS ` + quote(s.high+"_keep_rows") + ` BEFORE DELETE ON ` + hw + `
		BEGIN SELECT RAISE(ABORT, 'leasehold: high-water marks are never deleted: they keep fencing tokens above every token granted'); END`,
		`CREATE TRIGGER IF NOT EXISTS ` + quote(s.high+"_rises") + ` BEFORE UPDATE ON ` + hw + `
		WHEN NEW.epoch < OLD.epoch OR NEW.name IS NOT OLD.name
		BEGIN SELECT RAISE(ABORT, 'leasehold: a high-water mark never decreases'); END`,
		`CREATE TRIGGER IF NOT EXISTS ` + quote(s.high+"_insert_rises") + ` BEFORE INSERT ON ` + hw + `
		WHEN NEW.epoch < (SELECT epoch FROM ` + hw + ` WHERE name = NEW.name)
		BEGIN SELECT RAISE(ABORT, 'leasehold: a high-water mark never decreases'); END`,
		// A lease row may be (re)inserted only above its name's high-water
		// mark: this stops INSERT OR REPLACE, whose delete of the old row
		// fires no delete trigger on a connection without
		// recursive_triggers, from resetting or repeating an epoch.
		`CREATE TRIGGER IF NOT EXISTS ` + quote(s.table+"_insert_above_high") + ` BEFORE INSERT ON ` + t + `
		WHEN NEW.epoch <= (SELECT epoch FROM ` + hw + ` WHERE name = NEW.name)
		BEGIN SELECT RAISE(ABORT, 'leasehold: a lease row is inserted only above the highest epoch (fencing token) its name was ever granted'); END`,
		// Renaming a row would move one lease's counter to another name.
		`CREATE TRIGGER IF NOT EXISTS ` + quote(s.table+"_keep_names") + ` BEFORE UPDATE OF name ON ` + t + `
		WHEN NEW.name IS NOT OLD.name
		BEGIN SELECT RAISE(ABORT, 'leasehold: a lease row is never renamed: its epoch is that name''s fencing token counter'); END`,
		`CREATE TRIGGER IF NOT EXISTS ` + quote(s.table+"_high_insert") + ` AFTER INSERT ON ` + t + `
		WHEN NEW.epoch > 0
		BEGIN ` + raise + ` END`,
		`CREATE TRIGGER IF NOT EXISTS ` + quote(s.table+"_high_update") + ` AFTER UPDATE OF epoch ON ` + t + `
		WHEN NEW.epoch > 0
		BEGIN ` + raise + ` END`,
		// The epoch is the fencing counter: it never goes back, and the row
		// that holds it is never deleted.
		`CREATE TRIGGER IF NOT EXISTS ` + quote(s.table+"_keep_rows") + ` BEFORE DELETE ON ` + t + `
		BEGIN SELECT RAISE(ABORT, 'leasehold: lease rows are never deleted: the epoch column is the fencing token counter'); END`,
		`CREATE TRIGGER IF NOT EXISTS ` + quote(s.table+"_epoch_rises") + ` BEFORE UPDATE OF epoch ON ` + t + `
		WHEN NEW.epoch < OLD.epoch
		BEGIN SELECT RAISE(ABORT, 'leasehold: the epoch (fencing token) of a lease never decreases'); END`,
		`CREATE TRIGGER IF NOT EXISTS ` + quote(s.table+"_history_insert") + ` AFTER INSERT ON ` + t + `
		WHEN NEW.holder IS NOT NULL AND NEW.holder <> '' AND NEW.epoch > 0
		BEGIN
			INSERT INTO ` + h + `(name, holder, epoch, event, at_ms, metadata)
			VALUES (NEW.name, NEW.holder, NEW.epoch, 'acquired', ` + nowMS + `, NEW.metadata);
		END`,
		`CREATE TRIGGER IF NOT EXISTS ` + quote(s.table+"_history_grant") + ` AFTER UPDATE OF epoch ON ` + t + `
		WHEN NEW.epoch > OLD.epoch AND NEW.holder IS NOT NULL AND NEW.holder <> ''
		BEGIN
			INSERT INTO ` + h + `(name, holder, epoch, event, at_ms, metadata)
			VALUES (NEW.name, NEW.holder, NEW.epoch,
				CASE WHEN OLD.holder IS NOT NULL AND OLD.holder <> '' AND OLD.holder <> NEW.holder
				THEN 'expired-takeover' ELSE 'acquired' END,
				` + nowMS + `, NEW.metadata);
			DELETE FROM ` + h + ` WHERE name = NEW.name AND id <= (
				SELECT id FROM ` + h + ` WHERE name = NEW.name ORDER BY id DESC LIMIT 1 OFFSET ` + strconv.Itoa(s.limit) + `);
		END`,
		`CREATE TRIGGER IF NOT EXISTS ` + quote(s.table+"_history_end") + ` AFTER UPDATE OF holder ON ` + t + `
		WHEN NEW.epoch = OLD.epoch AND OLD.holder IS NOT NULL AND OLD.holder <> '' AND (NEW.holder IS NULL OR NEW.holder = '')
		BEGIN
			INSERT INTO ` + h + `(name, holder, epoch, event, at_ms, metadata)
			VALUES (OLD.name, OLD.holder, OLD.epoch, 'released', ` + nowMS + `, OLD.metadata);
		END`,
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return s.fail("migrate", err)
	}
	defer tx.Rollback()
	for _, q := range stmts {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return s.fail("migrate", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return s.fail("migrate", err)
	}
	return s.checkShape(ctx)
}

// checkShape checks that the lease table has the columns this store uses.
func (s *Store) checkShape(ctx context.Context) error {
	rows, err := s.db.QueryContext(ctx, `SELECT name, type FROM pragma_table_info(?)`, s.table)
	if err != nil {
		return s.fail("check schema", err)
	}
	defer rows.Close()
	want := map[string]string{"name": "TEXT", "holder": "TEXT", "epoch": "INTEGER", "expires_at": "INTEGER", "ttl_ms": "INTEGER", "metadata": "TEXT"}
	seen := 0
	for rows.Next() {
		var name, typ string
		if err := rows.Scan(&name, &typ); err != nil {
			return s.fail("check schema", err)
		}
		seen++
		if w, ok := want[name]; ok {
			if !strings.EqualFold(typ, w) {
				return kit.Errorf("", "table %s in %s: column %s has type %s, this store needs %s", s.table, s.path, name, typ, w)
			}
			delete(want, name)
		}
	}
	if err := rows.Err(); err != nil {
		return s.fail("check schema", err)
	}
	if seen == 0 {
		return kit.Errorf("", "%s in %s: %w", s.table, s.path, ErrNoSchema)
	}
	for col := range want {
		return kit.Errorf("", "table %s in %s has no column %s: it was not made by this store (see the package doc for the shape)", s.table, s.path, col)
	}
	return nil
}
