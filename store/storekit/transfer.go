package storekit

import (
	"time"

	"github.com/leasehold/leasehold/store"
)

// CheckTransfer checks the arguments of store.Transferer's Transfer: the
// term, the successor (a valid holder other than the term's own), the ttl
// and the metadata.
func (k Kit) CheckTransfer(t store.Term, to string, ttl time.Duration, metadata string) error {
	if err := k.CheckTerm("transfer", t); err != nil {
		return err
	}
	if err := k.CheckHolder("transfer", to); err != nil {
		return err
	}
	if to == t.Holder {
		return k.Invalid("transfer", "successor %q is the term's own holder", to)
	}
	if err := k.CheckTTL("transfer", ttl); err != nil {
		return err
	}
	return k.CheckMetadata("transfer", metadata)
}
