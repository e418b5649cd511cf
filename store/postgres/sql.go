package postgres

import (
	"crypto/md5"
	"encoding/hex"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/store/storekit"
)

// Identifier limits (the rule is storekit's SQLIdent). PostgreSQL
// truncates names at 63 bytes; the table name leaves room for the
// "_history", "_changed", "_epochs", "_acquire", "_acqfair" and "_release"
// suffixes.
const (
	maxSchemaLen = storekit.MaxSQLIdentLen
	maxTableLen  = 55
)

// DefaultTable is the lease table's name when Options.Table is empty.
const DefaultTable = "leader_lease"

// schemaVersion marks the trigger function Migrate installs, so that Migrate
// does nothing (and needs no DDL privilege) when the schema is current.
// Version 2 added the guard: the high-water table <table>_epochs and the
// triggers that refuse DELETE, TRUNCATE, renaming a row and lowering an
// epoch. Version 3 bounded the history trim below (the high-water table's
// trimmed column). Version 4 names the NOTIFY channel in the trigger
// function as a literal (see sqlCreateFunction). A schema of a later version
// counts as current (see schemaAtLeast), so that a process of this version
// does not put its own triggers back over a later version's during a rolling
// upgrade.
const schemaVersion = "leasehold schema 4"

// schemaAtLeast is the SQL condition that the version in the comment expr
// (a function's obj_description) is this one or later; param is the query
// parameter that carries schemaVersion. A comment that is no leasehold
// version at all (none, or one written by hand) is not current.
func schemaAtLeast(expr, param string) string {
	return "coalesce(substring(" + expr + " from '^leasehold schema ([0-9]+)$')::int, 0) >= substring(" + param + "::text from '([0-9]+)$')::int"
}

// Trigger names on the lease table.
const (
	triggerInsert = "leasehold_changed_insert"
	triggerUpdate = "leasehold_changed_update"

	triggerGuardInsert   = "leasehold_guard_insert"
	triggerGuardUpdate   = "leasehold_guard_update"
	triggerGuardDelete   = "leasehold_guard_delete"
	triggerGuardTruncate = "leasehold_guard_truncate"
)

// allTriggers are the triggers Migrate installs on the lease table.
var allTriggers = []string{triggerInsert, triggerUpdate, triggerGuardInsert, triggerGuardUpdate, triggerGuardDelete, triggerGuardTruncate}

// tableName resolves Options.Table and Options.Schema into a validated
// (schema, table); schema may be empty (the search_path decides).
func tableName(table, schema string) (string, string, error) {
	if table == "" {
		table = DefaultTable
	}
	if i := strings.IndexByte(table, '.'); i >= 0 {
		ts, tt := table[:i], table[i+1:]
		if schema != "" && schema != ts {
			return "", "", kit.Invalid("", "table %q names schema %q but Options.Schema is %q", table, ts, schema)
		}
		if ts == "" || tt == "" {
			return "", "", kit.Invalid("", "table %q has an empty part; want table or schema.table", table)
		}
		schema, table = ts, tt
	}
	if err := kit.SQLIdent("", "table", table, maxTableLen); err != nil {
		return "", "", err
	}
	if schema != "" {
		if err := kit.SQLIdent("", "schema", schema, maxSchemaLen); err != nil {
			return "", "", err
		}
		if strings.HasPrefix(schema, "pg_") {
			return "", "", kit.Invalid("", "schema name %q: names beginning with pg_ are reserved for the system", schema)
		}
	}
	return schema, table, nil
}

// ident quotes a possibly schema-qualified name.
func ident(schema, name string) string {
	if schema == "" {
		return pgx.Identifier{name}.Sanitize()
	}
	return pgx.Identifier{schema, name}.Sanitize()
}

// channelFor is the NOTIFY channel of the lease table schema.table: the
// trigger function names it as a literal (Migrate computes it here), and
// channelSQL computes the same on the server.
func channelFor(schema, table string) string {
	sum := md5.Sum([]byte(schema + "." + table))
	return "leasehold_" + hex.EncodeToString(sum[:])[:16]
}

