package postgres

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/storekit"
)

// ErrAdvisoryLost is the cause of an advisory lock's context when its
// connection failed: the server has dropped the lock (or will as soon as it
// notices), and another session may hold it already.
var ErrAdvisoryLost = errors.New("leasehold/postgres: advisory lock's connection failed; the lock is gone")

// errAdvisoryReleased is the cause of an advisory lock's context after Release.
var errAdvisoryReleased = errors.New("leasehold/postgres: advisory lock released")

// AdvisoryOptions configure an advisory lock.
type AdvisoryOptions struct {
	// CheckInterval is how often the lock's connection is pinged; the lock's
	// context is cancelled when a ping fails or takes longer than this.
	// Default one second.
	CheckInterval time.Duration
	// Metadata is stored in the lease row while the lock is held.
	Metadata string
}

// AdvisoryLock is a session-level pg_advisory_lock held on a connection of
// its own (pinned: never returned to a pool).
//
// Read this before using it. An advisory lock has no expiry: a holder that
// is paused but still connected keeps it for as long as the pause lasts, and
// nobody else can take it. It is lost the moment its connection drops (a
// network cut, a server restart, a proxy timeout), and the holder learns of
// that only at its next ping, so for up to CheckInterval (plus TCP's own
// delay on a silent network) a rival may hold the lock while this holder
// still believes it does. It does not work behind a transaction-mode pooler,
// which would run the lock and the unlock on different server sessions:
// point Options.SessionConfig at the server or a session-mode pool.
//
// It is still fenced: taking the lock adds one to the lease row's epoch (the
// counter the lease variant uses), and Token returns the new value. A
// resource that checks the term (Term: token and holder) with each write
// (fence/sqlfence, or WHERE last_epoch < $token OR (last_epoch = $token AND
// last_holder = $holder)) refuses a holder whose lock was lost and taken by
// another. While the
// advisory lock is held the row shows its holder with an expiry of
// -infinity: it is not a live lease. Do not mix the lease and the advisory
// variant on one name; they share only the token counter.
type AdvisoryLock struct {
	s     *Store
	pid   int64 // the session's server pid
	conn  *pgx.Conn
	key   int64
	table string
	cl    *storekit.ConnLock // the term, the context, the pings, Release once
}

// AdvisoryKey is the bigint key of name's advisory lock on the lease table
// table: FNV-1a 64 of "leasehold", the table and the name. table must be the
// canonical name, schema-qualified and quoted as PostgreSQL's quote_ident
// does for plain identifiers ("app"."leader_lease"): the store resolves its
// table to that form on the server (through to_regclass, so through the
// session's search_path when Options.Schema is empty) before computing the
// key, so that every store on one table, however it names it, computes the
// same key. Another client that wants the same lock computes the same.
func AdvisoryKey(table, name string) int64 {
	h := fnv.New64a()
	h.Write([]byte("leasehold\x00" + table + "\x00" + name))
	return int64(h.Sum64())
}

// TryAdvisoryLock makes one attempt at name's advisory lock for holder. If
// another session holds it, it returns an error matching store.ErrHeld.
func (s *Store) TryAdvisoryLock(ctx context.Context, name, holder string, opts AdvisoryOptions) (*AdvisoryLock, error) {
	return s.advisoryLock(ctx, name, holder, opts, false)
}

// AdvisoryLock waits in pg_advisory_lock until it holds name's advisory lock
// or ctx ends. If ctx ends first (or any step fails), the session is ended
// and AdvisoryLock returns only once its backend has certainly let go of the
// lock, whether or not the server granted it at that instant; if that cannot
// be confirmed, the error also matches ErrAdvisorySessionUnconfirmed.
func (s *Store) AdvisoryLock(ctx context.Context, name, holder string, opts AdvisoryOptions) (*AdvisoryLock, error) {
	return s.advisoryLock(ctx, name, holder, opts, true)
}

