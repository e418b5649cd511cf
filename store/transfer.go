package store

import (
	"context"
	"time"
)

// Transferer is an optional capability of a Store, used by a graceful
// hand-over: it ends one term and grants the lease to a named successor in
// the same conditional write, judged on the store's clock, so that no third
// holder can take the lease in between.
//
// Callers find it by type assertion. Without it the core only releases the
// term, and any waiting candidate may win the lease: still safe (tokens rise,
// the old term has ended), but the successor is not preferred. (Release and
// then Acquire in the successor's name would not do: if the successor won
// the lease in between, that Acquire would replace its live term.)
type Transferer interface {
	// Transfer ends exactly the live term t and grants name (t.Name) to
	// holder to for ttl, with metadata: a new term whose token is strictly
	// greater than t.Token, as for any grant. The new term is a reservation:
	// to's own Acquire replaces it at once (a live term of the same holder is
	// replaced, see Acquire), while every other holder's Acquire is refused
	// with ErrHeld until it expires, ttl after the write on the store's clock.
	//
	// If t is not the live term (expired, released, replaced), Transfer
	// changes nothing and returns an error matching ErrNotHeld. It returns
	// ErrInvalid for a bad term, successor, ttl or metadata, and for to equal
	// to t.Holder. Any other error means the outcome is unknown: both terms
	// expire on their own.
	Transfer(ctx context.Context, t Term, to string, ttl time.Duration, metadata string) (Record, error)
}

// PreferredHolderReader is an optional capability of a store whose lease
// records can themselves name a preferred holder: Kubernetes' Lease
// spec.preferredHolder, which Kubernetes' coordinated leader election sets to
// ask the holder to give the lease up. A holder that sees a preferred holder
// other than itself hands over to it as on a hand-over request (drain, then
// Transfer or Release), which is what client-go's coordinated elector does
// (it stops renewing), only sooner.
type PreferredHolderReader interface {
	// PreferredHolder returns the holder the record of name prefers, or ""
	// for none, as of the last time this handle read or wrote that record
	// (a holder's renewal keeps it fresh): it makes no request.
	PreferredHolder(name string) string
}