// statements are the store's SQL, built once from the quoted table name.
// acquireFn, acquireUnqueuedFn, renewFn and releaseFn call the lease
// functions that run acquire, acquireUnqueued, renew and release
// (leaseFunctions).
type statements struct {
	_ [0]func() // not comparable: spares the binary an equality function

	acquire, acquireUnqueued, renew, release, get, list, renewMany, forceRelease, history string
	acquireFn, acquireUnqueuedFn, renewFn, releaseFn                                      string
}

// recordCols are the columns of a store.Record, computed on the database's
// clock: remaining and ttl are microseconds as float8 (remaining is
// ±Infinity for an infinite expiry). Metadata and ttl belong to the term only
// when meta_epoch = epoch, that is when leasehold wrote them for this grant; a
// grant by a raw SQL client leaves them stale, and they are not reported.
func recordCols(a string) string {
	return strings.NewReplacer("{{a}}", a).Replace(`{{a}}.name,
	coalesce({{a}}.holder, ''),
	coalesce({{a}}.epoch, 0),
	coalesce(((extract(epoch FROM {{a}}.expires_at) - extract(epoch FROM now())) * 1000000)::float8, '-Infinity'),
	(CASE WHEN {{a}}.meta_epoch = {{a}}.epoch THEN coalesce(extract(epoch FROM {{a}}.ttl) * 1000000, 0) ELSE 0 END)::float8,
	CASE WHEN {{a}}.meta_epoch = {{a}}.epoch THEN coalesce({{a}}.metadata, '') ELSE '' END`)
}

// grantCols are recordCols for a row the acquire statement has just granted,
// with the same values from fewer expressions: where the lease functions are
// missing, the statement's text is parsed, analysed and planned on every call
// (the unnamed statement, for poolers), and
// recordCols' expressions were a fifth of that work for the acquire statement
// (EXPLAIN of it in a server-side loop: 154 against 123 µs per call, the
// fastest of 12 alternated runs on a loaded machine). On a grant the row
// holds what the statement wrote: holder is $2 (never empty), epoch is set,
// meta_epoch equals epoch (the guard lifts both together), ttl is $3
// microseconds and metadata $4. Only the time remaining is read from the
// row, computed on the database's clock as recordCols does: the expiry may be
// later than now() + ttl when a holder acquires its own live term again.
func grantCols(a string) string {
	return strings.NewReplacer("{{a}}", a).Replace(`{{a}}.name,
	{{a}}.holder,
	{{a}}.epoch,
	coalesce(((extract(epoch FROM {{a}}.expires_at) - extract(epoch FROM now())) * 1000000)::float8, '-Infinity'),
	$3::float8,
	coalesce({{a}}.metadata, '')`)
}

// The acquire statement in three parts, so that acquire and acquireUnqueued
// share them. One compare-and-swap: insert the row, or take it over only if
// it is free, expired, or this holder's own. The epoch (fencing token) is
// bumped on every grant and never reset. A negative epoch (a row edited by
// hand) is never granted from.
//
// No grant or renewal moves a live term's expiry back
// (greatest(l.expires_at, ...)): now() is when the statement's transaction
// began, and a statement that then waited for the row's lock runs with that
// old moment. A renewal, or the holder's own acquire, run so after a newer
// renewal committed would otherwise set an expiry earlier than the one its
// holder was promised, and a rival could take over while the holder still
// trusts its term (the MySQL store's chaos run found it there;
// TestStaleStatementNeverShortensALiveTerm). A free or expired row's expiry
// is at most now(), so a grant over one is unchanged. The parameters are
// cast because acquireUnqueued selects them, where an INSERT's VALUES would
// take the columns' types.
const (
	acquireInsert     = `INSERT INTO {{t}} AS l (name, holder, epoch, expires_at, metadata, ttl, meta_epoch)`
	acquireRow        = `$1::text, $2::text, 1, now() + $3::float8 * interval '1 microsecond', $4::text, $3::float8 * interval '1 microsecond', 1`
	acquireOnConflict = `ON CONFLICT (name) DO UPDATE SET
	holder = excluded.holder,
	epoch = coalesce(l.epoch, 0) + 1,
	expires_at = greatest(l.expires_at, excluded.expires_at),
	metadata = excluded.metadata,
	ttl = excluded.ttl,
	meta_epoch = coalesce(l.epoch, 0) + 1
WHERE coalesce(l.epoch, 0) >= 0
	AND (coalesce(l.holder, '') = '' OR l.holder = excluded.holder OR coalesce(l.expires_at <= now(), true))
RETURNING {{grant l}}`
)