func (s *Store) advisoryLock(ctx context.Context, name, holder string, opts AdvisoryOptions, wait bool) (*AdvisoryLock, error) {
	if err := s.life.Check(ctx); err != nil {
		return nil, err
	}
	every, err := kit.CheckLock("advisory lock", name, holder, opts.Metadata, opts.CheckInterval)
	if err != nil {
		return nil, err
	}
	cfg, err := s.sessionConfig(ctx)
	if err != nil {
		return nil, kit.Wrap(fmt.Sprintf("advisory lock %q", name), err)
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, kit.Errorf(fmt.Sprintf("advisory lock %q", name), "connect: %w", err)
	}
	// The server pid of this session (pgconn's PID is a pooler's invention
	// behind a session-mode pooler) and the table's canonical name, resolved
	// in this very session: the key must not depend on how the store was told
	// the table's name (schema-qualified, or through search_path), or two
	// stores on one table would take two different locks.
	var (
		pid      int64
		nsp, rel string
	)
	err = conn.QueryRow(ctx, `SELECT pg_backend_pid()::int8, n.nspname::text, c.relname::text
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = to_regclass($1)`,
		pgx.QueryExecModeExec, s.qtable).Scan(&pid, &nsp, &rel)
	if err != nil {
		s.closeSession(conn)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, kit.NoTable(fmt.Sprintf("advisory lock %q", name), "", s.qtable, ErrNotMigrated)
		}
		return nil, s.opErr("advisory lock", fmt.Sprintf("%q", name), err)
	}
	// From here on the session may hold the lock (a grant can race any
	// error, a cancellation included), so every failure ends it with
	// endSession, which makes sure the lock is gone before returning.
	fail := func(err error) (*AdvisoryLock, error) {
		if eerr := s.endSession(ctx, conn, pid); eerr != nil {
			return nil, fmt.Errorf("%w (and %w)", err, eerr)
		}
		return nil, err
	}
	key := AdvisoryKey(ident(nsp, rel), name)
	got := true
	if wait {
		_, err = conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, pgx.QueryExecModeExec, key)
	} else {
		err = conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, pgx.QueryExecModeExec, key).Scan(&got)
	}
	if err != nil {
		return fail(kit.Wrap(fmt.Sprintf("advisory lock %q", name), err))
	}
	if !got {
		return fail(kit.Errorf(fmt.Sprintf("advisory lock %q", name), "held by another session: %w", store.ErrHeld))
	}
	// The token: bump the epoch of the lease row while holding the lock,
	// unless a live lease term of another holder is on the row.
	var epoch int64
	err = conn.QueryRow(ctx, strings.NewReplacer("{{t}}", s.qtable).Replace(`INSERT INTO {{t}} AS l (name, holder, epoch, expires_at, metadata, ttl, meta_epoch)
VALUES ($1, $2, 1, '-infinity', $3, NULL, 1)
ON CONFLICT (name) DO UPDATE SET
	holder = excluded.holder, epoch = coalesce(l.epoch, 0) + 1, expires_at = '-infinity',
	metadata = excluded.metadata, ttl = NULL, meta_epoch = coalesce(l.epoch, 0) + 1
WHERE coalesce(l.epoch, 0) >= 0 AND (coalesce(l.holder, '') = '' OR l.holder = excluded.holder OR l.expires_at <= now())
RETURNING l.epoch`), pgx.QueryExecModeExec, name, holder, opts.Metadata).Scan(&epoch)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		if rec, found, gerr := s.get(ctx, name); gerr == nil && found && rec.Token < 0 {
			return fail(kit.Errorf(fmt.Sprintf("advisory lock %q", name), "epoch is %d: %w", rec.Token, ErrBadRow))
		}
		return fail(kit.Errorf(fmt.Sprintf("advisory lock %q", name), "a live lease term holds the row: %w", store.ErrHeld))
	case err != nil:
		return fail(s.opErr("advisory lock", fmt.Sprintf("%q", name), err))
	}
	a := &AdvisoryLock{s: s, pid: pid, conn: conn, key: key, table: s.qtable}
	// The check is a ping of the lock's connection.
	a.cl = storekit.StartConnLock(store.Term{Name: name, Holder: holder, Token: epoch}, every, conn.Ping,
		ErrAdvisoryLost, errAdvisoryReleased)
	return a, nil
}

// Term is the lock's term: its name, holder and fencing token.
func (a *AdvisoryLock) Term() store.Term { return a.cl.Term() }

// Token is the fencing token: the lease row's epoch, bumped when the lock was
// taken. Send it with every write.
func (a *AdvisoryLock) Token() int64 { return a.cl.Term().Token }

// Context is cancelled when the lock's connection is found dead (cause
// ErrAdvisoryLost) or on Release. It is not cancelled by any expiry: an
// advisory lock has none.
func (a *AdvisoryLock) Context() context.Context { return a.cl.Context() }

