package mysql

import (
	"context"
	"crypto/sha1"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// Migrate implements store.Migrator. It creates what is missing, and only
// that:
//
//   - the lease table: leader_lease(name VARCHAR(128) PRIMARY KEY, holder
//     VARCHAR(253), epoch BIGINT NOT NULL DEFAULT 0, expires_at DATETIME(6)
//     NOT NULL) plus leasehold's own nullable columns metadata, ttl_us and
//     meta_epoch, which are added to a table made by hand with the four
//     columns (raw SQL clients never need to know them);
//   - the history table <table>_history and the high-water table
//     <table>_epochs (the highest epoch ever given to each name, seeded
//     from the lease rows and the history);
//   - five triggers on the lease table: three guards (BEFORE INSERT, UPDATE,
//     DELETE), which refuse DELETE, REPLACE, renaming a row and lowering an
//     epoch, and lift a grant that would not exceed its name's high-water
//     mark above it; and two AFTER INSERT and UPDATE, which raise the mark
//     and write the history on every grant and release, by leasehold or by
//     any other client;
//   - the fair queue's tables <table>_queue (each waiter's place) and
//     <table>_qseq (each name's position counter), see queue.go; a database
//     migrated before they existed gets them from Migrate.
//
// TRUNCATE fires no trigger in MySQL: it empties the lease table, and the
// high-water table is what keeps the tokens (see the README). The DDL is
// not transactional: concurrent Migrate calls with something to do are
// serialised with GET_LOCK, and while triggers are re-created (an upgrade,
// or triggers dropped by hand) a write may pass unguarded for a moment. A
// call that finds everything current takes no lock, so it never waits for
// another process's migration (one stopped while it held the lock would
// otherwise hold up every Open with CreateIfMissing for up to 30 s).
//
// It is idempotent, changes no lease, and runs no DDL (so needs no DDL
// privilege) when everything is current. Whether the triggers are current
// can be seen only with the TRIGGER privilege; without it Migrate trusts
// the table's comment, which it sets last.
func (s *Store) Migrate(ctx context.Context) error {
	if err := s.life.Check(ctx); err != nil {
		return err
	}
	err := s.withConn(ctx, func(c *sql.Conn) error {
		db, err := database(ctx, c, "migrate")
		if err != nil {
			return err
		}
		// Most calls find the schema current (every Open with
		// CreateIfMissing): that is read without the lock, so that a
		// process stopped while it held the lock (paused, cut off, its
		// server session not yet ended) does not stop every other process
		// from opening the store. Only a migration with something to do
		// takes the lock, and looks again under it.
		if err := s.migrate(ctx, c, db, false); !errors.Is(err, errMigrationNeeded) {
			return err
		}
		var got sql.NullInt64
		if err := c.QueryRowContext(ctx, `SELECT GET_LOCK(?, 30)`, lockName("migrate", db, s.table, "")).Scan(&got); err != nil {
			return err
		}
		if !got.Valid || got.Int64 != 1 {
			return errors.New("another migration of this table held its lock for 30 s")
		}
		err = s.migrate(ctx, c, db, true)
		var rel sql.NullInt64
		if rerr := c.QueryRowContext(context.WithoutCancel(ctx), `SELECT RELEASE_LOCK(?)`, lockName("migrate", db, s.table, "")).Scan(&rel); rerr != nil && err == nil {
			err = rerr
		}
		return err
	})
	if err != nil {
		return kit.Wrap("migrate "+s.n.table, err)
	}
	return nil
}

// MigrationCurrent implements store.MigrationChecker: whether Migrate would
// find everything of this version in place (the tables, leasehold's columns,
// the triggers). It reads the catalogue only: no DDL, no lock.
func (s *Store) MigrationCurrent(ctx context.Context) (bool, error) {
	if err := s.life.Check(ctx); err != nil {
		return false, err
	}
	var current bool
	err := s.withConn(ctx, func(c *sql.Conn) error {
		db, err := database(ctx, c, "check migration")
		if err != nil {
			return err
		}
		switch err := s.migrate(ctx, c, db, false); {
		case err == nil:
			current = true
		case !errors.Is(err, errMigrationNeeded):
			return err
		}
		return nil
	})
	if err != nil {
		return false, kit.Wrap("check migration of "+s.n.table, err)
	}
	return current, nil
}

// database is the connection's database, which op needs.
func database(ctx context.Context, c *sql.Conn, op string) (string, error) {
	var db sql.NullString
	if err := c.QueryRowContext(ctx, `SELECT DATABASE()`).Scan(&db); err != nil {
		return "", err
	}
	if !db.Valid || db.String == "" {
		return "", kit.Invalid(op, "the connection has no database: name one in the URL or DSN (mysql://user@host:3306/db)")
	}
	return db.String, nil
}

// lockName is a GET_LOCK name for kind ("lease", "migrate") of table in db
// and lease name: "leasehold:" and 40 hex digits of SHA-1, within MySQL's
// 64-character limit whatever the names' lengths.
func lockName(kind, db, table, name string) string {
	sum := sha1.Sum([]byte(kind + "\x00" + db + "\x00" + table + "\x00" + name))
	return "leasehold:" + hex.EncodeToString(sum[:])
}

// errMigrationNeeded: the schema is not current, and migrate was asked
// only to look.
var errMigrationNeeded = errors.New("leasehold/mysql: the schema needs a migration")

// migrate brings the schema up to date, or with ddl false only looks:
// errMigrationNeeded if it would run a statement, nil if all is current.
func (s *Store) migrate(ctx context.Context, c *sql.Conn, db string, ddl bool) error {
	r := s.n.replacer()
	run := func(sqls ...string) error {
		if !ddl {
			return errMigrationNeeded
		}
		for _, q := range sqls {
			if _, err := c.ExecContext(ctx, r.Replace(q)); err != nil {
				return fmt.Errorf("%w (while running %.60q...)", err, strings.TrimSpace(r.Replace(q)))
			}
		}
		return nil
	}
	tables := map[string]string{} // name -> comment
	rows, err := c.QueryContext(ctx, `SELECT TABLE_NAME, TABLE_COMMENT FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME IN (?, ?, ?, ?, ?)`,
		db, s.table, s.table+"_history", s.table+"_epochs", s.table+"_queue", s.table+"_qseq")
	if err != nil {
		return err
	}
	for rows.Next() {
		var n, cm string
		if err := rows.Scan(&n, &cm); err != nil {
			rows.Close()
			return err
		}
		tables[n] = cm
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	if _, ok := tables[s.table]; !ok {
		if err := run(sqlCreateTable); err != nil {
			return err
		}
	}
	cols := map[string]bool{}
	rows, err = c.QueryContext(ctx, `SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?`, db, s.table)
	if err != nil {
		return err
	}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			rows.Close()
			return err
		}
		cols[strings.ToLower(n)] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, col := range []string{"name", "holder", "epoch", "expires_at"} {
		if !cols[col] {
			return fmt.Errorf("table %s exists but has no column %q, so it is not a lease table: %w", s.n.table, col, ErrNotMigrated)
		}
	}
	var add []string
	for _, col := range []struct{ name, typ string }{{"metadata", "VARBINARY(1024) NULL"}, {"ttl_us", "BIGINT NULL"}, {"meta_epoch", "BIGINT NULL"}} {
		if !cols[col.name] {
			add = append(add, "ADD COLUMN "+col.name+" "+col.typ)
		}
	}
	if len(add) > 0 {
		if err := run(`ALTER TABLE {{t}} ` + strings.Join(add, ", ")); err != nil {
			return err
		}
	}
	if _, ok := tables[s.table+"_history"]; !ok {
		if err := run(sqlCreateHistory); err != nil {
			return err
		}
	}
	if _, ok := tables[s.table+"_epochs"]; !ok {
		if err := run(sqlCreateEpochs); err != nil {
			return err
		}
	}
	if _, ok := tables[s.table+"_queue"]; !ok {
		if err := run(sqlCreateQueue); err != nil {
			return err
		}
	}
	if _, ok := tables[s.table+"_qseq"]; !ok {
		if err := run(sqlCreateQueueSeq); err != nil {
			return err
		}
	}
	current, err := s.triggersCurrent(ctx, c, db, tables[s.table] == schemaVersion)
	if err != nil {
		return err
	}
	if current {
		return nil
	}
	// Each trigger is dropped and created again (MySQL has no CREATE OR
	// REPLACE TRIGGER), then the mark is seeded: a grant made meanwhile
	// raises the mark through the new trigger, one made before is seen by
	// the seed.
	for _, tr := range s.n.triggers() {
		if err := run(`DROP TRIGGER IF EXISTS ` + quote(tr)); err != nil {
			return err
		}
	}
	if err := run(sqlTriggerBI, sqlTriggerBU, sqlTriggerBD, sqlTriggerAI, sqlTriggerAU, sqlSeedEpochs1, sqlSeedEpochs2,
		`ALTER TABLE {{t}} COMMENT = '`+schemaVersion+`'`); err != nil {
		return err
	}
	return nil
}

// triggersCurrent reports whether the five triggers of this version are
// installed. A user without the TRIGGER privilege sees none of them in
// information_schema: then the table's comment, set after the triggers
// were created, is taken as the answer.
func (s *Store) triggersCurrent(ctx context.Context, c *sql.Conn, db string, commentCurrent bool) (bool, error) {
	trs := s.n.triggers()
	var visible, current int
	err := c.QueryRowContext(ctx, `SELECT COUNT(*), COALESCE(SUM(ACTION_STATEMENT LIKE ?), 0) FROM information_schema.TRIGGERS
WHERE EVENT_OBJECT_SCHEMA = ? AND EVENT_OBJECT_TABLE = ? AND TRIGGER_NAME IN (?, ?, ?, ?, ?)`,
		"%"+schemaVersion+"%", db, s.table, trs[0], trs[1], trs[2], trs[3], trs[4]).Scan(&visible, &current)
	if err != nil {
		return false, err
	}
	switch {
	case !commentCurrent:
		return false, nil
	case current == len(trs) && visible == len(trs):
		return true, nil
	case current > 0:
		return false, nil // some are of another version
	}
	// No trigger body of this version visible, and the comment says
	// current: MySQL shows a user without the TRIGGER privilege no
	// triggers, MariaDB shows them without their bodies. Can this user see
	// them at all?
	var user string
	if err := c.QueryRowContext(ctx, `SELECT CURRENT_USER()`).Scan(&user); err != nil {
		return false, err
	}
	u, h, _ := strings.Cut(user, "@")
	grantee := "'" + u + "'@'" + h + "'"
	var priv int
	err = c.QueryRowContext(ctx, `SELECT
	(SELECT COUNT(*) FROM information_schema.USER_PRIVILEGES WHERE GRANTEE = ? AND PRIVILEGE_TYPE = 'TRIGGER') +
	(SELECT COUNT(*) FROM information_schema.SCHEMA_PRIVILEGES WHERE GRANTEE = ? AND PRIVILEGE_TYPE = 'TRIGGER' AND TABLE_SCHEMA = ?) +
	(SELECT COUNT(*) FROM information_schema.TABLE_PRIVILEGES WHERE GRANTEE = ? AND PRIVILEGE_TYPE = 'TRIGGER' AND TABLE_SCHEMA = ? AND TABLE_NAME = ?)`,
		grantee, grantee, db, grantee, db, s.table).Scan(&priv)
	if err != nil {
		return false, err
	}
	return priv == 0, nil
}
