package storekit

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/leasehold/leasehold/store"
)

// Kit is what a store's helpers need to know of the store: its name, for
// messages, and the shortest lease it keeps. A store declares one, usually
// as a package variable:
//
//	var kit = storekit.Kit{Store: "postgres", MinTTL: MinTTL}
type Kit struct {
	// Store is the store's short name, as in its package path ("postgres").
	// Every message of the kit begins "leasehold/<Store>: ".
	Store string
	// MinTTL is the shortest lease the store keeps: the ttl checks refuse
	// a shorter one. Zero: any positive ttl.
	MinTTL time.Duration
}

// prefix is "leasehold/<store>: <op>: " (without the op part when op is empty).
func (k Kit) prefix(op string) string {
	if op == "" {
		return "leasehold/" + k.Store + ": "
	}
	return "leasehold/" + k.Store + ": " + op + ": "
}

// Invalid is the one way to build a bad-input error. Its message reads
//
//	leasehold/<store>: <op>: invalid argument: <format, args>
//
// and it matches store.ErrInvalid (errors.Is), and also any error that
// format wraps with %w. An empty op leaves out the "<op>: " part. The
// detail says what was wrong and, where it helps, what is allowed.
func (k Kit) Invalid(op, format string, args ...any) error {
	return &invalidError{prefix: k.prefix(op), err: fmt.Errorf(format, args...)}
}

// invalidError is the error Invalid builds.
type invalidError struct {
	_ [0]func() // not comparable: spares the binary an equality function

	prefix string
	err    error
}

func (e *invalidError) Error() string   { return e.prefix + "invalid argument: " + e.err.Error() }
func (e *invalidError) Unwrap() []error { return []error{store.ErrInvalid, e.err} }

// Errorf is an error of the store that is not bad input: "leasehold/<store>:
// <op>: " followed by format, which may wrap an error with %w.
func (k Kit) Errorf(op, format string, args ...any) error {
	return fmt.Errorf(k.prefix(op)+format, args...)
}

// Wrap wraps err once with the store and the operation:
// "leasehold/<store>: <op>: <err>". It returns nil for a nil err. Use it for
// the store's definite answers (Wrap("renew "+t.String(), store.ErrNotHeld))
// and for a driver's errors alike.
func (k Kit) Wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s%w", k.prefix(op), err)
}

// rewrap turns an error of package store's validators ("leasehold: invalid
// argument: <detail>") into the kit's form, keeping the detail.
func (k Kit) rewrap(op string, err error) error {
	if err == nil {
		return nil
	}
	if !errors.Is(err, store.ErrInvalid) {
		return k.Wrap(op, err)
	}
	detail := strings.TrimPrefix(err.Error(), store.ErrInvalid.Error()+": ")
	return &invalidError{prefix: k.prefix(op), err: errors.New(detail)}
}

// CheckName checks a lease name (store.ValidateName) for operation op:
// Get, Watch, ForceRelease, History.
func (k Kit) CheckName(op, name string) error {
	return k.rewrap(op, store.ValidateName(name))
}

// CheckHolder checks a holder identity (store.ValidateHolder) for
// operation op.
func (k Kit) CheckHolder(op, holder string) error {
	return k.rewrap(op, store.ValidateHolder(holder))
}

// CheckMetadata checks holder metadata (store.ValidateMetadata) for
// operation op.
func (k Kit) CheckMetadata(op, metadata string) error {
	return k.rewrap(op, store.ValidateMetadata(metadata))
}

// CheckTerm checks a term (store.ValidateTerm) for operation op.
func (k Kit) CheckTerm(op string, t store.Term) error {
	return k.rewrap(op, store.ValidateTerm(t))
}

// CheckTTL checks a lease duration against the store's MinTTL
// (store.ValidateTTL) for operation op: RenewMany checks its ttl once.
func (k Kit) CheckTTL(op string, ttl time.Duration) error {
	return k.rewrap(op, store.ValidateTTL(ttl, k.MinTTL))
}

// CheckAcquire checks the arguments of Acquire (store.ValidateAcquire).
func (k Kit) CheckAcquire(name, holder string, ttl time.Duration, metadata string) error {
	return k.rewrap("acquire", store.ValidateAcquire(name, holder, ttl, k.MinTTL, metadata))
}

// CheckRenew checks the arguments of Renew: the term and the ttl.
func (k Kit) CheckRenew(t store.Term, ttl time.Duration) error {
	if err := k.CheckTerm("renew", t); err != nil {
		return err
	}
	return k.CheckTTL("renew", ttl)
}

// CheckRelease checks the argument of Release: the term.
func (k Kit) CheckRelease(t store.Term) error {
	return k.CheckTerm("release", t)
}

// CheckEnqueue checks the arguments of Queuer.Enqueue: name, holder, ttl.
func (k Kit) CheckEnqueue(name, holder string, ttl time.Duration) error {
	if err := k.CheckName("enqueue", name); err != nil {
		return err
	}
	if err := k.CheckHolder("enqueue", holder); err != nil {
		return err
	}
	return k.CheckTTL("enqueue", ttl)
}

// CheckDequeue checks the arguments of Queuer.Dequeue: name, holder.
func (k Kit) CheckDequeue(name, holder string) error {
	if err := k.CheckName("dequeue", name); err != nil {
		return err
	}
	return k.CheckHolder("dequeue", holder)
}
