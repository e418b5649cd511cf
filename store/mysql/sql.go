package mysql

import (
	"strings"
)

// DefaultTable is the lease table's name when Options.Table is empty.
const DefaultTable = "leader_lease"

// maxTableLen leaves room within MySQL's 64-byte identifiers for the
// suffixes of the tables and triggers Migrate names after the lease table
// (_history, _epochs, _lh_bi ...).
const maxTableLen = 48

// schemaVersion marks the triggers Migrate installs (a comment in each
// body) and the lease table's comment, so that Migrate does nothing (and
// needs no DDL privilege) when the schema is current.
const schemaVersion = "leasehold schema 1"

// freeExpiry is the expires_at of a free row: the smallest DATETIME, long
// past on every clock.
const freeExpiry = "'1000-01-01 00:00:00.000000'"

// now is the database's clock. UTC_TIMESTAMP(6) is NOW(6) in UTC: it is
// fixed when the statement starts (unlike SYSDATE()), and, unlike NOW(6),
// it does not depend on the session's time_zone, which a client may set to
// anything (a DATETIME column has no time zone: two sessions whose NOW()
// differed by an hour would judge one expiry an hour apart).
const now = "UTC_TIMESTAMP(6)"

// Error numbers and the messages of the guard triggers.
const (
	errSignal       = 1644 // ER_SIGNAL_EXCEPTION: SIGNAL SQLSTATE '45000'
	errDupKey       = 1062 // ER_DUP_ENTRY
	errNoTable      = 1146 // ER_NO_SUCH_TABLE
	errBadField     = 1054 // ER_BAD_FIELD_ERROR
	errDeadlock     = 1213 // ER_LOCK_DEADLOCK (and Galera's certification failure)
	errLockWait     = 1205 // ER_LOCK_WAIT_TIMEOUT
	errOutOfRange   = 1690 // ER_DATA_OUT_OF_RANGE: epoch + 1 overflowed
	errLockDeadlock = 3058 // ER_USER_LOCK_DEADLOCK (MySQL 8)

	// msgHighWater is the guard's refusal of a leasehold grant at or below
	// the high-water mark of its name: the store asks again above it.
	msgHighWater = "leasehold: grant at or below the high-water mark"
)

// names are the SQL names of one lease table and its companions, quoted.
type names struct {
	_ [0]func() // not comparable: spares the binary an equality function

	table, hist, epochs string // quoted table names
	queue, qseq         string // the fair queue's places and counters, quoted (queue.go)
	// trigger names, unquoted (plain identifiers).
	trBI, trBU, trBD, trAI, trAU string
}

func newNames(table string) names {
	return names{
		table:  quote(table),
		hist:   quote(table + "_history"),
		epochs: quote(table + "_epochs"),
		queue:  quote(table + "_queue"),
		qseq:   quote(table + "_qseq"),
		trBI:   table + "_lh_bi",
		trBU:   table + "_lh_bu",
		trBD:   table + "_lh_bd",
		trAI:   table + "_lh_ai",
		trAU:   table + "_lh_au",
	}
}

func (n names) triggers() []string { return []string{n.trBI, n.trBU, n.trBD, n.trAI, n.trAU} }

// quote quotes a plain identifier (checked by storekit's SQLIdent).
func quote(ident string) string { return "`" + ident + "`" }

func (n names) replacer() *strings.Replacer {
	return strings.NewReplacer("{{t}}", n.table, "{{h}}", n.hist, "{{w}}", n.epochs, "{{q}}", n.queue, "{{qs}}", n.qseq, "{{now}}", now, "{{free}}", freeExpiry,
		"{{bi}}", quote(n.trBI), "{{bu}}", quote(n.trBU), "{{bd}}", quote(n.trBD), "{{ai}}", quote(n.trAI), "{{au}}", quote(n.trAU),
		"{{version}}", schemaVersion, "{{highwater}}", msgHighWater)
}

