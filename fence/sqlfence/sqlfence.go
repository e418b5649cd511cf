// Package sqlfence fences SQL writes: inside the caller's own transaction, one
// call claims the lease's fencing token on a small fence table, and a stale
// token is refused before the transaction can commit.
//
//	tx, _ := db.BeginTx(ctx, nil)
//	defer tx.Rollback()
//	t := lease.Term()
//	if err := sqlfence.PostgresFence.Claim(ctx, sqlfence.SQLTx(tx), "invoices", t.Holder, t.Token); err != nil {
//		return err // errors.Is(err, fence.ErrStale): a newer term has written; tx is rolled back
//	}
//	// ... the caller's writes ...
//	return tx.Commit()
//
// The fence table holds the highest term (token and holder) that has written
// each resource:
//
//	CREATE TABLE leasehold_fence (resource text PRIMARY KEY, token bigint NOT NULL CHECK (token >= 1), holder text NOT NULL DEFAULT '')
//
// ([Fence.Migrate] creates it, and adds the holder column to a table created
// before fences kept holders; [Fence.CreateTableSQL] and [Fence.UpgradeSQL]
// give the statements for each dialect, for users who run their own
// migrations.)
//
// A number is not a term: after a lease store loses data, one token value can
// be granted to two terms. So the claim compares the term, not only the
// number: a higher token is admitted whoever holds it (and its holder
// recorded), the highest token is admitted again only for the holder it was
// admitted for, and anything else is stale. A row whose holder is ” (written
// before the holder column existed) admits only higher tokens.
//
// Claim is one statement, an upsert that never lowers the row's token, takes
// the new holder only with a higher token, and reports the row's term after
// it (PostgreSQL and SQLite: INSERT ... ON CONFLICT (resource) DO UPDATE SET
// token = GREATEST(f.token, EXCLUDED.token), holder = CASE WHEN
// EXCLUDED.token > f.token THEN EXCLUDED.holder ELSE f.holder END RETURNING
// token, holder; MySQL/MariaDB: the equivalent ON DUPLICATE KEY UPDATE,
// reporting through LAST_INSERT_ID). The claim is admitted when the row's
// term is now the claimed one; it is stale when the row holds a higher token,
// or the same token for another holder. On PostgreSQL the conflict clause
// has WHERE (f.token, f.holder) IS DISTINCT FROM (EXCLUDED.token,
// EXCLUDED.holder): a claim of the term the row holds already (every write
// of a term after its first) only locks the row, writes no new row version
// and returns no row, which is the admission. The row stays locked by the transaction until it ends, so concurrent
// writers of one resource serialise on it, and a stale writer that arrives
// last still loses: it waits for the newer writer's commit, then reads the
// higher token. It costs one row touched and one statement; with a pipeline
// (pgx's Batch), [Fence.QueueClaim] sends the claim in the same round trip as
// the caller's writes. If the token is stale, Claim rolls the transaction back and returns
// a *fence.StaleError (matching fence.ErrStale, and fence.ErrTokenReused for
// the highest token from another holder) carrying the highest token: the
// caller's writes in that transaction are undone, and a later Commit fails.
// The highest token from the holder it was admitted for is admitted: one term
// writes many times.
//
// # The direct form
//
// Where the protected data is one row, the row itself can carry the term:
//
//	UPDATE invoices SET status = $4, last_epoch = $2, last_holder = $3
//	WHERE id = $1 AND (last_epoch < $2 OR (last_epoch = $2 AND last_holder = $3))
//
// and zero rows updated means a newer term has written that row (or it does
// not exist). This needs no fence table but two columns on every fenced
// table, and a stale writer learns nothing about the newer term.
//
// # Lease-checked writes (PostgreSQL)
//
// When the lease itself lives in the same PostgreSQL database (package
// store/postgres, table leader_lease), [Fence.CheckLease] and
// [Fence.ClaimLease] also check, in the caller's transaction, that the lease
// row still names this exact term (name, holder, epoch) and has not expired
// (expires_at > clock_timestamp()), and share-lock it. A takeover is an UPDATE
// of that row, so it waits until the transaction ends; after that the old
// term's epoch no longer matches. Writes in that database made in transactions
// that use the check are then mutually exclusive between terms, not only
// ordered. See [Fence.CheckLease] for what this does not protect.
//
// # Dialects and drivers
//
// Every operation runs in the caller's transaction, a [Tx]: [SQLTx] adapts a
// *sql.Tx of any database/sql driver, and package fence/sqlfence/pgxfence
// adapts a pgx v5 transaction (and a pgx.Batch for QueueClaim), so that only
// its users link pgx. PostgreSQL: pgx v5 or any database/sql driver. SQLite
// 3.35+ through database/sql (modernc.org/sqlite): SQLite
// serialises writers on the database lock, so open it with
// _txlock=immediate and a busy_timeout, or a deferred transaction that read
// first may fail with SQLITE_BUSY instead of waiting. MySQL 5.7+/8 and
// MariaDB 10.3+ (InnoDB) through database/sql (github.com/go-sql-driver/mysql):
// concurrent first claims of a new resource can end in an InnoDB deadlock
// error (1213), which rolls the transaction back; retry it. Only a
// transaction is accepted: a claim outside one would commit on its own and
// fence nothing.
//
// # What is and is not guaranteed
//
// A fence protects only writes that claim it, in the database that holds the
// fence table, in the same transaction as the claim. It orders terms of one
// lease per resource (tokens of different leases are not comparable). It is as
// durable as the database (a restored backup or a promoted asynchronous
// replica can forget the highest token). Under REPEATABLE READ or SERIALIZABLE
// isolation a concurrent claim may fail with a serialization error instead of
// waiting; the caller retries the transaction, and no stale write commits.
package sqlfence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/leasehold/leasehold/fence"
	"github.com/leasehold/leasehold/store/storekit"
)

