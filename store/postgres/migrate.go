package postgres

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// migrateLockKey serialises concurrent Migrate calls on one database with a
// transaction-level advisory lock (which a transaction pooler keeps intact).
const migrateLockKey int64 = 0x6c65617365686f6c // "leasehol"

// Migrate implements store.Migrator. In one transaction it creates what is
// missing, and only that:
//
//   - the schema named by Options.Schema;
//   - the lease table: leader_lease(name text PRIMARY KEY, holder text, epoch
//     bigint NOT NULL DEFAULT 0, expires_at timestamptz NOT NULL DEFAULT
//     '-infinity') plus leasehold's own nullable columns metadata, ttl and
//     meta_epoch, which are added to a table made by hand with the four
//     columns (raw SQL clients never need to know them);
//   - the history table <table>_history;
//   - the trigger function <table>_changed() and its two triggers, which
//     NOTIFY waiters, write the history and raise the high-water mark on
//     every grant and release, by leasehold or by any other client;
//   - the high-water table <table>_epochs (the highest epoch ever given to
//     each name, seeded from the lease rows and the history; and where the
//     history trim of the name ended, its column trimmed), and the guard
//     <table>_guard() with its four triggers, which refuse DELETE,
//     TRUNCATE, renaming a row and lowering an epoch, and lift any grant
//     that would not exceed the name's high-water mark above it;
//   - the fair queue's tables <table>_queue (one row per waiter's place)
//     and <table>_qseq (each name's position counter), see queue.go. A
//     schema migrated before they existed gets them from Migrate;
//   - the lease functions <table>_acquire, <table>_acqfair, <table>_renew
//     and <table>_release, the store's acquire, fair acquire (see
//     AcquireUnqueued), renew and release statements as PL/pgSQL
//     functions, whose plans the server keeps per session (see
//     leaseFunctions). A schema migrated before they existed gets
//     them from Migrate, without touching the triggers or locking the
//     table; until then the store sends the statements themselves.
//
// A table migrated by an earlier version (schema 1, without the guard;
// schema 2, whose history trim was not bounded below; schema 3, whose
// trigger computed its NOTIFY channel on every call) is upgraded by running
// Migrate again; so is one whose triggers were dropped or disabled. One
// migrated by a later version is left as it is.
//
// It is idempotent, changes no lease, and when everything is current runs
// no DDL (so needs no DDL privilege) and takes no lock: one catalogue read.
func (s *Store) Migrate(ctx context.Context) error {
	if err := s.life.Check(ctx); err != nil {
		return err
	}
	err := s.retry(ctx, func() error {
		// Most calls find everything current: one read, no lock, so that a
		// fleet of processes starting at once does not queue behind one
		// another on the migration lock (on a loaded server the queue grew
		// past the callers' timeouts and no process got through).
		if ok, err := s.current(ctx, s.q); err != nil || ok {
			return err
		}
		return s.q.inTx(ctx, func(q querier) error { return s.migrate(ctx, q) })
	})
	if err != nil {
		return kit.Wrap("migrate "+s.qtable, err)
	}
	return nil
}

// MigrationCurrent implements store.MigrationChecker: whether Migrate would
// find everything in place (the table, its triggers, the lease functions of
// this version), in one catalogue read that takes no lock.
func (s *Store) MigrationCurrent(ctx context.Context) (bool, error) {
	if err := s.life.Check(ctx); err != nil {
		return false, err
	}
	ok, err := s.current(ctx, s.q)
	if err != nil {
		return false, kit.Wrap("check migration of "+s.qtable, err)
	}
	return ok, nil
}

// leaseFunctionSigs are the lease functions, each its name's suffix and its
// argument list.
var leaseFunctionSigs = func() []string {
	var sigs []string
	for _, f := range leaseFunctions {
		sigs = append(sigs, f.suffix+f.args)
	}
	return sigs
}()

// leaseColumns are the lease table's columns, leasehold's own included.
var leaseColumns = []string{"name", "holder", "epoch", "expires_at", "metadata", "ttl", "meta_epoch"}

