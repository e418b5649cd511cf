package leasehold

import (
	"errors"
	"fmt"

	"github.com/leasehold/leasehold/store"
)

// Why a term's context was cancelled. The guarded work reads it with
// context.Cause(ctx); each matches with errors.Is.
var (
	// ErrSafeUntilPassed: no renewal succeeded in time, so the holder stopped
	// trusting its term at safeUntil (minus WindDown), whatever a renewal in
	// flight might still say. The store may or may not still hold the term.
	ErrSafeUntilPassed = errors.New("leasehold: no renewal succeeded before safeUntil")
	// ErrLeaseLost: the store answered that this term is no longer the live
	// one: it expired or a newer term replaced it.
	ErrLeaseLost = errors.New("leasehold: lease lost to expiry or a newer term")
	// ErrMaxHold: the term reached Config.MaxHold. The work's context is
	// cancelled and renewing stopped; the term is released once the work
	// returns, or expires on the store's clock.
	ErrMaxHold = errors.New("leasehold: term reached its maximum hold time")
	// ErrReleased: the term was ended on purpose: released, or the work
	// returned and the elector stepped down.
	ErrReleased = errors.New("leasehold: lease released")
	// ErrAlreadyRunning: Run was called on an Elector that is already running.
	ErrAlreadyRunning = errors.New("leasehold: elector already running")

	// ErrHeld: someone else holds the lease (another holder's term is
	// live). ErrNotHeld: the term named is not the live one (it expired or
	// was replaced). They are the store contract's sentinels, here so that
	// callers need not import package store to check them.
	ErrHeld    = store.ErrHeld
	ErrNotHeld = store.ErrNotHeld
)

// HeldError says that someone else holds the lease: Lock.TryAcquire and
// Keeper.TryAcquire return it when another holder's term is live. It matches
// ErrHeld and carries that holder's record.
type HeldError struct {
	Record store.Record
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("leasehold: lease %q held by %s (token %d, %v left)",
		e.Record.Name, e.Record.Holder, e.Record.Token, e.Record.Remaining)
}

func (e *HeldError) Unwrap() error { return store.ErrHeld }