// Dialect is the SQL flavour of the database holding the fence table.
type Dialect int

const (
	// Postgres is PostgreSQL 9.5 or later (ON CONFLICT), through any
	// database/sql driver or pgx v5 (package pgxfence).
	Postgres Dialect = iota + 1
	// SQLite is SQLite 3.35 or later (upsert with RETURNING), such as
	// modernc.org/sqlite.
	SQLite
	// MySQL is MySQL 5.7+/8 or MariaDB 10.3+ with InnoDB.
	MySQL
)

func (d Dialect) String() string {
	switch d {
	case Postgres:
		return "postgres"
	case SQLite:
		return "sqlite"
	case MySQL:
		return "mysql"
	}
	return fmt.Sprintf("Dialect(%d)", int(d))
}

// Default table names.
const (
	DefaultTable      = "leasehold_fence"
	DefaultLeaseTable = "leader_lease"
)

// Config configures a Fence.
type Config struct {
	Dialect Dialect
	// Table is the fence table: a plain SQL identifier, optionally qualified
	// by a schema (letters, digits, '_', not starting with a digit, at most
	// 63 bytes each). Empty means DefaultTable.
	Table string
	// LeaseTable is the lease table of store/postgres, for CheckLease and
	// ClaimLease (PostgreSQL only); the same rules. Empty means
	// DefaultLeaseTable.
	LeaseTable string
}

// Fence claims tokens on one fence table. It is immutable and safe for
// concurrent use.
type Fence struct {
	d          Dialect
	table      string
	leaseTable string

	claimSQL   string
	queueSQL   string // PostgreSQL: the claim of QueueClaim, failing when stale
	createSQL  string
	upgradeSQL string
}

// The Fences on the default tables, one per dialect.
var (
	PostgresFence = mustNew(Config{Dialect: Postgres})
	SQLiteFence   = mustNew(Config{Dialect: SQLite})
	MySQLFence    = mustNew(Config{Dialect: MySQL})
)

func mustNew(c Config) *Fence {
	f, err := New(c)
	if err != nil {
		panic(err)
	}
	return f
}

// kit builds sqlfence's bad-input errors with the stores' one SQL identifier
// rule.
var kit = storekit.Kit{Store: "sqlfence"}

// ValidateTable checks a table name: a plain SQL identifier, optionally
// schema-qualified (schema.table), each part by storekit's one rule for SQL
// identifiers (storekit.Kit.SQLIdentFold: 1 to 63 bytes of ASCII letters,
// digits and '_', not starting with a digit). Anything else (quotes, spaces,
// semicolons, a second '.') is refused with an error matching fence.ErrInvalid
// (and store.ErrInvalid) that names the part; a table name is never quoted or
// escaped, only checked.
//
// Upper-case letters are allowed, as the case-folding form of the rule allows
// them: sqlfence writes the name unquoted in every statement it sends, so
// each engine reads it the same way each time (PostgreSQL folds it to lower
// case, SQLite ignores case, MySQL compares it as its lower_case_table_names
// says). The strict form (lower case only) is for the stores, whose tables a
// person's own SQL may name quoted.
func ValidateTable(name string) error { return validateTable("", name) }

