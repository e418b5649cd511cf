// Package fence makes a protected resource refuse a stale leaseholder.
//
// A lease alone is best effort. A holder can be paused (a GC pause, a VM
// migration, SIGSTOP) or cut off, and wake up still believing it holds the
// lease after a newer holder has taken over. leasehold gives every grant a
// fencing token that is strictly greater than every token granted before for
// that lease. The resource is safe only if it checks that token in the same
// step as the write and refuses a token lower than the highest it has seen:
// the newer holder's writes are then never overwritten by the older one's.
// A check in the holder's own code before the write is not a fence.
//
// This package is that check for services that are not databases:
//
//   - [Guard]: the highest token seen per resource, in process, safe for
//     concurrent use, with a small [Persister] interface (and a file-backed
//     [FilePersister]) so that a restart does not forget it. [Guard.Do] admits
//     a token and runs the write while no other write of that resource can run.
//   - [Middleware]: HTTP middleware that reads the fencing headers
//     ([HeaderToken], [HeaderLease]) and answers 409 Conflict to a stale token.
//   - [Transport]: an http.RoundTripper that stamps those headers from a
//     [TokenSource] (a *leasehold.Leader or *leasehold.Held, a func, or the
//     environment of a child of `leasehold run`, see [FromEnv]).
//
// Package fence/sqlfence does the same inside a SQL transaction (PostgreSQL,
// SQLite, MySQL/MariaDB), and fence/fencegrpc for gRPC.
//
// # What is and is not guaranteed
//
// With every write of a resource going through the same Guard (or the same
// fence table), a write carrying a token lower than one already admitted for
// that resource is refused, and writes admitted through [Guard.Do] run one at
// a time per resource in token order. That is all: the Guard is only as
// durable as its Persister (without one, a restart forgets every token), it
// protects only writes that pass through it, and it compares tokens of one
// lease per resource (tokens of different leases are not comparable, so one
// resource must be fenced by one lease). A token equal to the highest is
// admitted: one term writes many times. Fencing orders writes; it does not
// make two holders' side effects outside the resource disappear.
package fence

import (
	"errors"
	"fmt"
	"unicode/utf8"
)

// ErrStale is matched (errors.Is) by every refusal of a stale token. The error
// is a *StaleError carrying the details.
var ErrStale = errors.New("leasehold/fence: stale fencing token")

// ErrInvalid is matched by errors about bad input: an empty or overlong
// resource name, a token below 1, a malformed header. The message names what
// was wrong.
var ErrInvalid = errors.New("leasehold/fence: invalid argument")

// StaleError is a refused write: Token is lower than Highest, the highest
// token the resource has admitted. It matches ErrStale.
type StaleError struct {
	Resource string
	Token    int64
	Highest  int64
}

func (e *StaleError) Error() string {
	return fmt.Sprintf("leasehold/fence: stale fencing token for %q: token %d is below the highest admitted %d",
		e.Resource, e.Token, e.Highest)
}

// Is reports whether target is ErrStale.
func (e *StaleError) Is(target error) bool { return target == ErrStale }

// MaxResourceLen is the longest resource name, in bytes. It fits a
// VARBINARY(255) primary key in MySQL.
const MaxResourceLen = 255

// ValidateResource checks a resource name: 1 to MaxResourceLen bytes of valid
// UTF-8 without control characters.
func ValidateResource(resource string) error {
	if resource == "" {
		return fmt.Errorf("%w: resource name is empty", ErrInvalid)
	}
	if len(resource) > MaxResourceLen {
		return fmt.Errorf("%w: resource name is %d bytes, the limit is %d", ErrInvalid, len(resource), MaxResourceLen)
	}
	if !utf8.ValidString(resource) {
		return fmt.Errorf("%w: resource name %q is not valid UTF-8", ErrInvalid, resource)
	}
	for i, r := range resource {
		if r < ' ' || r == 0x7f {
			return fmt.Errorf("%w: resource name %q has control character %#x at byte %d", ErrInvalid, resource, r, i)
		}
	}
	return nil
}

// ValidateToken checks a fencing token: every token leasehold grants is at
// least 1.
func ValidateToken(token int64) error {
	if token < 1 {
		return fmt.Errorf("%w: fencing token %d is below 1", ErrInvalid, token)
	}
	return nil
}

// TokenSource gives the fencing token to send with a write. *leasehold.Leader
// and *leasehold.Held implement it.
type TokenSource interface {
	Token() int64
}

// TokenFunc adapts a function to a TokenSource.
type TokenFunc func() int64

// Token calls f.
func (f TokenFunc) Token() int64 { return f() }

// StaticToken is a TokenSource that always gives the same token, such as the
// one a child of `leasehold run` finds in its environment.
type StaticToken int64

// Token returns t.
func (t StaticToken) Token() int64 { return int64(t) }