// Release unlocks, clears the holder from the lease row (the epoch stays),
// and closes the lock's connection. It is idempotent. If the connection had
// already failed it returns an error matching store.ErrNotHeld: the server
// dropped the lock with the session.
func (a *AdvisoryLock) Release(ctx context.Context) error {
	return a.cl.Release(func(lost bool) error {
		defer func() {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			a.conn.Close(cctx)
			cancel()
		}()
		t := a.cl.Term()
		op := "release advisory lock " + t.String()
		if lost {
			return kit.Errorf(op, "connection failed: %w", store.ErrNotHeld)
		}
		// fail ends the session, which may still hold the lock.
		fail := func(err error) error {
			err = kit.Wrap(op, err)
			if eerr := a.s.endSession(ctx, a.conn, a.pid); eerr != nil {
				err = fmt.Errorf("%w (and %w)", err, eerr)
			}
			return err
		}
		if _, err := a.conn.Exec(ctx, strings.NewReplacer("{{t}}", a.table).Replace(
			`UPDATE {{t}} SET holder = NULL, metadata = NULL WHERE name = $1 AND holder = $2 AND epoch = $3`),
			pgx.QueryExecModeExec, t.Name, t.Holder, t.Token); err != nil {
			return fail(err)
		}
		var ok bool
		if err := a.conn.QueryRow(ctx, `SELECT pg_advisory_unlock($1)`, pgx.QueryExecModeExec, a.key).Scan(&ok); err != nil {
			return fail(err)
		}
		if !ok {
			return kit.Errorf(op, "the session did not hold it: %w", store.ErrNotHeld)
		}
		return nil
	})
}

// ErrAdvisorySessionUnconfirmed: a failed or cancelled advisory lock call
// could not confirm that its server session has ended, so that session may
// still hold (or still be about to get) the lock until the server notices
// the dropped connection.
var ErrAdvisorySessionUnconfirmed = errors.New("leasehold/postgres: could not confirm that the advisory lock's session ended; the lock may stay held until the server notices the dropped connection")

// closeSession closes an advisory session that cannot hold the lock.
func (s *Store) closeSession(conn *pgx.Conn) {
	cctx, cancel := context.WithTimeout(context.Background(), time.Second)
	conn.Close(cctx)
	cancel()
}

// endSession ends an advisory session that may hold the lock, and returns
// only once the lock is certainly gone (nil) or with
// ErrAdvisorySessionUnconfirmed.
//
// Closing the client's socket is not enough. A backend waiting in
// pg_advisory_lock does not read its socket, so it does not notice a closed
// connection: when the holder unlocks, the server grants the lock to that
// abandoned session, which keeps it until it next reads from the socket and
// exits. In that window nobody else can take the lock; this is what made
// TestAdvisoryLockCancelled fail about once in thirty runs. And a try or a
// wait whose context ended while its statement was in flight may have been
// granted on the server a moment later.
//
// So: if the connection is still usable (the statement failed with a server
// error, nothing in flight), pg_advisory_unlock_all on it, then close it.
// Otherwise (pgx tore the connection down because ctx ended, or the network
// failed) terminate the session's backend by its pid through the store's
// own connections and wait until the process has exited
// (pg_terminate_backend with a timeout, PostgreSQL 14 and later): a backend
// releases its session locks on the way out.
func (s *Store) endSession(ctx context.Context, conn *pgx.Conn, pid int64) error {
	ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), advisoryEndTimeout)
	defer cancel()
	if !conn.IsClosed() {
		_, err := conn.Exec(ectx, `SELECT pg_advisory_unlock_all()`, pgx.QueryExecModeExec)
		if err == nil {
			conn.Close(ectx)
			return nil
		}
	}
	conn.Close(ectx)
	var gone bool
	err := s.retry(ectx, func() error {
		_, err := queryOne(ectx, s.q, `SELECT pg_terminate_backend($1::int, $2::int8) OR NOT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1::int)`,
			[]any{pid, advisoryEndTimeout.Milliseconds()}, &gone)
		return err
	})
	switch {
	case err != nil:
		return fmt.Errorf("%w: terminate backend %d: %v", ErrAdvisorySessionUnconfirmed, pid, err)
	case !gone:
		return fmt.Errorf("%w: backend %d still running after %v", ErrAdvisorySessionUnconfirmed, pid, advisoryEndTimeout)
	}
	return nil
}

// advisoryEndTimeout bounds endSession.
const advisoryEndTimeout = 5 * time.Second
