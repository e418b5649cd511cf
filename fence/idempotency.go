package fence

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
)

// HeaderIdempotencyKey is the header in which APIs that deduplicate retries
// (payment and e-mail APIs, and the IETF draft "The Idempotency-Key HTTP
// Header Field") take a client's idempotency key. Transport sets it from
// IdempotencyKey when a request's context names an operation (WithOperation).
const HeaderIdempotencyKey = "Idempotency-Key"

// MaxOperationLen is the longest operation name IdempotencyKey accepts.
const MaxOperationLen = 1024

// IdempotencyKey derives the idempotency key of the operation op done under
// term: the same for a retry of the same operation in the same term (lease,
// holder and token), and different for another operation or another term.
// It is "lh1-" and 32 hex digits of a SHA-256 of the term and op, so it
// reveals neither the holder identity nor the operation name; op may hold an
// order number or an invoice id (it is not a secret, but it is not shown).
//
// This is weaker than a fence. Use it only for a resource that cannot compare
// a token (an external API): an API that honours the key deduplicates a stale
// holder's late retry of an operation the holder already sent, and nothing
// else. A stale holder's different operation carries a different key and is
// not stopped; two terms doing the same operation get different keys, so the
// new holder's run of an operation the old one also sent is not deduplicated
// either (name the operation without the term, and have the API deduplicate
// on your own key, if that is what you need). Where the resource can compare
// tokens, fence it.
func IdempotencyKey(term Term, op string) (string, error) {
	if err := ValidateHolder(term.Holder); err != nil {
		return "", err
	}
	if err := ValidateToken(term.Token); err != nil {
		return "", err
	}
	if op == "" || len(op) > MaxOperationLen {
		return "", fmt.Errorf("%w: operation name is %d bytes; want 1 to %d", ErrInvalid, len(op), MaxOperationLen)
	}
	h := sha256.New()
	// Length-prefixed fields: no two different inputs hash the same bytes.
	for _, f := range []string{"leasehold-idempotency-v1", term.Name, term.Holder, strconv.FormatInt(term.Token, 10), op} {
		fmt.Fprintf(h, "%d:%s;", len(f), f)
	}
	return "lh1-" + hex.EncodeToString(h.Sum(nil)[:16]), nil
}

type operationKey struct{}

// WithOperation returns ctx naming the operation a request sent with it
// does, for Transport's Idempotency-Key: a retry of the same operation must
// be given the same name, another operation another name.
func WithOperation(ctx context.Context, op string) context.Context {
	return context.WithValue(ctx, operationKey{}, op)
}

// operation is the operation ctx names, if any.
func operation(ctx context.Context) (string, bool) {
	op, ok := ctx.Value(operationKey{}).(string)
	return op, ok
}
