package fence

import (
	"fmt"
	"net/http"
	"os"

	"github.com/leasehold/leasehold/store"
)

// The environment `leasehold run` gives its child: the lease it holds, the
// holder identity, and the fencing token of the term.
const (
	EnvLease  = "LEASEHOLD_LEASE"
	EnvToken  = "LEASEHOLD_TOKEN"
	EnvHolder = "LEASEHOLD_HOLDER"
)

// Term is a term of a lease: its Name, its Holder and its fencing Token. It
// is store.Term under the name this package's users see: FromEnv returns the
// term a child of `leasehold run` runs under, and StaticTerm(t) sends it.
type Term = store.Term

// FromEnv reads the term from LEASEHOLD_LEASE, LEASEHOLD_TOKEN and
// LEASEHOLD_HOLDER. It fails, naming the variable, if one is missing, the
// token is not an integer >= 1, or the holder is not a valid holder identity.
// The holder is required: a fence tells two terms apart by token and holder,
// since after a lease store loses data one token can be granted twice.
//
// The token does not change for the life of the child: `leasehold run` stops
// the child (SIGTERM, then SIGKILL) before its term could pass to another node,
// and starts a new child for a new term.
func FromEnv() (Term, error) {
	return fromLookup(os.LookupEnv)
}

func fromLookup(lookup func(string) (string, bool)) (Term, error) {
	var t Term
	var ok bool
	if t.Name, ok = lookup(EnvLease); !ok || t.Name == "" {
		return Term{}, fmt.Errorf("%w: %s is not set: not running under `leasehold run`?", ErrInvalid, EnvLease)
	}
	v, ok := lookup(EnvToken)
	if !ok || v == "" {
		return Term{}, fmt.Errorf("%w: %s is not set: not running under `leasehold run`?", ErrInvalid, EnvToken)
	}
	tok, err := ParseToken([]string{v})
	if err != nil {
		return Term{}, fmt.Errorf("%w: %s=%q is not a fencing token (an integer >= 1)", ErrInvalid, EnvToken, v)
	}
	t.Token = tok
	if t.Holder, ok = lookup(EnvHolder); !ok || t.Holder == "" {
		return Term{}, fmt.Errorf("%w: %s is not set: not running under `leasehold run`?", ErrInvalid, EnvHolder)
	}
	if ValidateHolder(t.Holder) != nil {
		return Term{}, fmt.Errorf("%w: %s=%q is not a holder identity (1 to %d bytes of printable ASCII without spaces)", ErrInvalid, EnvHolder, t.Holder, MaxHolderLen)
	}
	return t, nil
}

// EnvTransport returns a Transport for the child of `leasehold run`: it
// stamps every request with the token, holder and lease from the environment.
// base nil means http.DefaultTransport.
func EnvTransport(base http.RoundTripper) (*Transport, error) {
	t, err := FromEnv()
	if err != nil {
		return nil, err
	}
	return &Transport{Base: base, Lease: t.Name, Source: StaticTerm(t)}, nil
}
