//go:build unix

// Package demo is `leasehold demo`: three `leasehold run` processes elect a
// leader on one SQLite file, and each node's command is a small worker that
// writes to a fenced register, the protected resource. The demo freezes the
// leader, lets a standby take over with the next token, wakes the old
// leader's worker and shows its stale write refused by the register. Every
// line it prints is read from what the processes did: the lease store's
// history, the register's log of write attempts, and the nodes' own logs.
package demo

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	_ "modernc.org/sqlite"

	"github.com/leasehold/leasehold/fence"
)

// The register is the resource the leader writes to, fenced in the direct
// form of fence/README.md: the write and the term check are one statement,
//
//	UPDATE register SET value = ?1, last_token = ?2, last_holder = ?3
//	WHERE id = 1 AND (last_token < ?2 OR (last_token = ?2 AND last_holder = ?3))
//
// so a writer of an older term changes nothing, whatever it believes: one
// whose token is lower than the last one the register accepted, or equal to
// it but from another holder. Not `last_token <= ?2`: after a lease store
// loses data one token can be granted to two terms, and that form would admit
// both. The holder is the term's holder identity ($LEASEHOLD_HOLDER), unique
// per process. Each attempt, accepted or refused, is logged in the same
// transaction, in commit order, with SQLite's time.
const registerSchema = `
CREATE TABLE IF NOT EXISTS register (
	id         INTEGER PRIMARY KEY,
	value       TEXT NOT NULL,
	last_token  INTEGER NOT NULL,
	last_holder TEXT NOT NULL DEFAULT ''
);
INSERT OR IGNORE INTO register (id, value, last_token) VALUES (1, '', 0);
CREATE TABLE IF NOT EXISTS writes (
	seq      INTEGER PRIMARY KEY AUTOINCREMENT,
	node     TEXT NOT NULL,
	holder   TEXT NOT NULL,
	pid      INTEGER NOT NULL,
	token    INTEGER NOT NULL,
	accepted INTEGER NOT NULL,
	at_ms    INTEGER NOT NULL,
	note     TEXT NOT NULL DEFAULT ''
);`

// ErrFencedOut is the worker's answer to a refused write: another term (a
// higher token, or the same token from another holder) has written to the
// register, so this worker's term is over.
var ErrFencedOut = errors.New("demo worker: write refused by the fence: another term has written")

func openRegister(path string, busy time.Duration) (*sql.DB, error) {
	q := url.Values{}
	q.Set("_txlock", "immediate")
	q.Add("_pragma", "busy_timeout("+strconv.FormatInt(busy.Milliseconds(), 10)+")")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(FULL)")
	db, err := sql.Open("sqlite", "file:"+(&url.URL{Path: path}).EscapedPath()+"?"+q.Encode())
	if err != nil {
		return nil, err
	}
	if err := db.Ping(); err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

// InitRegister creates the register in the SQLite file at path.
func InitRegister(path string) error {
	db, err := openRegister(path, 5*time.Second)
	if err != nil {
		return err
	}
	defer db.Close()
	_, err = db.Exec(registerSchema)
	return err
}

// WorkerConfig configures the demo's worker.
type WorkerConfig struct {
	Register string        // the register's SQLite file
	Node     string        // the node's name, for the log
	Holder   string        // the holder identity of the term ($LEASEHOLD_HOLDER)
	Token    int64         // the fencing token of the term it was started for
	Every    time.Duration // how often it writes
	Stderr   io.Writer
}

// Worker writes to the register every cfg.Every, with its token, until ctx
// ends (nil) or a write is refused (ErrFencedOut). It writes at once when it
// starts, and at once when it wakes from a pause. On purpose, it does not
// check its deadline (LEASEHOLD_SAFE_UNTIL_FILE) before writing, like a
// process paused between such a check and its write: the fence is what
// stops it.
func Worker(ctx context.Context, cfg WorkerConfig) error {
	if cfg.Token < 1 {
		return fmt.Errorf("demo worker: no fencing token (run it under leasehold run)")
	}
	// Without the holder the register could not tell this term from another
	// that was granted the same token.
	if err := fence.ValidateHolder(cfg.Holder); err != nil {
		return fmt.Errorf("demo worker: no valid holder identity (run it under leasehold run): %w", err)
	}
	if cfg.Every <= 0 {
		cfg.Every = 200 * time.Millisecond
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	db, err := openRegister(cfg.Register, 5*time.Second)
	if err != nil {
		return fmt.Errorf("demo worker: open the register: %w", err)
	}
	defer db.Close()
	pid := os.Getpid()
	ticker := time.NewTicker(cfg.Every)
	defer ticker.Stop()
	var last time.Time // when the previous write began
	for n := 1; ; n++ {
		note := ""
		now := time.Now()
		if gap := now.Sub(last); n > 1 && gap > 3*cfg.Every {
			note = fmt.Sprintf("woke after a gap of %v", gap.Round(10*time.Millisecond))
		}
		last = now
		accepted, err := write(ctx, db, cfg.Node, cfg.Holder, pid, cfg.Token, n, note)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return fmt.Errorf("demo worker: write: %w", err)
		}
		if !accepted {
			fmt.Fprintf(cfg.Stderr, "%s worker: write #%d with token %d refused by the fence; stopping\n", cfg.Node, n, cfg.Token)
			return ErrFencedOut
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}

// write makes one fenced write for the term (token, holder) and logs the
// attempt, in one transaction.
func write(ctx context.Context, db *sql.DB, node, holder string, pid int, token int64, n int, note string) (bool, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return false, err
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, `UPDATE register SET value = ?1, last_token = ?2, last_holder = ?3
		WHERE id = 1 AND (last_token < ?2 OR (last_token = ?2 AND last_holder = ?3))`,
		fmt.Sprintf("%s write #%d", node, n), token, holder)
	if err != nil {
		return false, err
	}
	rows, err := res.RowsAffected()
	if err != nil {
		return false, err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO writes (node, holder, pid, token, accepted, at_ms, note)
		VALUES (?, ?, ?, ?, ?, CAST(unixepoch('subsec')*1000 AS INTEGER), ?)`, node, holder, pid, token, rows == 1, note); err != nil {
		return false, err
	}
	return rows == 1, tx.Commit()
}

// writeRow is one logged write attempt.
type writeRow struct {
	_ [0]func() // not comparable: spares the binary an equality function

	seq      int64
	node     string
	holder   string
	pid      int
	token    int64
	accepted bool
	at       time.Time
	note     string
}

func readWrites(ctx context.Context, db *sql.DB, after int64) ([]writeRow, error) {
	rows, err := db.QueryContext(ctx, `SELECT seq, node, holder, pid, token, accepted, at_ms, note FROM writes WHERE seq > ? ORDER BY seq`, after)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []writeRow
	for rows.Next() {
		var w writeRow
		var at int64
		if err := rows.Scan(&w.seq, &w.node, &w.holder, &w.pid, &w.token, &w.accepted, &at, &w.note); err != nil {
			return nil, err
		}
		w.at = time.UnixMilli(at)
		out = append(out, w)
	}
	return out, rows.Err()
}
