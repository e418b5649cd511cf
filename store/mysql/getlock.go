package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/storekit"
)

// ErrLockLost is the cause of a GET_LOCK lock's context when its connection
// failed: the server has dropped the lock (or will as soon as it notices),
// and another session may hold it already.
var ErrLockLost = errors.New("leasehold/mysql: GET_LOCK lock's connection failed; the lock is gone")

// errLockReleased is the cause of a lock's context after Release.
var errLockReleased = errors.New("leasehold/mysql: GET_LOCK lock released")

// LockOptions configure a GET_LOCK lock.
type LockOptions struct {
	// CheckInterval is how often the lock's connection is pinged; the lock's
	// context is cancelled when a ping fails or takes longer than this.
	// Default one second.
	CheckInterval time.Duration
	// Metadata is stored in the lease row while the lock is held.
	Metadata string
}

// NamedLock is a MySQL named lock (GET_LOCK) held on a connection of its
// own, with a fencing token.
//
// Read this before using it. A named lock has no expiry: a holder that is
// paused but still connected keeps it for as long as the pause lasts. It is
// lost the moment its connection drops (a network cut, a server restart, a
// proxy, a pool or wait_timeout closing the connection), and the holder
// learns of that only at its next ping, so for up to CheckInterval (plus
// TCP's own delay on a silent network) a rival may hold the lock while this
// holder still believes it does. GET_LOCK is local to one server: MySQL
// Group Replication does not replicate it and Galera refuses or ignores it;
// use leases there.
//
// It is still fenced: taking the lock adds one to the lease row's epoch
// (the counter leases use), and Token returns the new value. A resource
// that checks the term (token and holder) with each write refuses a holder
// whose lock was lost and taken by another. While the lock is held the row
// shows its holder with an expiry long past: it is not a live lease. Do not
// mix leases and GET_LOCK locks on one name; they share only the counter.
type NamedLock struct {
	s      *Store
	conn   *sql.Conn
	connID int64
	key    string
	cl     *storekit.ConnLock // the term, the context, the checks, Release once
}

// LockName is the GET_LOCK name of lease name on table in database db:
// "leasehold:" and 40 hex digits, within MySQL's 64-character limit.
// Another client that wants the same lock computes the same.
func LockName(db, table, name string) string { return lockName("lease", db, table, name) }

// TryGetLock makes one attempt at name's named lock for holder. If another
// session holds it, it returns an error matching store.ErrHeld.
func (s *Store) TryGetLock(ctx context.Context, name, holder string, opts LockOptions) (*NamedLock, error) {
	return s.getLock(ctx, name, holder, opts, false)
}

// GetLock waits in GET_LOCK until it holds name's named lock or ctx ends.
// If ctx ends first, or any step fails, the lock's server session is ended
// (KILLed if it cannot be told to let go), so that no abandoned session
// keeps the lock.
func (s *Store) GetLock(ctx context.Context, name, holder string, opts LockOptions) (*NamedLock, error) {
	return s.getLock(ctx, name, holder, opts, true)
}

// lockWaitStep bounds each GET_LOCK call, so that a wait never outlives its
// context by more than this on the server.
const lockWaitStep = time.Second

func (s *Store) getLock(ctx context.Context, name, holder string, opts LockOptions, wait bool) (*NamedLock, error) {
	if err := s.life.Check(ctx); err != nil {
		return nil, err
	}
	op := "lock " + strconv.Quote(name)
	every, err := kit.CheckLock(op, name, holder, opts.Metadata, opts.CheckInterval)
	if err != nil {
		return nil, err
	}
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return nil, s.opErr(op, err)
	}
	var connID int64
	var db sql.NullString
	if err := conn.QueryRowContext(ctx, `SELECT CONNECTION_ID(), DATABASE()`).Scan(&connID, &db); err != nil {
		discard(conn)
		conn.Close()
		return nil, s.opErr(op, err)
	}
	key := LockName(db.String, s.table, name)
	// From here on the session may hold the lock (a grant can race any
	// error, a cancellation included): every failure ends it.
	fail := func(err error) (*NamedLock, error) {
		s.endSession(ctx, conn, connID)
		return nil, err
	}
	got := false
	for {
		step := 0 // seconds: MySQL takes whole ones
		if wait {
			step = int(lockWaitStep / time.Second)
		}
		var r sql.NullInt64
		if err := conn.QueryRowContext(ctx, `SELECT GET_LOCK(?, ?)`, key, step).Scan(&r); err != nil {
			return fail(s.opErr(op, err))
		}
		if r.Valid && r.Int64 == 1 {
			got = true
			break
		}
		if !wait || ctx.Err() != nil {
			break
		}
	}
	if !got {
		if ctx.Err() != nil {
			return fail(kit.Wrap(op, ctx.Err()))
		}
		return fail(kit.Errorf(op, "held by another session: %w", store.ErrHeld))
	}
	rec, err := s.grant(ctx, conn, op, name, holder, 0, opts.Metadata, grantLock)
	if err != nil {
		if errors.Is(err, store.ErrHeld) {
			err = kit.Errorf(op, "a live lease term holds the row: %w", store.ErrHeld)
		}
		return fail(err)
	}
	l := &NamedLock{s: s, conn: conn, connID: connID, key: key}
	l.cl = storekit.StartConnLock(rec.Term, every, l.check, ErrLockLost, errLockReleased)
	return l, nil
}