// recordCols are the columns of a store.Record, computed on the database's
// clock: remaining is in microseconds (hugely negative for a free row).
// Metadata and ttl belong to the term only when meta_epoch = epoch, that is
// when leasehold wrote them for this grant; a grant by a raw SQL client
// leaves them stale, and they are not reported.
const recordCols = `l.name, COALESCE(l.holder, ''), l.epoch,
	TIMESTAMPDIFF(MICROSECOND, {{now}}, l.expires_at),
	IF(l.meta_epoch <=> l.epoch, COALESCE(l.ttl_us, 0), 0),
	IF(l.meta_epoch <=> l.epoch, COALESCE(l.metadata, ''), '')`

// statements are the store's SQL, built once from the table's name. Every
// statement is one round trip: the store's own connections interpolate
// their arguments (interpolateParams), and the token of a grant comes back
// in the OK packet through LAST_INSERT_ID(expr).
type statements struct {
	_ [0]func() // not comparable: spares the binary an equality function

	acquire, acquireUnqueued, acquireLock, insert, insertUnqueued, insertLock, renew, release, get, list, floor, forceSelect, forceRelease, history string
	renewManyHead, renewTail                                                                                                                        string
}

// The assignments of a grant. meta_epoch is assigned before epoch and both
// read the old epoch: MySQL assigns left to right (a later expression sees
// an earlier assignment), MariaDB with SIMULTANEOUS_ASSIGNMENT all at once,
// and this order gives the same row under both. floor (the high-water mark
// of the name, 0 unless a grant was refused below it) lifts the grant above
// a row lost and restored at a lower epoch.
const grantSet = `meta_epoch = GREATEST(l.epoch, ?) + 1,
	holder = ?,
	expires_at = %s,
	metadata = ?,
	ttl_us = %s,
	epoch = LAST_INSERT_ID(GREATEST(l.epoch, ?) + 1)`

// laterExpiry is the expiry a grant or renewal sets: now + ttl (one
// argument, in microseconds), but never earlier than the row's expiry.
// {{now}} is the moment the statement began, and a statement that then
// waited for the row's lock (a loaded server, or a request delayed in the
// network) runs with that old moment. When it names a live term (a renewal,
// or the holder's own acquire) and a newer statement committed first and
// moved the expiry later, now + ttl would move it back: the holder trusts
// the newer answer, counted from when it sent it, and a rival could be
// granted the lease before that trust ends. A chaos run on MariaDB recorded
// a node's own acquire, given up by its client, re-grant its live term
// with an expiry older than the term's grant, and a rival take the next
// token within the node's trust (see the README and
// TestStaleStatementNeverShortensALiveTerm). For a free or expired row the
// row's expiry is at most now: this is now + ttl.
const laterExpiry = `GREATEST(l.expires_at, {{now}} + INTERVAL ? MICROSECOND)`

