package main

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/leasehold/leasehold/store"
	lhmysql "github.com/leasehold/leasehold/store/mysql"
)

// MySQL/MariaDB: leasehold's store (its default, doorbells over a polling
// watch, first; then polling alone at two intervals) beside the usual
// MySQL answer, GET_LOCK. No Go GET_LOCK
// lock library builds from the module proxy here (sanketplus/go-mysql-lock
// is not served), so the peer is the plain recipe such libraries wrap and
// users copy: GET_LOCK(name, timeout) on a connection of its own, held until
// RELEASE_LOCK or until the connection ends. And "floor": a GET_LOCK
// "doorbell" held by the raw holder's own connection that waiters block on,
// with nothing else (no expiry, no token, no history).

type myEnv struct {
	cfg    *mysql.Config
	dbName string
	admin  *sql.DB // on the bench's database
	pool   *sql.DB // the GET_LOCK peer's connections
	st     *lhmysql.Store
}

func openMySQL(ctx context.Context, dsn, runID string) (*myEnv, error) {
	base, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("mysql: the DSN does not parse")
	}
	e := &myEnv{dbName: "lh_bench_" + runID}
	root, err := sql.Open("mysql", base.FormatDSN())
	if err != nil {
		return nil, err
	}
	defer root.Close()
	if _, err := root.ExecContext(ctx, "CREATE DATABASE "+e.dbName); err != nil {
		return nil, fmt.Errorf("mysql: %w", err)
	}
	e.cfg = base.Clone()
	e.cfg.DBName = e.dbName
	e.cfg.InterpolateParams = true
	if e.admin, err = sql.Open("mysql", e.cfg.FormatDSN()); err != nil {
		return nil, err
	}
	e.pool, _ = sql.Open("mysql", e.cfg.FormatDSN())
	if e.st, err = lhmysql.Open(ctx, e.cfg, lhmysql.Options{CreateIfMissing: true}); err != nil {
		e.close()
		return nil, err
	}
	return e, nil
}

func (e *myEnv) version(ctx context.Context) string {
	var v string
	e.admin.QueryRowContext(ctx, `SELECT VERSION()`).Scan(&v)
	return v
}

func (e *myEnv) close() {
	if e.st != nil {
		e.st.Close()
	}
	if e.pool != nil {
		e.pool.Close()
	}
	if e.admin != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		e.admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+e.dbName)
		cancel()
		e.admin.Close()
	}
}

// perContender makes each contender of the library mk builds use a Store of
// its own (its watch polling every every, 0 the default; doorbells as
// Options.Doorbells, 0 the default), as separate processes have: a waiter
// then learns of another's release by its Store's doorbell or poll, not by
// its own Store's local wake-up.
func (e *myEnv) perContender(every time.Duration, doorbells int, mk func(st store.Store) *lib) *lib {
	return perContender(e.st, func(ctx context.Context) (store.Store, error) {
		st, err := lhmysql.Open(ctx, e.cfg, lhmysql.Options{WatchInterval: every, Doorbells: doorbells})
		if err != nil {
			return nil, err
		}
		st.DB().SetMaxOpenConns(4)
		return st, nil
	}, mk)
}

// defaultWake is how the store's default wakes a waiter in another process.
var defaultWake = fmt.Sprintf("GET_LOCK doorbell held by the holder's Store for its term, polling watch every %v beneath (the default)", lhmysql.DefaultWatchInterval)

// lhLib is leasehold's Lock, a Store per contender.
func (e *myEnv) lhLib(name string, every time.Duration, doorbells int, handoffTTL time.Duration, note string) *lib {
	l := e.perContender(every, doorbells, func(st store.Store) *lib {
		return lhLock1("mysql", st, handoffTTL, note, false)
	})
	l.name = name
	return l
}

// fairLibs are leasehold's fair Lock and Elector, a Store per contender: a
// release through the waiter's own Store would wake it at once, which
// waiters in other processes never see.
func (e *myEnv) fairLibs(handoffTTL time.Duration) []*lib {
	per := func(mk func(store.Store) *lib) *lib { return e.perContender(0, 0, mk) }
	return fairLibsEach("mysql", handoffTTL, defaultWake, per)
}

// oneStoreLib is leasehold's Lock with every contender on one Store, as
// goroutines of one process are: a release through the Store wakes its
// waiters at once, without the watch's poll.
func (e *myEnv) oneStoreLib(handoffTTL time.Duration) *lib {
	l := lhLock1("mysql", e.st, handoffTTL, "every contender on one Store (one process): a release wakes its waiters at once", false)
	l.name += " (one Store)"
	return l
}

func (e *myEnv) libs(ctx context.Context, handoffTTL time.Duration) ([]*lib, error) {
	libs := []*lib{e.lhLib("leasehold", 0, 0, handoffTTL, defaultWake)}
	// Polling alone, as before the doorbells (and as with doorbells=0, or
	// past a Store's limit of them): at the default interval and at 5 ms.
	for _, every := range []time.Duration{lhmysql.DefaultWatchInterval, 5 * time.Millisecond} {
		name := fmt.Sprintf("leasehold (poll %v)", every)
		if every == lhmysql.DefaultWatchInterval {
			name = "leasehold (polling only)"
		}
		libs = append(libs, e.lhLib(name, every, -1, handoffTTL, fmt.Sprintf("polling watch every %v, no doorbell (doorbells=0)", every)))
	}
	libs = append(libs, e.oneStoreLib(handoffTTL))
	libs = append(libs, e.fairLibs(handoffTTL)...)
	libs = append(libs, &lib{
		name: "GET_LOCK", store: "mysql", peer: true, kind: "lock",
		config: "the plain recipe: SELECT GET_LOCK(name, 3600) on a connection of its own, RELEASE_LOCK to release; no expiry, no token; a crash is the process dying (its socket closed); liveness pings (DO 1) at a third of the failover lease stand in for renewals",
		newContender: func(ctx context.Context, lockName string, s setup) (contender, error) {
			return &getLockC{e: e, name: lockName, s: s}, nil
		},
	})
	return libs, nil
}

