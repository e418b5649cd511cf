package cli

import (
	"errors"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	sqlitedrv "modernc.org/sqlite"

	"github.com/leasehold/leasehold/store/kubernetes"
)

// writeRefused reports whether err is a store's definite refusal to write:
// the store answered, and it will not change a lease for this client (a
// read-only SQLite file, a PostgreSQL role without the grant or a read-only
// transaction, a Redis replica or an ACL without the command, an etcd user
// without write permission, a Kubernetes identity the RBAC forbids). Nothing
// was written, and retrying will not help: `run` stops and says so, instead
// of reporting "outcome unknown" every retry period for ever.
func writeRefused(err error) bool {
	if err == nil {
		return false
	}
	var se *sqlitedrv.Error
	if errors.As(err, &se) {
		const sqliteReadOnly = 8 // SQLITE_READONLY; extended codes keep it in the low byte
		return se.Code()&0xff == sqliteReadOnly
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		// insufficient_privilege, read_only_sql_transaction
		return pe.Code == "42501" || pe.Code == "25006"
	}
	if kubernetes.IsForbidden(err) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "READONLY ") || strings.Contains(msg, "NOPERM ") ||
		strings.Contains(msg, "etcdserver: permission denied")
}

// writeRefusedError is why `run` stopped contending: exit code 69.
type writeRefusedError struct {
	_ [0]func() // not comparable: spares the binary an equality function

	store string
	err   error
}

func (e *writeRefusedError) Error() string {
	return "store " + e.store + " answers reads but refuses writes, so this node can never take the lease: " + e.err.Error() +
		" (grant the write permission, or point --store at a writable store)"
}
func (e *writeRefusedError) Unwrap() error { return e.err }