func validateTable(op, name string) error {
	schema, table, qualified := strings.Cut(name, ".")
	if !qualified {
		return tableError(kit.SQLIdentFold(op, "table", name, 0))
	}
	if strings.Contains(table, ".") {
		return tableError(kit.Invalid(op, "table name %q has more than one '.' (schema.table at most)", name))
	}
	if err := kit.SQLIdentFold(op, "schema", schema, 0); err != nil {
		return tableError(err)
	}
	return tableError(kit.SQLIdentFold(op, "table", table, 0))
}

// tableError makes a bad table name match fence.ErrInvalid, the error this
// package's callers test for, besides the kit's store.ErrInvalid.
func tableError(err error) error {
	if err == nil {
		return nil
	}
	return &invalidTableError{err}
}

type invalidTableError struct{ err error }

func (e *invalidTableError) Error() string   { return e.err.Error() }
func (e *invalidTableError) Unwrap() []error { return []error{fence.ErrInvalid, e.err} }

// New validates c and returns a Fence.
func New(c Config) (*Fence, error) {
	if c.Table == "" {
		c.Table = DefaultTable
	}
	if c.LeaseTable == "" {
		c.LeaseTable = DefaultLeaseTable
	}
	if err := validateTable("Config.Table", c.Table); err != nil {
		return nil, err
	}
	if err := validateTable("Config.LeaseTable", c.LeaseTable); err != nil {
		return nil, err
	}
	f := &Fence{d: c.Dialect, table: c.Table, leaseTable: c.LeaseTable}
	t := c.Table
	switch c.Dialect {
	case Postgres:
		// GREATEST, not a WHERE on the token: the row never goes down, and
		// the row's term after a claim that changes it is reported (read
		// from the latest version, which ON CONFLICT has locked), so a stale
		// claim learns the highest token in the same statement. Every SET
		// expression reads the old row, so the holder changes exactly when
		// the token rises. See pgUpsert for the claim that changes nothing.
		// One plain statement, no CTE around it: the claim of the same term
		// again is what most fenced writes do, and a wrapper that turned its
		// empty answer into a row cost the server a quarter of the claim.
		f.claimSQL = pgInsert(t) + `
RETURNING token, holder`
		// QueueClaim's claim must fail inside the database when the term is
		// stale, so that the writes queued after it never run. Its conflict
		// clause takes the claimed term only with a higher token, and turns
		// anything else that is not the row's own term (a lower token, or the
		// same token for another holder) into a failed cast of staleMarker
		// and the row's token, before it writes anything. It returns no row:
		// success is the admission.
		f.queueSQL = `INSERT INTO ` + t + ` AS f (resource, token, holder) VALUES ($1, $2, $3)
ON CONFLICT (resource) DO UPDATE SET
  token = CASE WHEN EXCLUDED.token > f.token THEN EXCLUDED.token ELSE ('` + staleMarker + `' || f.token)::bigint END,
  holder = EXCLUDED.holder
` + pgOtherTerm
		f.createSQL = `CREATE TABLE IF NOT EXISTS ` + t + ` (resource text PRIMARY KEY, token bigint NOT NULL CHECK (token >= 1), holder text NOT NULL DEFAULT '')`
		f.upgradeSQL = `ALTER TABLE ` + t + ` ADD COLUMN IF NOT EXISTS holder text NOT NULL DEFAULT ''`
	case SQLite:
		// SQLite, too, evaluates every SET expression on the old row.
		f.claimSQL = `INSERT INTO ` + t + ` AS f (resource, token, holder) VALUES (?1, ?2, ?3)
ON CONFLICT (resource) DO UPDATE SET token = max(f.token, excluded.token),
  holder = CASE WHEN excluded.token > f.token THEN excluded.holder ELSE f.holder END
RETURNING token, holder`
		f.createSQL = `CREATE TABLE IF NOT EXISTS ` + t + ` (resource TEXT PRIMARY KEY, token INTEGER NOT NULL CHECK (token >= 1), holder TEXT NOT NULL DEFAULT '')`
		f.upgradeSQL = `ALTER TABLE ` + t + ` ADD COLUMN holder TEXT NOT NULL DEFAULT ''`
	case MySQL:
		// LAST_INSERT_ID(expr) makes the statement report the row's token
		// after the upsert (in the OK packet, as Result.LastInsertId): equal
		// to ours if admitted, higher if stale. No RETURNING, one round trip,
		// and independent of the CLIENT_FOUND_ROWS flag. The reported value
		// has bit 63 set when the row keeps our token for another holder (a
		// token granted to two terms); the column itself keeps the token
		// (masked). MySQL assigns left to right, so the holder is assigned
		// first, from the old token; in the token's expression, holder is
		// then the old holder whenever the tokens are equal (also under
		// MariaDB's SIMULTANEOUS_ASSIGNMENT). The holder is VARBINARY:
		// compared byte for byte, never by a case-insensitive collation.
		f.claimSQL = `INSERT INTO ` + t + ` (resource, token, holder) VALUES (?, LAST_INSERT_ID(?), ?)
ON DUPLICATE KEY UPDATE
  holder = IF(VALUES(token) > token, VALUES(holder), holder),
  token = LAST_INSERT_ID(CASE WHEN VALUES(token) = token AND holder <> VALUES(holder)
    THEN CAST(token AS UNSIGNED) | 9223372036854775808
    ELSE CAST(GREATEST(token, VALUES(token)) AS UNSIGNED) END) & 9223372036854775807`
		f.createSQL = `CREATE TABLE IF NOT EXISTS ` + t + ` (resource VARBINARY(255) NOT NULL PRIMARY KEY, token BIGINT NOT NULL, holder VARBINARY(253) NOT NULL DEFAULT '') ENGINE=InnoDB`
		f.upgradeSQL = `ALTER TABLE ` + t + ` ADD COLUMN holder VARBINARY(253) NOT NULL DEFAULT ''`
	default:
		return nil, fmt.Errorf("leasehold/sqlfence: %w: unknown dialect %d (want Postgres, SQLite or MySQL)", fence.ErrInvalid, int(c.Dialect))
	}
	return f, nil
}

