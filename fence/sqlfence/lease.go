package sqlfence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/leasehold/leasehold/fence"
	"github.com/leasehold/leasehold/store"
)

// LeaseError says that a lease-checked write was refused because the lease
// row does not name the writer's term as live. It matches store.ErrNotHeld,
// and also fence.ErrStale when a newer term has been granted (Current.Token >
// Term.Token).
type LeaseError struct {
	// Term is the term the writer claimed to hold.
	Term store.Term
	// Found is false if the lease row does not exist.
	Found bool
	// Current is the row as read after the refusal: its holder and epoch.
	Current store.Term
	// Live reports whether the row's expires_at was still ahead.
	Live bool
}

func (e *LeaseError) Error() string {
	if !e.Found {
		return fmt.Sprintf("leasehold/sqlfence: lease %q has no row: term %s does not hold it", e.Term.Name, e.Term)
	}
	state := "expired"
	if e.Live {
		state = "live"
	}
	return fmt.Sprintf("leasehold/sqlfence: term %s does not hold lease %q: the row names holder %q, epoch %d (%s)",
		e.Term, e.Term.Name, e.Current.Holder, e.Current.Token, state)
}

// Is matches store.ErrNotHeld, and fence.ErrStale if a newer term exists.
func (e *LeaseError) Is(target error) bool {
	return target == store.ErrNotHeld || (target == fence.ErrStale && e.Found && e.Current.Token > e.Term.Token)
}

func (f *Fence) leaseCheckSQL() string {
	return `SELECT epoch FROM ` + f.leaseTable + `
WHERE name = $1 AND holder = $2 AND epoch = $3 AND expires_at > clock_timestamp()
FOR SHARE`
}

func (f *Fence) leaseClaimSQL() string {
	return `WITH lease AS (
  SELECT epoch, holder FROM ` + f.leaseTable + `
  WHERE name = $1 AND holder = $2 AND epoch = $3 AND expires_at > clock_timestamp()
  FOR SHARE
),
c AS (INSERT INTO ` + f.table + ` AS f (resource, token, holder) SELECT $4, epoch, holder FROM lease
` + pgUpsert + `
RETURNING token, holder)
SELECT token, holder FROM c
UNION ALL SELECT epoch, holder FROM lease WHERE NOT EXISTS (SELECT 1 FROM c)`
}

func (f *Fence) leaseReadSQL() string {
	return `SELECT coalesce(holder, ''), epoch, expires_at > clock_timestamp() FROM ` + f.leaseTable + ` WHERE name = $1`
}

// CheckLease checks, in tx, that the lease row of store/postgres still names
// term t (name, holder and epoch) and has not expired, and share-locks that
// row until tx ends. PostgreSQL only. On refusal it rolls tx back and returns
// a *LeaseError (matching store.ErrNotHeld, and fence.ErrStale if a newer term
// exists); any other error also rolls tx back.
//
// What it protects: a takeover, renewal or release of the lease is an UPDATE
// of the locked row, so it waits until tx commits or rolls back; after it,
// t's epoch no longer matches. So among transactions in this database that
// call CheckLease (or ClaimLease) before committing, those of different terms
// never overlap: the writes are mutually exclusive, not only ordered.
//
// What it does not protect: writes in other databases or services, or in
// transactions that skip the check; anything the holder does outside the
// transaction. Expiry is judged by clock_timestamp(), the database's clock at
// the moment of the check, not now(): in PostgreSQL now() is the start time
// of the transaction at every isolation level, so a transaction opened before
// the lease expired would pass a now()-based check after it. Once the check
// has passed, the lease may expire while tx runs, but no other term can be
// granted until tx ends: keep such transactions short, since they also hold
// up the holder's own renewals. Under REPEATABLE READ or SERIALIZABLE, a
// check that races a takeover fails with a serialization error instead
// (retry the transaction). The database role needs SELECT and UPDATE (on at
// least one column) on the lease table: PostgreSQL requires UPDATE for
// FOR SHARE.
func (f *Fence) CheckLease(ctx context.Context, tx Tx, t store.Term) error {
	if err := f.checkTx(ctx, tx); err != nil {
		return err
	}
	return f.checkLease(ctx, tx, t, "", false)
}

// ClaimLease does CheckLease and Claim(resource, t.Holder, t.Token) in one
// statement: the lease row is share-locked and the fence row claimed with the
// term's epoch and holder, in one round trip. Use it where the same resource
// is also written by transactions that only Claim (or by another database's
// view of the same tokens). It returns what CheckLease or Claim would.
func (f *Fence) ClaimLease(ctx context.Context, tx Tx, t store.Term, resource string) error {
	if err := f.checkTx(ctx, tx); err != nil {
		return err
	}
	return f.checkLease(ctx, tx, t, resource, true)
}

func (f *Fence) checkLease(ctx context.Context, tx Tx, t store.Term, resource string, claim bool) error {
	if f.d != Postgres {
		rollback(ctx, tx)
		return fmt.Errorf("leasehold/sqlfence: %w: lease checks need the Postgres dialect, this fence is %v", fence.ErrInvalid, f.d)
	}
	if err := store.ValidateTerm(t); err != nil {
		rollback(ctx, tx)
		return fmt.Errorf("leasehold/sqlfence: lease check: %w", err)
	}
	var got int64
	var err error
	if claim {
		if err := fence.ValidateResource(resource); err != nil {
			rollback(ctx, tx)
			return fmt.Errorf("leasehold/sqlfence: lease check: %w", err)
		}
		var gotHolder string
		err = tx.QueryRow(ctx, f.leaseClaimSQL(), t.Name, t.Holder, t.Token, resource).Scan(&got, &gotHolder)
		if err == nil {
			// The lease row names this term; the fence row may still hold
			// a higher token, or this token for another holder.
			return f.verdict(ctx, tx, resource, t.Holder, t.Token, got, gotHolder)
		}
	} else {
		err = tx.QueryRow(ctx, f.leaseCheckSQL(), t.Name, t.Holder, t.Token).Scan(&got)
		if err == nil {
			if got == t.Token {
				return nil
			}
			rollback(ctx, tx)
			return fmt.Errorf("leasehold/sqlfence: lease check of %s: got epoch %d", t, got)
		}
	}
	if !errors.Is(err, sql.ErrNoRows) {
		rollback(ctx, tx)
		if missingTable(err) {
			return fmt.Errorf("leasehold/sqlfence: lease check of %s: table %s or %s is missing: %w", t, f.leaseTable, f.table, err)
		}
		return fmt.Errorf("leasehold/sqlfence: lease check of %s: %w", t, err)
	}
	// Refused by the lease row. Say why.
	le := &LeaseError{Term: t}
	var live bool
	err = tx.QueryRow(ctx, f.leaseReadSQL(), t.Name).Scan(&le.Current.Holder, &le.Current.Token, &live)
	rollback(ctx, tx)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return le
	case err != nil:
		return fmt.Errorf("leasehold/sqlfence: lease check of %s refused; reading the lease row: %w", t, err)
	}
	le.Found, le.Live, le.Current.Name = true, live, t.Name
	return le
}