type getLockC struct {
	e    *myEnv
	name string
	s    setup
}

func (c *getLockC) acquire(ctx context.Context) (held, error) {
	conn, err := c.e.pool.Conn(ctx)
	if err != nil {
		return nil, err
	}
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, `SELECT GET_LOCK(?, 3600)`, "lhbench:"+c.name).Scan(&got); err != nil || got.Int64 != 1 {
		conn.Raw(func(any) error { return errBad })
		conn.Close()
		if err == nil {
			err = fmt.Errorf("GET_LOCK returned %v", got)
		}
		return nil, err
	}
	h := &getLockHeld{conn: conn, name: "lhbench:" + c.name}
	if c.s.keepAlive && c.s.ttl > 0 {
		h.ref = startRefresher(c.s.ttl/3, func(ctx context.Context) error {
			_, err := conn.ExecContext(ctx, `DO 1`)
			return err
		})
	} else {
		h.clock.mark()
	}
	return h, nil
}

func (c *getLockC) close() {}

type getLockHeld struct {
	conn  *sql.Conn
	name  string
	ref   *refresher
	clock renewClock
}

func (h *getLockHeld) release(ctx context.Context) error {
	if h.ref != nil {
		h.ref.stop()
	}
	_, err := h.conn.ExecContext(ctx, `DO RELEASE_LOCK(?)`, h.name)
	h.conn.Close()
	return err
}

// crash: the process dies, and the kernel closes its socket; the server
// drops the session's locks when it reads the end of the connection.
func (h *getLockHeld) crash() {
	if h.ref != nil {
		h.ref.stop()
	}
	h.conn.Raw(func(dc any) error {
		if c, ok := dc.(interface{ Close() error }); ok {
			c.Close()
		}
		return errBad
	})
	h.conn.Close()
}

func (h *getLockHeld) lastRenewal() time.Time {
	if h.ref != nil {
		return h.ref.clock.get()
	}
	return h.clock.get()
}

var errBad = driver.ErrBadConn

// floorLib is the doorbell measured as an alternative to polling: the
// holder's connection holds a second named lock, the doorbell, for as long
// as it holds the lease row; a waiter blocks in GET_LOCK on the doorbell,
// and when the holder frees the row and then the doorbell, the waiter wakes,
// lets the doorbell go and takes the row with one conditional UPDATE.
func (e *myEnv) floorLib() *lib {
	return &lib{
		name: floorName, store: "mysql", kind: "floor",
		config: "GET_LOCK doorbell: UPDATE row free; RELEASE_LOCK(door) -> the waiter's GET_LOCK(door) returns -> RELEASE_LOCK(door); UPDATE row taken WHERE free (autocommit)",
		newContender: func(ctx context.Context, lockName string, s setup) (contender, error) {
			if _, err := e.admin.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS rawlock (name VARCHAR(128) PRIMARY KEY, holder VARCHAR(64) NULL)`); err != nil {
				return nil, err
			}
			if _, err := e.admin.ExecContext(ctx, `INSERT IGNORE INTO rawlock (name) VALUES (?)`, lockName); err != nil {
				return nil, err
			}
			conn, err := e.pool.Conn(ctx)
			if err != nil {
				return nil, err
			}
			return &doorC{conn: conn, name: lockName, door: "lhbench-door:" + lockName, id: s.identity}, nil
		},
	}
}

type doorC struct {
	conn           *sql.Conn
	name, door, id string
}

func (c *doorC) acquire(ctx context.Context) (held, error) {
	for {
		res, err := c.conn.ExecContext(ctx, `UPDATE rawlock SET holder = ? WHERE name = ? AND holder IS NULL`, c.id, c.name)
		if err != nil {
			return nil, err
		}
		if n, _ := res.RowsAffected(); n == 1 {
			if _, err := c.conn.ExecContext(ctx, `DO GET_LOCK(?, 10)`, c.door); err != nil {
				return nil, err
			}
			h := &doorHeld{c: c}
			h.clock.mark()
			return h, nil
		}
		var got sql.NullInt64
		if err := c.conn.QueryRowContext(ctx, `SELECT GET_LOCK(?, 10)`, c.door).Scan(&got); err != nil {
			return nil, err
		}
		if got.Int64 == 1 {
			if _, err := c.conn.ExecContext(ctx, `DO RELEASE_LOCK(?)`, c.door); err != nil {
				return nil, err
			}
		}
	}
}

func (c *doorC) close() {
	c.conn.Raw(func(any) error { return errBad })
	c.conn.Close()
}

type doorHeld struct {
	c     *doorC
	clock renewClock
}

func (h *doorHeld) release(ctx context.Context) error {
	if _, err := h.c.conn.ExecContext(ctx, `UPDATE rawlock SET holder = NULL WHERE name = ? AND holder = ?`, h.c.name, h.c.id); err != nil {
		return err
	}
	_, err := h.c.conn.ExecContext(ctx, `DO RELEASE_LOCK(?)`, h.c.door)
	return err
}

func (h *doorHeld) crash()                 {}
func (h *doorHeld) lastRenewal() time.Time { return h.clock.get() }