// The term is live while expires_at > now(); it is expired (free to take)
// once expires_at <= now(). A NULL or empty holder is a free row. fn names
// a lease function: the table's name (unquoted) with its suffix, quoted and
// in the table's schema. queue is the fair queue's places table. version is
// the lease functions' version the calls name (leaseFunctionsVersion).
func newStatements(table, history, queue string, fn func(suffix string) string, version string) statements {
	r := strings.NewReplacer("{{t}}", table, "{{h}}", history, "{{p}}", queue, "{{cols l}}", recordCols("l"), "{{cols o}}", recordCols("o"), "{{grant l}}", grantCols("l"))
	return statements{
		acquireFn:         `SELECT * FROM ` + fn(fnAcquire) + `($1::text, $2::text, $3::float8, $4::text, '` + version + `')`,
		renewFn:           `SELECT * FROM ` + fn(fnRenew) + `($1::text, $2::text, $3::int8, $4::float8, '` + version + `')`,
		releaseFn:         `SELECT * FROM ` + fn(fnRelease) + `($1::text, $2::text, $3::int8, '` + version + `')`,
		acquireUnqueuedFn: `SELECT * FROM ` + fn(fnAcquireUnqueued) + `($1::text, $2::text, $3::float8, $4::text, '` + version + `')`,
		// The acquire statement: see acquireInsert.
		acquire: r.Replace(acquireInsert + "\nVALUES (" + acquireRow + ")\n" + acquireOnConflict),
		// acquireUnqueued is acquire on the condition that no live place is
		// queued for the name (Store.AcquireUnqueued). The condition is
		// uncorrelated, so PostgreSQL runs it first, once, as a one-time
		// filter: when it is false there is no row to insert, so nothing is
		// written and no token is spent (the conformance case
		// QueueAcquireUnqueued checks that nothing was granted). Places
		// expire on clock_timestamp(), as the queue writes them (queue.go).
		acquireUnqueued: r.Replace(acquireInsert + "\nSELECT " + acquireRow + `
WHERE NOT EXISTS (SELECT 1 FROM {{p}} AS p WHERE p.name = $1 AND p.expires_at > clock_timestamp())
` + acquireOnConflict),
		// Renew names the exact term and never bumps the epoch.
		renew: r.Replace(`UPDATE {{t}} AS l SET
	expires_at = greatest(l.expires_at, now() + $4::float8 * interval '1 microsecond'),
	ttl = $4::float8 * interval '1 microsecond',
	metadata = CASE WHEN l.meta_epoch = l.epoch THEN l.metadata END,
	meta_epoch = l.epoch
WHERE l.name = $1 AND l.holder = $2 AND l.epoch = $3 AND l.expires_at > now()
RETURNING {{cols l}}`),
		// Release keeps the epoch, clears the holder, and sets the expiry to
		// -infinity, for the exact live term only.
		release: r.Replace(`UPDATE {{t}} AS l SET holder = NULL, expires_at = '-infinity', metadata = NULL, ttl = NULL
WHERE l.name = $1 AND l.holder = $2 AND l.epoch = $3 AND l.expires_at > now()
RETURNING l.epoch`),
		get:  r.Replace(`SELECT {{cols l}} FROM {{t}} AS l WHERE l.name = $1`),
		list: r.Replace(`SELECT {{cols l}} FROM {{t}} AS l ORDER BY l.name COLLATE "C"`),
		// One statement renews every term of the batch, each scoped to its
		// exact (name, holder, epoch); ord maps a row back to its term.
		renewMany: r.Replace(`WITH req AS (
	SELECT r.name, r.holder, r.epoch, r.ord
	FROM unnest($1::text[], $2::text[], $3::int8[]) WITH ORDINALITY AS r(name, holder, epoch, ord)
)
UPDATE {{t}} AS l SET
	expires_at = greatest(l.expires_at, now() + $4::float8 * interval '1 microsecond'),
	ttl = $4::float8 * interval '1 microsecond',
	metadata = CASE WHEN l.meta_epoch = l.epoch THEN l.metadata END,
	meta_epoch = l.epoch
FROM req
WHERE l.name = req.name AND l.holder = req.holder AND l.epoch = req.epoch AND l.expires_at > now()
RETURNING req.ord, {{cols l}}`),
		// The operator's eviction. The setting tells the history trigger
		// that this release was forced; it lasts to the end of this
		// statement's transaction only.
		forceRelease: r.Replace(`WITH mark AS (SELECT set_config('leasehold.event', 'force-released', true) AS v),
old(name, holder, epoch, remaining, ttl, metadata) AS (
	SELECT {{cols o}} FROM {{t}} AS o, mark
	WHERE o.name = $1 AND mark.v IS NOT NULL AND coalesce(o.holder, '') <> '' AND o.expires_at > now()
	FOR UPDATE OF o
)
UPDATE {{t}} AS l SET holder = NULL, expires_at = '-infinity', metadata = NULL, ttl = NULL
FROM old WHERE l.name = old.name
RETURNING old.name, old.holder, old.epoch, old.remaining, old.ttl, old.metadata`),
		history: r.Replace(`SELECT h.name, coalesce(h.holder, ''), h.epoch, h.event, h.at, coalesce(h.metadata, '')
FROM {{h}} AS h WHERE h.name = $1 ORDER BY h.id DESC LIMIT $2`),
	}
}