// check is the lock's periodic check: IS_USED_LOCK, not a bare ping, since
// the lock must still be this session's (a reconnect by the driver would be
// a new session).
func (l *NamedLock) check(ctx context.Context) error {
	var owner sql.NullInt64
	err := l.conn.QueryRowContext(ctx, `SELECT IS_USED_LOCK(?)`, l.key).Scan(&owner)
	if err == nil && (!owner.Valid || owner.Int64 != l.connID) {
		err = fmt.Errorf("the lock is held by session %v, not %d", owner.Int64, l.connID)
	}
	return err
}

// Term is the lock's term: its name, holder and fencing token.
func (l *NamedLock) Term() store.Term { return l.cl.Term() }

// Token is the fencing token: the lease row's epoch, bumped when the lock
// was taken. Send it with every write.
func (l *NamedLock) Token() int64 { return l.cl.Term().Token }

// Context is cancelled when the lock's connection is found dead (cause
// ErrLockLost) or on Release. No expiry cancels it: a named lock has none.
func (l *NamedLock) Context() context.Context { return l.cl.Context() }

// Release clears the holder from the lease row (the epoch stays), releases
// the named lock and ends the lock's connection. It is idempotent. If the
// connection had already failed it returns an error matching
// store.ErrNotHeld: the server dropped the lock with the session.
func (l *NamedLock) Release(ctx context.Context) error {
	return l.cl.Release(func(lost bool) error {
		t := l.cl.Term()
		op := "release lock " + t.String()
		if lost {
			l.s.endSession(ctx, l.conn, l.connID)
			return kit.Errorf(op, "connection failed: %w", store.ErrNotHeld)
		}
		_, err := l.conn.ExecContext(ctx, `UPDATE `+l.s.n.table+` SET holder = NULL, metadata = NULL WHERE name = ? AND holder = ? AND epoch = ?`,
			t.Name, t.Holder, t.Token)
		if err == nil {
			var r sql.NullInt64
			if err = l.conn.QueryRowContext(ctx, `SELECT RELEASE_LOCK(?)`, l.key).Scan(&r); err == nil && (!r.Valid || r.Int64 != 1) {
				err = fmt.Errorf("the session did not hold it: %w", store.ErrNotHeld)
			}
		}
		if err != nil {
			l.s.endSession(ctx, l.conn, l.connID)
			return kit.Wrap(op, err)
		}
		l.s.hub.Notify(t.Name)
		l.conn.Close() // back to the pool: it holds nothing now
		return nil
	})
}

// endSession ends a lock session that may hold the lock: the connection is
// discarded (closed, not returned to the pool), and the server thread is
// KILLed through another connection, which ends it even while it waits in
// GET_LOCK (a thread waiting there does not notice its client's socket
// closing). A user may KILL its own threads without any privilege.
//
// KILL returns before the thread has ended, and a thread killed while it
// waits in GET_LOCK can still take the lock if it is released meanwhile,
// holding it until it ends (seen in CI: a TryGetLock right after a waiter
// gave up and the holder released was refused). So endSession waits until
// the thread is gone from the process list (a user sees its own threads),
// for at most 5 s.
func (s *Store) endSession(ctx context.Context, conn *sql.Conn, connID int64) {
	discard(conn)
	conn.Close()
	ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	s.db.ExecContext(ectx, fmt.Sprintf(`KILL %d`, connID)) // "unknown thread" if it is already gone
	for {
		var n int
		err := s.db.QueryRowContext(ectx, `SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ?`, connID).Scan(&n)
		if err != nil || n == 0 {
			return
		}
		t := time.NewTimer(5 * time.Millisecond)
		select {
		case <-ectx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}