// current reports whether everything migrate would create or upgrade is
// there and current, in one catalogue read that takes no lock. What it
// finds cannot be undone by a concurrent Migrate, which only adds.
func (s *Store) current(ctx context.Context, q querier) (bool, error) {
	var ok bool
	_, err := queryOne(ctx, q, `SELECT coalesce((SELECT
	(SELECT count(*) FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped AND a.attname = ANY ($2::text[])) = cardinality($2::text[])
	AND to_regclass(format('%I.%I', n.nspname, $3::text || '_history')) IS NOT NULL
	AND to_regclass(format('%I.%I', n.nspname, $3::text || '_epochs')) IS NOT NULL
	AND to_regclass(format('%I.%I', n.nspname, $3::text || '_queue')) IS NOT NULL
	AND to_regclass(format('%I.%I', n.nspname, $3::text || '_qseq')) IS NOT NULL
	AND `+schemaAtLeast(`obj_description(to_regprocedure(format('%I.%I()', n.nspname, $3::text || '_changed')), 'pg_proc')`, "$4")+`
	AND `+schemaAtLeast(`obj_description(to_regprocedure(format('%I.%I()', n.nspname, $3::text || '_guard')), 'pg_proc')`, "$4")+`
	AND (SELECT count(*) FROM pg_trigger t WHERE t.tgrelid = c.oid AND t.tgenabled <> 'D' AND t.tgname = ANY ($5::text[])) = cardinality($5::text[])
	AND (SELECT count(*) FROM unnest($6::text[]) AS f(sig)
		WHERE coalesce(obj_description(to_regprocedure(format('%I.%I', n.nspname, $3::text || split_part(f.sig, '(', 1)) || '(' || split_part(f.sig, '(', 2)), 'pg_proc'), '') = $7) = cardinality($6::text[])
	FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = to_regclass($1)), false)`,
		[]any{s.qtable, textArray(leaseColumns), s.table, schemaVersion, textArray(allTriggers), textArray(leaseFunctionSigs), leaseFunctionsMark}, &ok)
	return ok, err
}

func queryOne(ctx context.Context, q querier, sql string, args []any, dest ...any) (bool, error) {
	found := false
	err := q.query(ctx, sql, args, func(r rowScanner) error {
		found = true
		return r.Scan(dest...)
	})
	return found, err
}