// Migration SQL. {{t}} is the lease table, {{h}} its history table, {{i}}
// the history index's bare name, {{f}} the trigger function, {{w}} the
// high-water table and {{g}} the guard function.
const (
	sqlCreateTable = `CREATE TABLE {{t}} (
	name       text PRIMARY KEY,
	holder     text,
	epoch      bigint NOT NULL DEFAULT 0,
	expires_at timestamptz NOT NULL DEFAULT '-infinity',
	metadata   text,
	ttl        interval,
	meta_epoch bigint
)`
	sqlCommentColumns = `COMMENT ON COLUMN {{t}}.epoch IS 'fencing token: +1 on every grant, never reset (leasehold)';
COMMENT ON COLUMN {{t}}.metadata IS 'holder metadata, valid while meta_epoch = epoch (leasehold)';
COMMENT ON COLUMN {{t}}.ttl IS 'duration of the last grant or renewal, valid while meta_epoch = epoch (leasehold)';
COMMENT ON COLUMN {{t}}.meta_epoch IS 'the epoch whose grant wrote metadata and ttl (leasehold)'`
	sqlCreateHistory = `CREATE TABLE {{h}} (
	id       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	name     text NOT NULL,
	holder   text,
	epoch    bigint NOT NULL,
	event    text NOT NULL,
	at       timestamptz NOT NULL DEFAULT now(),
	metadata text
);
CREATE INDEX {{i}} ON {{h}} (name, id DESC)`
	// The high-water table: the highest epoch ever given to each name. It
	// lives beside the lease table, not in it, so that it outlasts a lease
	// row lost past the guard (triggers disabled, a row restored from an
	// old copy, the table dropped and migrated again).
	sqlCreateEpochs = `CREATE TABLE {{w}} (
	name    text PRIMARY KEY,
	epoch   bigint NOT NULL,
	trimmed bigint
);
COMMENT ON TABLE {{w}} IS 'highest epoch (fencing token) ever given to each lease name: no grant gets one at or below it (leasehold)';
` + sqlCommentTrimmed
	// Schema 3 added trimmed to the high-water table: the history id up to
	// which the trigger's trim has deleted the name's entries.
	sqlAddTrimmed = `ALTER TABLE {{w}} ADD COLUMN IF NOT EXISTS trimmed bigint;
` + sqlCommentTrimmed
	sqlCommentTrimmed = `COMMENT ON COLUMN {{w}}.trimmed IS 'history id up to which the trim deleted this name''s entries: the next trim starts above it (leasehold)'`
	// Seeds the high-water table from the lease rows and from the history,
	// which remembers grants whose rows were deleted before the guard
	// existed. Idempotent: it only ever raises.
	sqlSeedEpochs = `INSERT INTO {{w}} AS w (name, epoch)
SELECT s.name, max(s.epoch) FROM (
	SELECT l.name, l.epoch FROM {{t}} AS l
	UNION ALL
	SELECT h.name, h.epoch FROM {{h}} AS h
) AS s GROUP BY s.name
ON CONFLICT (name) DO UPDATE SET epoch = excluded.epoch WHERE w.epoch < excluded.epoch`
	// The guard runs BEFORE a write. It refuses what would let a token be
	// handed out again: DELETE and TRUNCATE of lease rows, renaming a row,
	// lowering an epoch. And it lifts any grant (a row inserted, or an
	// epoch raised) that would land at or below the high-water mark of its
	// name above it: a row that was lost anyway (a superuser's DELETE with
	// triggers disabled, session_replication_role = replica) and is
	// re-created, by Acquire or by raw SQL, continues from the highest
	// epoch ever given, not from 1. A row inserted free (no holder) takes
	// the mark itself, so its first grant gets the mark + 1. The renewal
	// path never runs it: the UPDATE trigger fires only when the epoch or
	// the name changes.
	sqlCreateGuard = `CREATE OR REPLACE FUNCTION {{g}}() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $leasehold$
DECLARE
	top bigint;
	was bigint;
BEGIN
	IF TG_OP = 'TRUNCATE' THEN
		RAISE EXCEPTION 'leasehold: lease table %.% is never truncated: its epoch column is the fencing token counter', TG_TABLE_SCHEMA, TG_TABLE_NAME
			USING ERRCODE = 'restrict_violation',
			HINT = 'to free a lease, UPDATE it: SET holder = NULL, expires_at = ''-infinity'' (leasehold release --force does so)';
	ELSIF TG_OP = 'DELETE' THEN
		RAISE EXCEPTION 'leasehold: lease row % is never deleted: its epoch column is the fencing token counter', OLD.name
			USING ERRCODE = 'restrict_violation',
			HINT = 'to free a lease, UPDATE it: SET holder = NULL, expires_at = ''-infinity'' (leasehold release --force does so)';
	ELSIF TG_OP = 'UPDATE' THEN
		IF NEW.name IS DISTINCT FROM OLD.name THEN
			RAISE EXCEPTION 'leasehold: lease row % is never renamed (to %): its epoch is that name''s fencing token counter', OLD.name, NEW.name
				USING ERRCODE = 'restrict_violation';
		END IF;
		IF NEW.epoch < OLD.epoch THEN
			RAISE EXCEPTION 'leasehold: the epoch (fencing token) of lease % never decreases (% to %)', OLD.name, OLD.epoch, NEW.epoch
				USING ERRCODE = 'restrict_violation';
		END IF;
	END IF;
	SELECT w.epoch INTO top FROM {{w}} AS w WHERE w.name = NEW.name;
	IF FOUND AND NEW.epoch <= top THEN
		was := NEW.epoch;
		NEW.epoch := top + CASE WHEN coalesce(NEW.holder, '') <> '' THEN 1 ELSE 0 END;
		IF NEW.meta_epoch = was THEN
			NEW.meta_epoch := NEW.epoch;
		END IF;
	END IF;
	RETURN NEW;
END
$leasehold$;
DROP TRIGGER IF EXISTS ` + triggerGuardInsert + ` ON {{t}};
DROP TRIGGER IF EXISTS ` + triggerGuardUpdate + ` ON {{t}};
DROP TRIGGER IF EXISTS ` + triggerGuardDelete + ` ON {{t}};
DROP TRIGGER IF EXISTS ` + triggerGuardTruncate + ` ON {{t}};
CREATE TRIGGER ` + triggerGuardInsert + ` BEFORE INSERT ON {{t}} FOR EACH ROW EXECUTE PROCEDURE {{g}}();
CREATE TRIGGER ` + triggerGuardUpdate + ` BEFORE UPDATE ON {{t}} FOR EACH ROW
	WHEN (OLD.epoch IS DISTINCT FROM NEW.epoch OR OLD.name IS DISTINCT FROM NEW.name)
	EXECUTE PROCEDURE {{g}}();
CREATE TRIGGER ` + triggerGuardDelete + ` BEFORE DELETE ON {{t}} FOR EACH ROW EXECUTE PROCEDURE {{g}}();
CREATE TRIGGER ` + triggerGuardTruncate + ` BEFORE TRUNCATE ON {{t}} FOR EACH STATEMENT EXECUTE PROCEDURE {{g}}();
COMMENT ON FUNCTION {{g}}() IS '` + schemaVersion + `'`
	// The trigger runs for every grant and release, by leasehold or by any
	// raw SQL client: it notifies waiters, appends to the history and
	// raises the high-water mark of the name. It is
	// SECURITY DEFINER so that the lease role needs no privilege on the
	// history table, with a fixed search_path so that it cannot be
	// redirected. {{ch}} is the table's channel (channelFor) as a literal,
	// computed by Migrate: computing it on every call from TG_TABLE_SCHEMA
	// and md5 cost about 0.1 ms a hand-off (schema 3 did; measured in
	// BENCHMARKS.md). The function is named after its table and made in
	// the table's schema, so the channel it names is that table's: a table
	// renamed or moved is not current until Migrate makes its own.
	sqlCreateFunction = `CREATE OR REPLACE FUNCTION {{f}}() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $leasehold$
DECLARE
	ev text;
	cut bigint;
	lo bigint;
BEGIN
	IF TG_OP = 'INSERT' THEN
		IF coalesce(NEW.holder, '') <> '' THEN
			ev := 'acquired';
		END IF;
	ELSIF coalesce(NEW.holder, '') = '' THEN
		IF coalesce(OLD.holder, '') <> '' THEN
			ev := coalesce(nullif(current_setting('leasehold.event', true), ''), 'released');
		END IF;
	ELSIF NEW.epoch IS DISTINCT FROM OLD.epoch THEN
		IF coalesce(OLD.holder, '') <> '' AND OLD.holder <> NEW.holder AND OLD.expires_at <= now() THEN
			ev := 'expired-takeover';
		ELSE
			ev := 'acquired';
		END IF;
	END IF;
	IF TG_OP = 'INSERT' OR NEW.epoch > OLD.epoch THEN
		INSERT INTO {{w}} AS w (name, epoch) VALUES (NEW.name, NEW.epoch)
		ON CONFLICT (name) DO UPDATE SET epoch = excluded.epoch WHERE w.epoch < excluded.epoch;
	END IF;
	PERFORM pg_notify({{ch}}, NEW.name);
	IF ev IN ('released', 'force-released') THEN
		INSERT INTO {{h}} (name, holder, epoch, event, metadata)
		VALUES (OLD.name, OLD.holder, OLD.epoch, ev, CASE WHEN OLD.meta_epoch = OLD.epoch THEN OLD.metadata END);
	ELSIF ev IS NOT NULL THEN
		INSERT INTO {{h}} (name, holder, epoch, event, metadata)
		VALUES (NEW.name, NEW.holder, NEW.epoch, ev, CASE WHEN NEW.meta_epoch = NEW.epoch THEN NEW.metadata END);
		-- The trim keeps the name's last 1,000 entries. Both its scans
		-- start above the id the previous trim stopped at (the high-water
		-- row's trimmed), so they never walk the entries it deleted
		-- before: until a vacuum removes them they are still in the
		-- index, and on a server without autovacuum unbounded scans grew
		-- with every trim.
		IF NEW.epoch % 64 = 0 THEN
			SELECT w.trimmed INTO lo FROM {{w}} AS w WHERE w.name = NEW.name;
			lo := coalesce(lo, 0); -- no trim yet, or no row
			SELECT h2.id INTO cut FROM {{h}} AS h2 WHERE h2.name = NEW.name AND h2.id > lo ORDER BY h2.id DESC OFFSET 1000 LIMIT 1;
			IF cut IS NOT NULL THEN
				DELETE FROM {{h}} AS h WHERE h.name = NEW.name AND h.id > lo AND h.id <= cut;
				UPDATE {{w}} AS w SET trimmed = cut WHERE w.name = NEW.name;
			END IF;
		END IF;
	END IF;
	RETURN NULL;
END
$leasehold$;
DROP TRIGGER IF EXISTS ` + triggerInsert + ` ON {{t}};
DROP TRIGGER IF EXISTS ` + triggerUpdate + ` ON {{t}};
CREATE TRIGGER ` + triggerInsert + ` AFTER INSERT ON {{t}} FOR EACH ROW EXECUTE PROCEDURE {{f}}();
CREATE TRIGGER ` + triggerUpdate + ` AFTER UPDATE ON {{t}} FOR EACH ROW
	WHEN (OLD.holder IS DISTINCT FROM NEW.holder OR OLD.epoch IS DISTINCT FROM NEW.epoch)
	EXECUTE PROCEDURE {{f}}();
COMMENT ON FUNCTION {{f}}() IS '` + schemaVersion + `'`
)

