package leasehold

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/leasehold/leasehold/store"
)

// ErrElectorOwned: Release was called on the lease an Elector handed to its
// work. The Elector releases that lease itself, once the work has returned
// (drain before release); to step down, return from the work.
var ErrElectorOwned = errors.New("leasehold: an Elector releases its lease itself once the work returns; return from the work to step down")

// Lease is a term this process holds: one grant of a lease name to this
// holder, with its fencing token. An Elector hands one to its work for each
// term it wins; a Lock and a Keeper return one from Acquire and TryAcquire.
//
// Do the term's work under Context, send Token (with the holder, see Term)
// with every write to a fenced resource, and call Release once that work has
// returned. Context is cancelled at safeUntil (minus Timings.WindDown), when
// the store says the term is lost, when it is released, or when its Elector's
// Run or its Keeper ends; context.Cause says which (ErrSafeUntilPassed,
// ErrLeaseLost, ErrReleased, or the cause of Run's context).
type Lease struct {
	term store.Term
	ctx  context.Context
	keep keeping

	once sync.Once
	err  error
}

// keeping is what keeps a Lease's term: the holding of an Elector or a Lock,
// or one lease of a Keeper.
type keeping interface {
	safeUntil() time.Time
	// release ends the term (drain before release: the caller says its work
	// has returned). It is called at most once.
	release(ctx context.Context) error
}

// Name is the lease's name.
func (l *Lease) Name() string { return l.term.Name }

// Token is the fencing token of the term. Send it with every write.
func (l *Lease) Token() int64 { return l.term.Token }

// Term is the held term: lease name, holder identity and fencing token.
func (l *Lease) Term() store.Term { return l.term }

// SafeUntil is the local deadline, on the holder's Clock, until which the
// term is trusted; it moves forward with every successful renewal.
func (l *Lease) SafeUntil() time.Time { return l.keep.safeUntil() }

// Context is cancelled when the term must no longer be trusted, or has ended
// (see Lease); context.Cause says why. Do the term's work under it.
func (l *Lease) Context() context.Context { return l.ctx }

// Release ends the term: it cancels Context (cause ErrReleased), stops
// renewing, and ends exactly this term in the store. Call it only after the
// work done under the lease has returned: until then a Keeper starts no new
// term on the name (ErrDraining). It returns nil if the term was ended, an
// error matching ErrNotHeld if it had already expired or been lost (nothing
// was changed in the store), or the store's error (the outcome is unknown,
// and the term expires on its own). It is idempotent: later calls return the
// first call's result.
//
// The lease handed to an Elector's work is the exception: the Elector
// releases it after the work returns, so its Release changes nothing and
// returns an error matching ErrElectorOwned.
func (l *Lease) Release(ctx context.Context) error {
	l.once.Do(func() {
		if err := l.keep.release(ctx); err != nil {
			l.err = fmt.Errorf("leasehold: release %s: %w", l.term, err)
		}
	})
	return l.err
}