func (s *Store) migrate(ctx context.Context, q querier) error {
	if err := q.exec(ctx, `SELECT pg_advisory_xact_lock($1)`, migrateLockKey); err != nil {
		return err
	}
	if s.schema != "" {
		var exists bool
		if _, err := queryOne(ctx, q, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, []any{s.schema}, &exists); err != nil {
			return err
		}
		if !exists {
			if err := q.exec(ctx, `CREATE SCHEMA `+pgx.Identifier{s.schema}.Sanitize()); err != nil {
				return err
			}
		}
	}
	var hasTable bool
	if _, err := queryOne(ctx, q, `SELECT to_regclass($1) IS NOT NULL`, []any{s.qtable}, &hasTable); err != nil {
		return err
	}
	r := strings.NewReplacer("{{t}}", s.qtable)
	if !hasTable {
		if err := q.exec(ctx, r.Replace(sqlCreateTable)); err != nil {
			return err
		}
		if err := q.exec(ctx, r.Replace(sqlCommentColumns)); err != nil {
			return err
		}
	}
	cols := map[string]bool{}
	err := q.query(ctx, `SELECT attname::text FROM pg_attribute WHERE attrelid = to_regclass($1) AND attnum > 0 AND NOT attisdropped`,
		[]any{s.qtable}, func(r rowScanner) error {
			var c string
			if err := r.Scan(&c); err != nil {
				return err
			}
			cols[c] = true
			return nil
		})
	if err != nil {
		return err
	}
	for _, c := range []string{"name", "holder", "epoch", "expires_at"} {
		if !cols[c] {
			return fmt.Errorf("table exists but has no column %q, so it is not a lease table: %w", c, ErrNotMigrated)
		}
	}
	var add []string
	for _, c := range []struct{ name, typ string }{{"metadata", "text"}, {"ttl", "interval"}, {"meta_epoch", "bigint"}} {
		if !cols[c.name] {
			add = append(add, "ADD COLUMN "+c.name+" "+c.typ)
		}
	}
	if len(add) > 0 {
		if err := q.exec(ctx, `ALTER TABLE `+s.qtable+` `+strings.Join(add, ", ")); err != nil {
			return err
		}
	}
	// The schema the table resolved to, so that the history table and the
	// trigger function sit next to it and the function names them fully.
	var nsp string
	if _, err := queryOne(ctx, q, `SELECT n.nspname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = to_regclass($1)`,
		[]any{s.qtable}, &nsp); err != nil {
		return err
	}
	hist := ident(nsp, s.table+"_history")
	fn := ident(nsp, s.table+"_changed")
	epochs := ident(nsp, s.table+"_epochs")
	guard := ident(nsp, s.table+"_guard")
	r = strings.NewReplacer("{{t}}", ident(nsp, s.table), "{{h}}", hist, "{{f}}", fn, "{{w}}", epochs, "{{g}}", guard,
		"{{i}}", pgx.Identifier{s.table + "_hidx"}.Sanitize(), "{{ch}}", "'"+channelFor(nsp, s.table)+"'")
	var hasHist bool
	if _, err := queryOne(ctx, q, `SELECT to_regclass($1) IS NOT NULL`, []any{hist}, &hasHist); err != nil {
		return err
	}
	if !hasHist {
		if err := q.exec(ctx, r.Replace(sqlCreateHistory)); err != nil {
			return err
		}
	}
	var hasEpochs bool
	if _, err := queryOne(ctx, q, `SELECT to_regclass($1) IS NOT NULL`, []any{epochs}, &hasEpochs); err != nil {
		return err
	}
	if !hasEpochs {
		if err := q.exec(ctx, r.Replace(sqlCreateEpochs)); err != nil {
			return err
		}
	}
	queue := ident(nsp, s.table+"_queue")
	var hasQueue bool
	if _, err := queryOne(ctx, q, `SELECT to_regclass($1) IS NOT NULL AND to_regclass($2) IS NOT NULL`, []any{queue, ident(nsp, s.table+"_qseq")}, &hasQueue); err != nil {
		return err
	}
	if !hasQueue {
		qr := strings.NewReplacer("{{q}}", queue, "{{s}}", ident(nsp, s.table+"_qseq"), "{{qi}}", pgx.Identifier{s.table + "_qidx"}.Sanitize())
		if err := q.exec(ctx, qr.Replace(sqlCreateQueue)); err != nil {
			return err
		}
	}
	var current bool
	if _, err := queryOne(ctx, q, `SELECT `+schemaAtLeast(`obj_description(to_regprocedure($1), 'pg_proc')`, "$3")+`
	AND `+schemaAtLeast(`obj_description(to_regprocedure($2), 'pg_proc')`, "$3")+`
	AND (SELECT count(*) FROM pg_trigger WHERE tgrelid = to_regclass($4) AND tgenabled <> 'D' AND tgname = ANY ($5::text[])) = $6`,
		[]any{fn + "()", guard + "()", schemaVersion, s.qtable, textArray(allTriggers), len(allTriggers)}, &current); err != nil {
		return err
	}
	if !current {
		// An upgrade from an earlier schema, or triggers dropped or
		// disabled by hand. Creating the triggers locks the lease table
		// against writers until this transaction ends, so the seed below
		// sees every grant made before it, and the triggers every one
		// after. The trigger's trim needs the trimmed column (schema 3)
		// first.
		if err := q.exec(ctx, r.Replace(sqlAddTrimmed)); err != nil {
			return err
		}
		if err := q.exec(ctx, r.Replace(sqlCreateFunction)); err != nil {
			return err
		}
		if err := q.exec(ctx, r.Replace(sqlCreateGuard)); err != nil {
			return err
		}
		if err := q.exec(ctx, r.Replace(sqlSeedEpochs)); err != nil {
			return err
		}
	}
	// The lease functions, (re)made whenever Migrate has work to do:
	// replacing one with itself changes nothing, and it locks no table. The
	// bodies are the store's own statements on the fully named table, so
	// that they resolve the same whatever the caller's search_path.
	st := newStatements(ident(nsp, s.table), hist, queue, func(suffix string) string { return ident(nsp, s.table+suffix) }, leaseFunctionsVersion)
	stmts := leaseStatements(st)
	for i, f := range leaseFunctions {
		fr := strings.NewReplacer("{{f}}", ident(nsp, s.table+f.suffix), "{{args}}", f.args, "{{ret}}", f.ret,
			"{{vp}}", f.versionArg, "{{v}}", leaseFunctionsVersion, "{{q}}", stmts[i], "{{mark}}", leaseFunctionsMark)
		if err := q.exec(ctx, fr.Replace(sqlCreateLeaseFunction)); err != nil {
			return err
		}
	}
	return nil
}