// The lease functions: acquire, renew and release, the statements a lease's
// cycle and its renewals run, each wrapped in a PL/pgSQL function whose body
// is the statement itself (built by newStatements on the fully named table,
// so the two cannot drift apart). A client calls the function with a
// one-line statement. PL/pgSQL keeps the plan of the statement inside per
// server session, so the server parses, analyses and plans the long
// statement once per session instead of on every call, which it does for
// the unnamed statement the store sends so that no named prepared
// statement outlives a call behind a transaction pooler (the functions are
// schema objects, not session state, and safe behind any pooler). They run
// with the caller's privileges (SECURITY INVOKER, the default), so they
// grant nothing the caller's role could not do with the statement itself.
//
// Each call names the statements' version (leaseFunctionsVersion, a digest
// of their text), and a function whose body is another version refuses it
// with undefined_function before it touches anything: a process never runs
// a statement other than its own, whichever version migrated the database
// last. A store whose call finds no function, or one of another version,
// or one it may not execute, sends the statements themselves from then on
// (Store.leaseQuery), so a database migrated by an earlier version, or a
// rolling upgrade, keeps working, at the statements' cost.
//
// {{f}} is the function's name, {{args}} its argument list, {{ret}} its
// result, {{vp}} the argument that carries the caller's version, {{v}} the
// version, {{q}} the statement and {{mark}} leaseFunctionsMark.
const sqlCreateLeaseFunction = `CREATE OR REPLACE FUNCTION {{f}}{{args}} RETURNS {{ret}} LANGUAGE plpgsql AS $leasehold$
BEGIN
IF {{vp}} IS DISTINCT FROM '{{v}}' THEN
	RAISE EXCEPTION 'leasehold: lease function of version {{v}} called by version %', {{vp}} USING ERRCODE = 'undefined_function';
END IF;
RETURN QUERY {{q}};
END
$leasehold$;
COMMENT ON FUNCTION {{f}}{{args}} IS '{{mark}}'`