// pgInsert is the PostgreSQL claim of the term ($2, $3) for resource $1 on
// table t, without its RETURNING clause: an upsert whose conflict clause is
// pgUpsert.
func pgInsert(t string) string {
	return `INSERT INTO ` + t + ` AS f (resource, token, holder) VALUES ($1, $2, $3)
` + pgUpsert
}

// pgUpsert is the conflict clause of the PostgreSQL claims: the token never
// goes down, and the holder changes only with a higher token. A claim of the
// term the row already holds (every write of a term after its first)
// changes nothing: the WHERE is false, so PostgreSQL only locks the row, as
// it locks every conflicting row, and writes no new row version; the
// statement's RETURNING then gives no row. So a claim that returns no row is
// admitted: the row it has locked holds the claimed term. Every other claim
// returns the row's term after it: the claimed one (a new row, or a higher
// token), or a higher token, or the claimed token with another holder.
const pgUpsert = `ON CONFLICT (resource) DO UPDATE SET token = GREATEST(f.token, EXCLUDED.token),
  holder = CASE WHEN EXCLUDED.token > f.token THEN EXCLUDED.holder ELSE f.holder END
` + pgOtherTerm

// pgOtherTerm is the WHERE of the PostgreSQL claims' conflict clauses: it is
// false when the row the claim has locked holds the claimed term already.
const pgOtherTerm = `WHERE (f.token, f.holder) IS DISTINCT FROM (EXCLUDED.token, EXCLUDED.holder)`

// mysqlReused is bit 63 of the MySQL claim's LAST_INSERT_ID: the row keeps
// the claimed token for another holder.
const mysqlReused = -1 << 63

// Dialect returns the fence's dialect.
func (f *Fence) Dialect() Dialect { return f.d }

// Table returns the fence table's name.
func (f *Fence) Table() string { return f.table }

// CreateTableSQL returns the statement that creates the fence table if it is
// missing, for users who manage their schema with their own migrations.
func (f *Fence) CreateTableSQL() string { return f.createSQL }

// UpgradeSQL returns the statement that adds the holder column to a fence
// table created before fences kept holders (token only). Existing rows get
// the holder ” (unknown): they admit only higher tokens, so the term that
// holds a lease at the upgrade is refused (as stale) until its next term.
// On PostgreSQL it is idempotent (ADD COLUMN IF NOT EXISTS); on SQLite and
// MySQL it fails if the column exists (Migrate checks first).
func (f *Fence) UpgradeSQL() string { return f.upgradeSQL }

