package postgres

import (
	"crypto/md5"
	"encoding/hex"
	"io"
)

// ListenerState reports the store's LISTEN connection: whether it is up, the
// server pid of its backend, and how many times LISTEN was established.
func (s *Store) ListenerState() (up bool, pid uint32, sessions int) {
	s.mu.Lock()
	l := s.lis
	s.mu.Unlock()
	if l == nil {
		return false, 0, 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.up, l.pid, l.sessions
}

// ListenerListening reports whether the store's LISTEN is in effect, and
// how many notifications its connection has received.
func (s *Store) ListenerListening() (listening bool, notified int) {
	s.mu.Lock()
	l := s.lis
	s.mu.Unlock()
	if l == nil {
		return false, 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.listening, l.notified
}

// SetBeforeListen makes the listener call f before each LISTEN it sends.
// Set it before the store's first Watch.
func (s *Store) SetBeforeListen(f func()) { s.beforeListen = f }

// Watchers reports how many watches of name are registered.
func (s *Store) Watchers(name string) int { return s.hub.Count(name) }

// Retries is how many statements were sent again after a serialization
// failure or deadlock, by every store in this process.
func Retries() int64 { return retrier.Retried() }

// Channel is the NOTIFY channel of schema.table.
var Channel = channelFor

// PID is the server pid of the advisory lock's connection.
func (a *AdvisoryLock) PID() uint32 { return a.conn.PgConn().PID() }

// MigrateLockKey is the advisory lock Migrate takes when it has work to do.
const MigrateLockKey = migrateLockKey

// LeaseFunctionsVersion is the version this build's calls of the lease
// functions name.
var LeaseFunctionsVersion = leaseFunctionsVersion

// LeaseFunctionsDigest is what leaseFunctionsVersion must be: a digest of
// the statements the lease functions wrap and of their template.
func LeaseFunctionsDigest() string {
	st := newStatements("{{t}}", "{{h}}", "{{p}}", func(suffix string) string { return "{{f" + suffix + "}}" }, "")
	h := md5.New()
	for i, s := range leaseStatements(st) {
		f := leaseFunctions[i]
		io.WriteString(h, f.suffix+f.args+f.ret+f.versionArg+"\x00"+s+"\x00")
	}
	io.WriteString(h, sqlCreateLeaseFunction)
	return hex.EncodeToString(h.Sum(nil)[:6])
}