// leaseFunctions are the four lease functions, in the order of
// leaseStatements: the suffix of the name, the argument list (also their
// signature for to_regprocedure: the statement's parameters, then the
// version), the result and the version's argument. The calls are in
// newStatements.
var leaseFunctions = [4]struct{ suffix, args, ret, versionArg string }{
	{fnAcquire, "(text,text,float8,text,text)", recordResult, "$5"},
	{fnAcquireUnqueued, "(text,text,float8,text,text)", recordResult, "$5"},
	{fnRenew, "(text,text,bigint,float8,text)", recordResult, "$5"},
	{fnRelease, "(text,text,bigint,text)", "SETOF bigint", "$4"},
}

// leaseStatements are the statements the lease functions wrap, in the order
// of leaseFunctions.
func leaseStatements(st statements) [4]string {
	return [4]string{st.acquire, st.acquireUnqueued, st.renew, st.release}
}

// recordResult is the result of the functions that answer a record, in
// recordCols' order and types.
const recordResult = "TABLE (lh_name text, lh_holder text, lh_epoch bigint, lh_remaining float8, lh_ttl float8, lh_metadata text)"

// The lease functions' names are the table's with these suffixes.
const (
	fnAcquire = "_acquire"
	// fnAcquireUnqueued is the fair Lock's acquire (Store.AcquireUnqueued),
	// eight bytes like "_history", which maxTableLen leaves room for.
	fnAcquireUnqueued = "_acqfair"
	fnRenew           = "_renew"
	fnRelease         = "_release"
)