// Execer is what Migrate needs: a *sql.DB, *sql.Conn or *sql.Tx, or a pgx
// pool, connection or transaction through pgxfence.Execer.
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// Migrate creates the fence table if it is missing, and adds the holder
// column if the table lacks it (see UpgradeSQL). It is idempotent.
func (f *Fence) Migrate(ctx context.Context, db Execer) error {
	if db == nil {
		return fmt.Errorf("leasehold/sqlfence: %w: Migrate needs a database, got nil", fence.ErrInvalid)
	}
	if _, err := db.ExecContext(ctx, f.createSQL); err != nil {
		return fmt.Errorf("leasehold/sqlfence: create fence table %s: %w", f.table, err)
	}
	if f.d != Postgres {
		// No ADD COLUMN IF NOT EXISTS in SQLite nor MySQL: look first.
		_, err := db.ExecContext(ctx, `SELECT holder FROM `+f.table+` WHERE 1 = 0`)
		if err == nil {
			return nil
		}
		if !missingColumn(err) {
			return fmt.Errorf("leasehold/sqlfence: look for the holder column of %s: %w", f.table, err)
		}
	}
	if _, err := db.ExecContext(ctx, f.upgradeSQL); err != nil && !duplicateColumn(err) {
		return fmt.Errorf("leasehold/sqlfence: add the holder column to %s: %w", f.table, err)
	}
	return nil
}

// Claim claims the term (holder, token) for resource in tx: it returns nil if
// token is higher than the highest token that has claimed resource, or equal
// to it and claimed by the same holder, and records the term as the highest
// (visible to others when tx commits; until tx ends, other claims of resource
// wait). If the term is stale (a lower token, or the highest token claimed by
// another holder) it rolls tx back and returns a *fence.StaleError (matching
// fence.ErrStale, and fence.ErrTokenReused in the second case) carrying the
// highest token. Any other error also rolls tx back: the outcome is unknown,
// so the caller's writes must not commit. An error matching fence.ErrInvalid
// names a bad resource, holder or token; an empty holder is refused.
//
// Claim before or after the caller's own writes in tx; what matters is that
// they commit together. Claiming first makes a stale writer wait less.
func (f *Fence) Claim(ctx context.Context, tx Tx, resource, holder string, token int64) error {
	if err := f.checkTx(ctx, tx); err != nil {
		return err
	}
	if err := fence.ValidateTerm(resource, holder, token); err != nil {
		rollback(ctx, tx)
		return fmt.Errorf("leasehold/sqlfence: claim: %w", err)
	}
	return f.claim(ctx, tx, resource, holder, token)
}

// checkTx refuses a nil transaction, and (rolling it back) one that says it
// speaks another dialect.
func (f *Fence) checkTx(ctx context.Context, tx Tx) error {
	if tx == nil {
		return fmt.Errorf("leasehold/sqlfence: %w: transaction is nil", fence.ErrInvalid)
	}
	if d, ok := tx.(interface{ Dialect() Dialect }); ok && d.Dialect() != f.d {
		rollback(ctx, tx)
		return fmt.Errorf("leasehold/sqlfence: %w: the transaction speaks %v, this fence is %v", fence.ErrInvalid, d.Dialect(), f.d)
	}
	return nil
}

func (f *Fence) claim(ctx context.Context, tx Tx, resource, holder string, token int64) error {
	var highest int64
	var highestHolder string
	if f.d == MySQL {
		id, err := lastInsertID(tx.Exec(ctx, f.claimSQL, []byte(resource), token, []byte(holder)))
		if err != nil {
			rollback(ctx, tx)
			return f.wrap("claim", resource, token, err)
		}
		// Bit 63: the row keeps our token for another holder, whose name
		// this one round trip does not bring back.
		highest, highestHolder = id&^mysqlReused, holder
		if id&mysqlReused != 0 {
			highestHolder = ""
		}
	} else {
		err := tx.QueryRow(ctx, f.claimSQL, resource, token, holder).Scan(&highest, &highestHolder)
		switch {
		case f.d == Postgres && errors.Is(err, sql.ErrNoRows):
			// The WHERE of pgUpsert was false on the row the claim has
			// locked: it holds this term already.
			highest, highestHolder = token, holder
		case err != nil:
			rollback(ctx, tx)
			return f.wrap("claim", resource, token, err)
		}
	}
	return f.verdict(ctx, tx, resource, holder, token, highest, highestHolder)
}

