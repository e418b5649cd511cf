package leasehold

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"

	"github.com/leasehold/leasehold/store"
)

// NewIdentity returns the holder identity of one process instance: the
// configured name, a dash, and 8 random hex digits. Two processes configured
// with the same name therefore never share an identity, and never both believe
// they hold one term (SAFETY.md rule 10).
func NewIdentity(name string) (string, error) {
	if name == "" {
		return "", fmt.Errorf("%w: identity is empty", ErrInvalidConfig)
	}
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("leasehold: random identity suffix: %w", err)
	}
	id := name + "-" + hex.EncodeToString(b[:])
	if err := store.ValidateHolder(id); err != nil {
		return "", fmt.Errorf("%w: identity %q: %v", ErrInvalidConfig, name, err)
	}
	return id, nil
}
