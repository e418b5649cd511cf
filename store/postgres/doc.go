// Package postgres is the PostgreSQL lease store: if you already run
// PostgreSQL, one table is the whole coordination service.
//
// # The table
//
// A lease is one row of
//
//	leader_lease(name text PRIMARY KEY, holder text, epoch bigint NOT NULL DEFAULT 0,
//	             expires_at timestamptz NOT NULL DEFAULT '-infinity')
//
// plus three nullable columns of leasehold's own (metadata, ttl, meta_epoch)
// that other clients never need to set. epoch is the fencing token: every
// grant adds one to it, and nothing ever lowers it. Migrate (or `leasehold
// migrate`, or Options.CreateIfMissing) creates the table, a history table, a
// high-water table and their triggers; the table name is configurable,
// validated as a plain identifier and always quoted.
//
// # What is guaranteed
//
//   - Acquire is one compare-and-swap statement (INSERT ... ON CONFLICT DO
//     UPDATE ... WHERE free OR expired OR same holder), and Renew and Release
//     are one UPDATE each naming the exact term (name, holder, epoch). Only
//     the database's clock, now(), decides expiry; the holder's clock only
//     decides when the holder stops trusting itself. A forward step of the
//     database server's wall clock shortens every live lease by the step.
//   - A new grant's token is greater than every token granted before for that
//     name, by any client, as long as the database keeps its committed
//     writes. Triggers refuse DELETE and TRUNCATE of lease rows, renaming a
//     row and lowering an epoch; and a row lost anyway (triggers bypassed by
//     a superuser or session_replication_role = replica, an old copy of the
//     row restored, the table dropped and migrated again) continues on its
//     next grant above the highest epoch the high-water table <table>_epochs
//     has recorded for the name, never from 1. A database restored from an
//     old backup, or an asynchronous replica promoted after losing commits,
//     forgets the high-water table too and can hand out a token again: keep
//     the lease table where commits are durable (synchronous_commit on,
//     synchronous replication if you fail over). A row edited by hand into
//     a negative epoch is refused (ErrBadRow) rather than granted from.
//   - The statements are correct at any isolation level: under READ COMMITTED
//     the compare-and-swap is judged on the newest committed row; under
//     REPEATABLE READ and SERIALIZABLE a concurrent change makes the
//     statement fail with a serialization failure, which the store retries.
//     A serialization failure is never reported as a lost lease.
//   - Clients that speak plain SQL share the table (see below).
//   - The fair queue of Config.Fair (store.Queuer) is two more tables,
//     <table>_queue and <table>_qseq: a new place takes its position from the
//     name's counter row, whose lock orders the enqueues of one name; places
//     expire on clock_timestamp(); a place that leaves NOTIFYs the lease's
//     channel. The queue only orders who tries: Acquire never reads it.
//
// What is not guaranteed: a lease alone is not mutual exclusion. A holder can
// pause (GC, a stopped VM) past its lease and wake believing it still leads;
// leasehold cancels its work at a local deadline well before the lease ends,
// but only a resource that checks the term in the same statement as the write
// (fence/sqlfence, or ... WHERE last_epoch < $token OR (last_epoch = $token
// AND last_holder = $holder)) refuses a stale holder for certain. Not
// last_epoch <= $token: that admits one token from two terms, which a lease
// row lost and granted again would hand out.
//
// # Plain SQL clients
//
// The classic statements, run by psql or a service in another language,
//
//	UPDATE leader_lease SET holder=$2, epoch=epoch+1, expires_at=now()+make_interval(secs=>$3)
//	WHERE name=$1 AND (holder IS NULL OR holder=$2 OR expires_at<now()) RETURNING epoch
//
//	UPDATE leader_lease SET expires_at=now()+make_interval(secs=>$3)
//	WHERE name=$1 AND holder=$2 AND epoch=$4 AND expires_at>now()
//
// are honoured by leasehold, and leasehold's terms by them: both sides judge
// expiry by now() and bump the same epoch. The trigger notifies waiters and
// writes the history for their grants too. Metadata and ttl written by
// leasehold are tagged with the epoch of their grant (meta_epoch), so a term
// granted by a raw client never shows a previous holder's metadata.
//
// # Why now()
//
// now() is the start of the statement's transaction, and every statement here
// runs alone in its own transaction, so it is the moment the server began the
// statement: after the request was sent. Judging expiry by it is conservative
// (a lease that expires while the statement waits for a row lock is still
// seen as live), and a grant or renewal ends at now()+ttl, no earlier than
// ttl after the holder sent it, which is what the holder's local deadline
// assumes. It is also what the raw SQL recipe uses, so both sides judge
// expiry by the same rule. clock_timestamp() would be safe too, but would
// differ from row to row within one batched renewal.
//
// # Instant hand-off
//
// A trigger on the table NOTIFYs a channel on every grant and release (by any
// client, raw SQL included). Each Store keeps one dedicated LISTEN connection
// (not one per lease), opened on first Watch, and fans notifications out by
// lease name; a waiting Lock or Elector acts within milliseconds of a
// release. The connection LISTENs only while the store has a watch open, so
// a process that only takes and releases leases is not sent its own grants
// and releases. When the connection drops, waiters keep polling on their own timer
// while the store reconnects, LISTENs again and then wakes every waiter once.
// A crashed holder's lease is not an event: waiters wake when it expires, from
// the time remaining that the database computed.
//
// # Many leases, one process
//
// A node that holds thousands of leases (one per shard or partition) renews
// them with [Store.RenewMany]: one UPDATE joined to arrays of (name, holder,
// epoch), each lease still scoped to its exact term and answered on its own.
// [github.com/leasehold/leasehold.Keeper] uses it: one statement per renew
// interval for all of a process's leases, each with its own safeUntil and its
// own loss.
//
// # Poolers
//
// The lease statements keep no session state: no advisory locks, no session
// settings, and no named prepared statements (pgx sends them in
// QueryExecModeExec, one round trip with the unnamed statement, unless the
// pool is configured for the simple protocol). Acquire, renew and release
// call the lease functions Migrate installs (schema objects, whose plans the
// server keeps per session), or send the statements themselves on a
// database without them. They therefore work through
// PgBouncer in transaction mode. LISTEN needs a real session: point
// Options.SessionConfig (or the session_host and session_port URL
// parameters) at the server or at a session-mode pool, or set NoWatch and
// let waiters poll.
//
// # Drivers
//
// New takes a *pgxpool.Pool, NewConn a *pgx.Conn, NewDB a *sql.DB (best with
// the pgx stdlib driver), Open a connection string, OpenURL a postgres:// URL.
// A store never closes a pool or connection it was given.
//
// # Advisory locks
//
// [Store.TryAdvisoryLock] and [Store.AdvisoryLock] offer the session-level
// pg_advisory_lock variant users ask about, fenced by the same epoch counter;
// see their documentation for what they do not guarantee.
package postgres