// verdict compares the term of the fence row after a claim with the claimed
// one: the same term is admitted; a higher token, or the same token for
// another holder, is stale (tx is rolled back).
func (f *Fence) verdict(ctx context.Context, tx Tx, resource, holder string, token, highest int64, highestHolder string) error {
	switch {
	case highest == token && highestHolder == holder:
		return nil
	case highest > token || highest == token:
		rollback(ctx, tx)
		return &fence.StaleError{Resource: resource, Token: token, Highest: highest, Holder: holder, HighestHolder: highestHolder}
	default:
		rollback(ctx, tx)
		return fmt.Errorf("leasehold/sqlfence: claim %q with token %d: the fence row says %d after the claim", resource, token, highest)
	}
}

func (f *Fence) wrap(op, resource string, token int64, err error) error {
	if missingColumn(err) {
		return fmt.Errorf("leasehold/sqlfence: %s %q with token %d: fence table %s has no holder column (add it with Fence.Migrate or the statement of Fence.UpgradeSQL): %w",
			op, resource, token, f.table, err)
	}
	if missingTable(err) {
		return fmt.Errorf("leasehold/sqlfence: %s %q with token %d: fence table %s is missing (create it with Fence.Migrate or the statement of Fence.CreateTableSQL): %w",
			op, resource, token, f.table, err)
	}
	return fmt.Errorf("leasehold/sqlfence: %s %q with token %d: %w", op, resource, token, err)
}

// missingColumn recognises "no such column" from SQLite and MySQL (1054,
// SQLSTATE 42S22) without importing their drivers.
func missingColumn(err error) bool {
	var st interface{ SQLState() string }
	if errors.As(err, &st) && (st.SQLState() == "42S22" || st.SQLState() == "42703") {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "no such column") || strings.Contains(msg, "has no column named") || strings.Contains(msg, "Error 1054") || strings.Contains(msg, "Unknown column")
}

// duplicateColumn recognises "the column exists" (two migrations racing).
func duplicateColumn(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "duplicate column") || strings.Contains(msg, "Error 1060") || strings.Contains(msg, "Duplicate column")
}

// missingTable recognises "no such table" from the drivers of each dialect
// without importing them.
func missingTable(err error) bool {
	var st interface{ SQLState() string }
	if errors.As(err, &st) {
		switch st.SQLState() {
		case "42P01", "42S02":
			return true
		}
	}
	msg := err.Error()
	return strings.Contains(msg, "no such table") || strings.Contains(msg, "(42S02)") || strings.Contains(msg, "SQLSTATE 42P01")
}

// Tx is the caller's transaction, in which a fence claims or checks, so that
// the claim commits or rolls back with the caller's writes. SQLTx adapts a
// *sql.Tx (any database/sql driver); package fence/sqlfence/pgxfence adapts a
// pgx.Tx. A fence calls Rollback itself when it refuses a claim or cannot
// tell its outcome; committing is the caller's. A Tx that also has a method
// Dialect() Dialect (pgxfence's: Postgres) is refused by a fence of another
// dialect.
type Tx interface {
	// QueryRow runs query with args. The Row's Scan returns an error matching
	// sql.ErrNoRows if the query returned no row.
	QueryRow(ctx context.Context, query string, args ...any) Row
	// Exec runs query with args. A fence uses its result only on MySQL (the
	// claim reports through LastInsertId).
	Exec(ctx context.Context, query string, args ...any) (sql.Result, error)
	// Rollback ends the transaction without committing it.
	Rollback(ctx context.Context) error
}

// Row is one row of a query's answer: *sql.Row, or pgx.Row.
type Row interface {
	Scan(dest ...any) error
}

// SQLTx adapts a database/sql transaction to Tx. A nil tx gives a nil Tx.
func SQLTx(tx *sql.Tx) Tx {
	if tx == nil {
		return nil
	}
	return stdTx{tx}
}

type stdTx struct{ tx *sql.Tx }

func (t stdTx) QueryRow(ctx context.Context, q string, args ...any) Row {
	return t.tx.QueryRowContext(ctx, q, args...)
}

func (t stdTx) Exec(ctx context.Context, q string, args ...any) (sql.Result, error) {
	return t.tx.ExecContext(ctx, q, args...)
}

func (t stdTx) Rollback(context.Context) error { return t.tx.Rollback() }

func lastInsertID(res sql.Result, err error) (int64, error) {
	if err != nil {
		return 0, err
	}
	return res.LastInsertId()
}

// rollback ends tx with a detached, bounded context: the caller's ctx may be
// the reason we are here.
func rollback(ctx context.Context, tx Tx) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = tx.Rollback(rctx)
}