// The term is live while expires_at > now; it is expired (free to take)
// once expires_at <= now. A NULL or empty holder is a free row.
func newStatements(n names) statements {
	r := n.replacer()
	grant := func(expires, ttl string) string {
		return r.Replace(`UPDATE {{t}} AS l SET ` + replaceTwo(grantSet, expires, ttl) + `
WHERE l.name = ? AND l.epoch >= 0
	AND (l.holder IS NULL OR l.holder = '' OR l.holder = ? OR l.expires_at <= {{now}})`)
	}
	// unqueued is AcquireUnqueued's condition: no live place is queued for
	// the name. Under REPEATABLE READ InnoDB reads the places of an UPDATE's
	// subquery with shared locks, so it sees the latest committed places and
	// an Enqueue of the name waits for the grant's commit; under READ
	// COMMITTED the read is the statement's snapshot, taken when it starts.
	// Either way a place committed before the request is seen, and one
	// written meanwhile arrived with it: either may go first.
	unqueued := func(name string) string {
		return r.Replace(`NOT EXISTS (SELECT 1 FROM {{q}} AS p WHERE p.name = ` + name + ` AND p.expires_at > {{now}})`)
	}
	insert := func(expires, ttl string) string {
		return r.Replace(`INSERT INTO {{t}} (name, holder, epoch, expires_at, metadata, ttl_us, meta_epoch)
VALUES (?, ?, LAST_INSERT_ID(? + 1), ` + expires + `, ?, ` + ttl + `, ? + 1)`)
	}
	return statements{
		// args: floor, holder, ttl_us, metadata, ttl_us, floor, name, holder
		acquire: grant(laterExpiry, `?`),
		// args: floor, holder, metadata, floor, name, holder
		acquireLock: grant(`{{free}}`, `NULL`),
		// args: floor, holder, ttl_us, metadata, ttl_us, floor, name, holder
		acquireUnqueued: grant(laterExpiry, `?`) + ` AND ` + unqueued(`l.name`),
		// args: name, holder, floor, ttl_us, metadata, ttl_us, floor
		insert: insert(`{{now}} + INTERVAL ? MICROSECOND`, `?`),
		// INSERT ... SELECT, so that the condition can stop it: no row
		// inserted means a place is queued.
		// args: name, holder, floor, ttl_us, metadata, ttl_us, floor, name
		insertUnqueued: r.Replace(`INSERT INTO {{t}} (name, holder, epoch, expires_at, metadata, ttl_us, meta_epoch)
SELECT ?, ?, LAST_INSERT_ID(? + 1), {{now}} + INTERVAL ? MICROSECOND, ?, ?, ? + 1 FROM DUAL
WHERE `) + unqueued(`?`),
		// args: name, holder, floor, metadata, floor
		insertLock: insert(`{{free}}`, `NULL`),
		// Renew names the exact term and never changes the epoch.
		// args: ttl_us, ttl_us, name, holder, epoch
		renew: r.Replace(`UPDATE {{t}} AS l SET
	expires_at = ` + laterExpiry + `,
	ttl_us = ?,
	metadata = IF(l.meta_epoch <=> l.epoch, l.metadata, NULL),
	meta_epoch = l.epoch
WHERE l.name = ? AND l.holder = ? AND l.epoch = ? AND l.expires_at > {{now}}`),
		// After renew, in the same round trip: whether it matched, and the
		// term's metadata. args: name
		renewTail: r.Replace(`SELECT ROW_COUNT(), IF(l.meta_epoch <=> l.epoch, COALESCE(l.metadata, ''), '') FROM {{t}} AS l WHERE l.name = ?`),
		// The head of the batched renewal; the store appends the terms.
		// args: ttl_us, ttl_us, then the names, then (name, holder, epoch)...
		renewManyHead: r.Replace(`UPDATE {{t}} AS l SET
	expires_at = ` + laterExpiry + `,
	ttl_us = ?,
	metadata = IF(l.meta_epoch <=> l.epoch, l.metadata, NULL),
	meta_epoch = l.epoch
WHERE l.expires_at > {{now}} AND l.name IN `),
		// Release keeps the epoch, clears the holder, and sets the expiry
		// long past, for the exact live term only.
		release: r.Replace(`UPDATE {{t}} AS l SET holder = NULL, expires_at = {{free}}, metadata = NULL, ttl_us = NULL
WHERE l.name = ? AND l.holder = ? AND l.epoch = ? AND l.expires_at > {{now}}`),
		get:   r.Replace(`SELECT ` + recordCols + ` FROM {{t}} AS l WHERE l.name = ?`),
		list:  r.Replace(`SELECT ` + recordCols + ` FROM {{t}} AS l ORDER BY l.name`),
		floor: r.Replace(`SELECT w.epoch FROM {{w}} AS w WHERE w.name = ?`),
		// The operator's eviction, in a transaction on one connection whose
		// @leasehold_event tells the history trigger that it was forced.
		forceSelect: r.Replace(`SELECT ` + recordCols + ` FROM {{t}} AS l
WHERE l.name = ? AND COALESCE(l.holder, '') <> '' AND l.expires_at > {{now}} FOR UPDATE`),
		forceRelease: r.Replace(`UPDATE {{t}} AS l SET holder = NULL, expires_at = {{free}}, metadata = NULL, ttl_us = NULL
WHERE l.name = ? AND l.epoch = ?`),
		history: r.Replace(`SELECT h.name, COALESCE(h.holder, ''), h.epoch, h.event,
	DATE_FORMAT(h.at, '%Y-%m-%dT%H:%i:%s.%fZ'), COALESCE(h.metadata, '')
FROM {{h}} AS h WHERE h.name = ? ORDER BY h.epoch DESC, h.ended DESC LIMIT ?`),
	}
}

