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
//     ([HeaderToken], [HeaderHolder], [HeaderLease]) and answers 409 Conflict
//     to a stale term.
//   - [Transport]: an http.RoundTripper that stamps those headers from a
//     [TermSource] (a *leasehold.Lease, a func, or the
//     environment of a child of `leasehold run`, see [FromEnv]).
//
// Package fence/sqlfence does the same inside a SQL transaction (PostgreSQL,
// SQLite, MySQL/MariaDB), and fence/fencegrpc for gRPC.
//
// # What is and is not guaranteed
//
// With every write of a resource going through the same Guard (or the same
// fence table), a write carrying a token lower than one already admitted for
// that resource is refused, and so is a write carrying the highest token but
// another holder; writes admitted through [Guard.Do] run one at a time per
// resource in token order. That is all: the Guard is only as
// durable as its Persister (without one, a restart forgets every token), it
// protects only writes that pass through it, and it compares tokens of one
// lease per resource (tokens of different leases are not comparable, so one
// resource must be fenced by one lease). A token equal to the highest, with
// the holder it was admitted for, is admitted: one term writes many times.
// Telling terms apart relies on holder identities being unique per process
// instance, as leasehold makes them (the configured name plus a random
// suffix). Fencing orders writes; it does not
// make two holders' side effects outside the resource disappear.
package fence

import (
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/leasehold/leasehold/store"
)

// ErrStale is matched (errors.Is) by every refusal of a stale term: a token
// lower than the highest admitted, or equal to it but from another holder.
// The error is a *StaleError carrying the details.
var ErrStale = errors.New("leasehold/fence: stale fencing token")

// ErrTokenReused is matched, in addition to ErrStale, by the refusal of a
// token equal to the highest admitted but presented by another holder: one
// token value has been granted to two terms, which a lease store does only
// after it lost data (or an operator edited it). The write is refused like
// any stale one; the separate sentinel lets an operator alarm on it.
var ErrTokenReused = errors.New("leasehold/fence: fencing token granted to two terms")

// ErrInvalid is matched by errors about bad input: an empty or overlong
// resource name, a token below 1, an empty or malformed holder, a malformed
// header. The message names what was wrong.
var ErrInvalid = errors.New("leasehold/fence: invalid argument")

// StaleError is a refused write: Token is lower than Highest, the highest
// token the resource has admitted, or equal to it while Holder is not the
// holder it was admitted for. It matches ErrStale, and ErrTokenReused when
// Token equals Highest.
type StaleError struct {
	Resource string
	Token    int64
	Highest  int64
	// Holder is the refused writer's holder, if known.
	Holder string
	// HighestHolder is the holder the highest token was admitted for, if the
	// fence reported it (empty when it did not, or when the token was
	// recorded before fences kept holders).
	HighestHolder string
}

func (e *StaleError) Error() string {
	if e.Token == e.Highest {
		by := ""
		if e.HighestHolder != "" {
			by = fmt.Sprintf(" (to %q)", e.HighestHolder)
		}
		return fmt.Sprintf("leasehold/fence: stale fencing token for %q: token %d of holder %q was already admitted for another holder%s: one token granted to two terms (did the lease store lose data?)",
			e.Resource, e.Token, e.Holder, by)
	}
	return fmt.Sprintf("leasehold/fence: stale fencing token for %q: token %d is below the highest admitted %d",
		e.Resource, e.Token, e.Highest)
}

// Is reports whether target is ErrStale, or ErrTokenReused for an equal
// token from another holder.
func (e *StaleError) Is(target error) bool {
	return target == ErrStale || (target == ErrTokenReused && e.Token == e.Highest)
}

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

// MaxHolderLen is the longest holder identity, in bytes: that of the stores.
const MaxHolderLen = store.MaxHolderLen

// ValidateHolder checks a holder identity as the stores do: 1 to
// MaxHolderLen bytes of printable ASCII without spaces. An empty holder is
// refused: a fence tells terms apart by (token, holder), and a write that
// does not say whose term it is could be either.
func ValidateHolder(holder string) error {
	if holder == "" {
		return fmt.Errorf("%w: holder identity is empty: a fence tells terms apart by token and holder", ErrInvalid)
	}
	if err := store.ValidateHolder(holder); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return nil
}

// ValidateTerm checks a resource, holder and token together.
func ValidateTerm(resource, holder string, token int64) error {
	if err := ValidateResource(resource); err != nil {
		return err
	}
	if err := ValidateHolder(holder); err != nil {
		return err
	}
	return ValidateToken(token)
}

// TermSource gives the term (holder and fencing token) to send with a write.
// *leasehold.Lease implements it. The Name of the term is
// not sent by itself; the lease or resource name is configured separately.
type TermSource interface {
	Term() store.Term
}

// TermFunc adapts a function to a TermSource.
type TermFunc func() store.Term

// Term calls f.
func (f TermFunc) Term() store.Term { return f() }

// StaticTerm is a TermSource that always gives the same term, such as the
// one a child of `leasehold run` finds in its environment.
type StaticTerm store.Term

// Term returns t.
func (t StaticTerm) Term() store.Term { return store.Term(t) }
