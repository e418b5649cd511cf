// Package sqlite is a lease store in a SQLite database file, shared by the
// processes of one host. It is pure Go (modernc.org/sqlite, no cgo) and it is
// the store the leasehold command uses when it is given no other.
//
// # What it is
//
// One row per lease in a table shaped like the PostgreSQL store's:
//
//	CREATE TABLE leader_lease (
//	  name       TEXT PRIMARY KEY,
//	  holder     TEXT,                        -- NULL (or '') when free
//	  epoch      INTEGER NOT NULL DEFAULT 0,  -- the fencing token of the last grant
//	  expires_at INTEGER NOT NULL DEFAULT 0,  -- Unix milliseconds, on SQLite's clock
//	  ttl_ms     INTEGER NOT NULL DEFAULT 0,
//	  metadata   TEXT NOT NULL DEFAULT ''
//	) STRICT;
//
// Acquire is one INSERT … ON CONFLICT DO UPDATE … WHERE (free, expired, or
// this holder) … RETURNING epoch, run in a BEGIN IMMEDIATE transaction; Renew
// and Release are one UPDATE each that names the exact term (name, holder,
// epoch) and matches only while it is live. Every expiry decision is made
// inside the statement by SQLite's own clock (unixepoch('subsec')), never by
// a time the Go process passes in, so every process on the host is judged by
// one clock. Triggers keep a history of grants and releases (see History),
// refuse to delete a lease row, refuse to lower an epoch, and keep a
// high-water table (<table>_high_water) of the highest epoch each name was
// granted, below which no row may be inserted: so that raw SQL run by hand,
// INSERT OR REPLACE included (whose delete of the old row fires no delete
// trigger unless the connection set recursive_triggers), cannot reset or
// repeat a fencing token, and a row deleted anyway is granted again above
// every token it had.
//
// The database runs in WAL mode with synchronous=FULL (a committed grant
// survives a power cut, so a token is never handed out twice) and a busy
// timeout (5 s by default), so several processes share the file safely.
// Open retries for up to that timeout when SQLite answers SQLITE_BUSY without
// waiting, as it can while several processes open a new file at once.
//
// # What is guaranteed, and what is not
//
//   - Tokens rise strictly for every grant of a name and never go back, as long
//     as the file is not restored from an older copy, replaced, or edited past
//     the triggers (a row and its high-water mark both deleted). A restored backup hands out old tokens again: treat the
//     file as the fence's source of truth and do not roll it back.
//   - One host only. SQLite's locking does not work over network filesystems
//     (NFS, SMB, most container volume drivers that span hosts): processes on
//     two hosts sharing one file over the network can both be granted the
//     lease. Use the PostgreSQL store across hosts.
//   - The clock is the host's wall clock (CLOCK_REALTIME), read by SQLite.
//     All processes on the host agree on it, but a step of that clock (an
//     operator's date command, an NTP step rather than a slew) moves every
//     expiry with it: a step forward of more than the margin between
//     renew deadline and lease duration can let a rival take over while the
//     holder still trusts its term. Keep the clock slewed (chrony, systemd-
//     timesyncd do so by default for small offsets).
//   - A holder frozen while it is inside a write transaction (a SIGSTOP that
//     lands during the milliseconds of a renewal) holds the file's write lock:
//     nobody can acquire until it resumes or dies. That costs liveness, never
//     safety: every other process waits (busy timeout) and then retries.
//   - Anyone who can write the file can take, release or force-release any
//     lease in it. A file Open creates is made with mode 0600.
//
// The store does not implement store.Watcher: SQLite has no notification
// between processes, and polling PRAGMA data_version would only be a poll by
// another name. Waiters wake when a holder's term expires (the core reads
// Record.Remaining) and poll every retry period for releases.
//
// The store implements store.Queuer, the fair queue of Config.Fair, in the
// table <table>_queue (see the README): a place's position is an
// AUTOINCREMENT key, its expiry is on SQLite's clock, and Enqueue runs
// under BEGIN IMMEDIATE. A fair waiter polls its place each retry period.
package sqlite