// leaseFunctionsVersion is the version of the lease functions: a digest of
// the three statements they wrap and of the template that wraps them
// (leaseFunctionsDigest, computed by TestLeaseFunctionsVersion, which fails
// with the new value whenever either changes), so that any change to either
// is a new version, which Migrate installs and which no process of another
// version calls. It is a constant, checked by that test, rather than
// computed at start, to keep the command's binary small. It is apart from
// schemaVersion: a process of an earlier version, which knows nothing of
// the functions, finds its own schema current and leaves them alone, and
// this version adds them to a schema 2 database without touching its
// triggers (so without locking the lease table).
const leaseFunctionsVersion = "3ed1288afb8e"

// leaseFunctionsMark is the comment Migrate puts on each lease function, by
// which Migrate knows them current.
const leaseFunctionsMark = "leasehold lease functions " + leaseFunctionsVersion

// The fair queue (queue.go). {{q}} is the places table, {{s}} the counter
// table, {{qi}} the places index's bare name.
const sqlCreateQueue = `CREATE TABLE IF NOT EXISTS {{s}} (
	name text PRIMARY KEY,
	n    bigint NOT NULL
);
CREATE TABLE IF NOT EXISTS {{q}} (
	name       text NOT NULL,
	holder     text NOT NULL,
	seq        bigint NOT NULL,
	expires_at timestamptz NOT NULL,
	PRIMARY KEY (name, holder)
);
CREATE INDEX IF NOT EXISTS {{qi}} ON {{q}} (name, seq);
COMMENT ON TABLE {{q}} IS 'fair queue: each waiter''s place (seq: its position; expires_at on clock_timestamp()). A place grants nothing (leasehold)';
COMMENT ON TABLE {{s}} IS 'fair queue: the last position given out per lease name (leasehold)'`

// textArray encodes strings as a PostgreSQL array literal, so that arrays
// cross every driver as one text parameter.
func textArray(ss []string) string {
	var b strings.Builder
	b.WriteByte('{')
	for i, s := range ss {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('"')
		for j := 0; j < len(s); j++ {
			if s[j] == '"' || s[j] == '\\' {
				b.WriteByte('\\')
			}
			b.WriteByte(s[j])
		}
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}

func int64Array(ns []int64) string {
	var b strings.Builder
	b.WriteByte('{')
	for i, n := range ns {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(n, 10))
	}
	b.WriteByte('}')
	return b.String()
}