// replaceTwo fills the two %s of grantSet.
func replaceTwo(s, a, b string) string {
	i := strings.Index(s, "%s")
	s = s[:i] + a + s[i+2:]
	j := strings.Index(s, "%s")
	return s[:j] + b + s[j+2:]
}

// Migration SQL. {{t}} is the lease table, {{h}} its history table, {{w}}
// the high-water table; the triggers are named after the lease table.
const (
	sqlCreateTable = `CREATE TABLE IF NOT EXISTS {{t}} (
	name       VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
	holder     VARCHAR(253) CHARACTER SET ascii COLLATE ascii_bin NULL,
	epoch      BIGINT NOT NULL DEFAULT 0 COMMENT 'fencing token: +1 on every grant, never reset (leasehold)',
	expires_at DATETIME(6) NOT NULL DEFAULT '1000-01-01 00:00:00.000000' COMMENT 'UTC, judged against UTC_TIMESTAMP(6)',
	metadata   VARBINARY(1024) NULL COMMENT 'holder metadata, valid while meta_epoch = epoch (leasehold)',
	ttl_us     BIGINT NULL COMMENT 'microseconds of the last grant or renewal, valid while meta_epoch = epoch (leasehold)',
	meta_epoch BIGINT NULL COMMENT 'the epoch whose grant wrote metadata and ttl_us (leasehold)',
	PRIMARY KEY (name)
) ENGINE=InnoDB`
	// The history has no AUTO_INCREMENT column on purpose: a trigger that
	// inserts into one makes the server report 0 as the triggering
	// statement's LAST_INSERT_ID in its OK packet, where the grant's token
	// travels. A term's grant (ended = 0) and its end (ended = 1) are keyed
	// by the name and the epoch, which no two grants share.
	sqlCreateHistory = `CREATE TABLE IF NOT EXISTS {{h}} (
	name     VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
	epoch    BIGINT NOT NULL,
	ended    TINYINT NOT NULL COMMENT '0: the grant, 1: its release',
	holder   VARCHAR(253) CHARACTER SET ascii COLLATE ascii_bin NULL,
	event    VARCHAR(32) CHARACTER SET ascii NOT NULL,
	at       DATETIME(6) NOT NULL COMMENT 'UTC',
	metadata VARBINARY(1024) NULL,
	PRIMARY KEY (name, epoch, ended)
) ENGINE=InnoDB`
	// The high-water table: the highest epoch ever given to each name. It
	// lives beside the lease table, not in it, so that it outlasts a lease
	// row lost past the guard (TRUNCATE, which fires no trigger; the
	// triggers dropped; a row restored from an old copy; the table dropped
	// and migrated again).
	// The fair queue (queue.go): each waiter's place, and each name's last
	// position given out.
	sqlCreateQueue = `CREATE TABLE IF NOT EXISTS {{q}} (
	name       VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
	holder     VARCHAR(253) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
	seq        BIGINT NOT NULL COMMENT 'the place''s position, from the _qseq counter',
	expires_at DATETIME(6) NOT NULL COMMENT 'UTC, judged against UTC_TIMESTAMP(6)',
	PRIMARY KEY (name, holder),
	KEY order_of_places (name, seq)
) ENGINE=InnoDB COMMENT='fair queue: each waiter''s place; a place grants nothing (leasehold)'`
	sqlCreateQueueSeq = `CREATE TABLE IF NOT EXISTS {{qs}} (
	name VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
	n    BIGINT NOT NULL,
	PRIMARY KEY (name)
) ENGINE=InnoDB COMMENT='fair queue: the last position given out per lease name (leasehold)'`
	sqlCreateEpochs = `CREATE TABLE IF NOT EXISTS {{w}} (
	name  VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
	epoch BIGINT NOT NULL,
	PRIMARY KEY (name)
) ENGINE=InnoDB COMMENT='highest epoch (fencing token) ever given to each lease name: no grant gets one at or below it (leasehold)'`
	// Seeds the high-water table from the lease rows and from the history,
	// which remembers grants whose rows were lost. It only ever raises.
	sqlSeedEpochs1 = `INSERT IGNORE INTO {{w}} (name, epoch)
SELECT s.name, MAX(s.epoch) FROM (SELECT l.name, l.epoch FROM {{t}} AS l UNION ALL SELECT h.name, h.epoch FROM {{h}} AS h) AS s GROUP BY s.name`
	sqlSeedEpochs2 = `UPDATE {{w}} AS w JOIN (
	SELECT s.name, MAX(s.epoch) AS epoch FROM (SELECT l.name, l.epoch FROM {{t}} AS l UNION ALL SELECT h.name, h.epoch FROM {{h}} AS h) AS s GROUP BY s.name
) AS m ON m.name = w.name SET w.epoch = m.epoch WHERE w.epoch < m.epoch`

	// The guard, BEFORE each write. It refuses what would let a token be
	// handed out again: DELETE of a lease row (REPLACE too, which deletes),
	// renaming a row, lowering an epoch. A grant (a row inserted with a
	// holder, or an epoch raised) at or below the high-water mark of its
	// name is lifted above it, so that a row lost anyway and re-created by
	// raw SQL continues from the highest epoch ever given, not from 1; a row
	// inserted free takes the mark itself. A grant by leasehold (it wrote
	// meta_epoch = epoch) is refused instead, with msgHighWater: the store
	// reports the token it computed, so it must compute the right one, and
	// asks again above the mark. Renewals change no epoch, and pass through
	// at the cost of two comparisons.
	sqlGuardCheck = `IF top IS NOT NULL AND NEW.epoch <= top THEN
		IF COALESCE(NEW.holder, '') <> '' AND NEW.meta_epoch <=> NEW.epoch THEN
			SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = '{{highwater}}';
		END IF;
		SET NEW.epoch = top + IF(COALESCE(NEW.holder, '') <> '', 1, 0);
	END IF;`
	sqlTriggerBI = `CREATE TRIGGER {{bi}} BEFORE INSERT ON {{t}} FOR EACH ROW
BEGIN
	/* {{version}}: the guard */
	DECLARE top BIGINT;
	IF NEW.epoch < 0 THEN
		SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'leasehold: a lease row is never inserted with a negative epoch';
	END IF;
	SET top = (SELECT w.epoch FROM {{w}} AS w WHERE w.name = NEW.name);
	` + sqlGuardCheck + `
END`
	sqlTriggerBU = `CREATE TRIGGER {{bu}} BEFORE UPDATE ON {{t}} FOR EACH ROW
BEGIN
	/* {{version}}: the guard */
	DECLARE top BIGINT;
	DECLARE msg VARCHAR(255);
	IF NOT (NEW.name <=> OLD.name) THEN
		SET msg = CONCAT('leasehold: lease row ', OLD.name, ' is never renamed: its epoch is that name''s fencing token counter');
		SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = msg;
	END IF;
	IF NOT (NEW.epoch <=> OLD.epoch) THEN
		IF NEW.epoch IS NULL OR NEW.epoch < OLD.epoch THEN
			SET msg = CONCAT('leasehold: the epoch (fencing token) of lease ', OLD.name, ' never decreases (', OLD.epoch, ' to ', COALESCE(NEW.epoch, 'NULL'), ')');
			SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = msg;
		END IF;
		SET top = (SELECT w.epoch FROM {{w}} AS w WHERE w.name = NEW.name);
		` + sqlGuardCheck + `
	END IF;
END`
	sqlTriggerBD = `CREATE TRIGGER {{bd}} BEFORE DELETE ON {{t}} FOR EACH ROW
BEGIN
	/* {{version}}: the guard */
	DECLARE msg VARCHAR(255);
	SET msg = CONCAT('leasehold: lease row ', OLD.name, ' is never deleted: its epoch is the fencing token counter; to free it, UPDATE holder = NULL (leasehold release --force)');
	SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = msg;
END`
	// After each grant and release, by leasehold or by any raw SQL client:
	// raise the high-water mark and append to the history. Triggers run
	// with their definer's privileges, so the lease role needs none on the
	// history and high-water tables beyond SELECT.
	sqlRaise = `INSERT IGNORE INTO {{w}} (name, epoch) VALUES (NEW.name, NEW.epoch);
		UPDATE {{w}} AS w SET w.epoch = NEW.epoch WHERE w.name = NEW.name AND w.epoch < NEW.epoch;`
	sqlTriggerAI = `CREATE TRIGGER {{ai}} AFTER INSERT ON {{t}} FOR EACH ROW
BEGIN
	/* {{version}}: history and high-water mark */
	` + sqlRaise + `
	IF COALESCE(NEW.holder, '') <> '' THEN
		REPLACE INTO {{h}} (name, epoch, ended, holder, event, at, metadata)
		VALUES (NEW.name, NEW.epoch, 0, NEW.holder, 'acquired', {{now}}, IF(NEW.meta_epoch <=> NEW.epoch, NEW.metadata, NULL));
	END IF;
END`
	sqlTriggerAU = `CREATE TRIGGER {{au}} AFTER UPDATE ON {{t}} FOR EACH ROW
BEGIN
	/* {{version}}: history and high-water mark */
	DECLARE ev VARCHAR(32) DEFAULT NULL;
	IF COALESCE(NEW.holder, '') = '' THEN
		IF COALESCE(OLD.holder, '') <> '' THEN
			SET ev = COALESCE(NULLIF(@leasehold_event, ''), 'released');
		END IF;
	ELSEIF NOT (NEW.epoch <=> OLD.epoch) THEN
		IF COALESCE(OLD.holder, '') <> '' AND OLD.holder <> NEW.holder AND OLD.expires_at <= {{now}} THEN
			SET ev = 'expired-takeover';
		ELSE
			SET ev = 'acquired';
		END IF;
	END IF;
	IF NEW.epoch > OLD.epoch THEN
		` + sqlRaise + `
	END IF;
	IF ev = 'released' OR ev = 'force-released' THEN
		REPLACE INTO {{h}} (name, epoch, ended, holder, event, at, metadata)
		VALUES (OLD.name, OLD.epoch, 1, OLD.holder, ev, {{now}}, IF(OLD.meta_epoch <=> OLD.epoch, OLD.metadata, NULL));
	ELSEIF ev IS NOT NULL THEN
		REPLACE INTO {{h}} (name, epoch, ended, holder, event, at, metadata)
		VALUES (NEW.name, NEW.epoch, 0, NEW.holder, ev, {{now}}, IF(NEW.meta_epoch <=> NEW.epoch, NEW.metadata, NULL));
		IF NEW.epoch % 64 = 0 THEN
			DELETE FROM {{h}} WHERE name = NEW.name AND epoch <= NEW.epoch - 1000;
		END IF;
	END IF;
END`
)
