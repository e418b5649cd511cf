package kubernetes

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"github.com/leasehold/leasehold/store"
)

// Annotations leasehold writes on a Lease object. Client-go's elector keeps
// annotations it does not know, so they survive its takeovers.
const (
	// AnnotationName holds the leasehold lease name of an object whose name
	// is a mapped one (see ObjectName).
	AnnotationName = "leasehold.dev/name"
	// AnnotationMetadata holds the holder metadata of a leasehold term.
	AnnotationMetadata = "leasehold.dev/metadata"
	// AnnotationMetadataToken holds the token of the term that wrote
	// AnnotationMetadata. The metadata is reported only while that term is the
	// current one, so that a client-go takeover, which leaves annotations
	// alone, does not inherit it.
	AnnotationMetadataToken = "leasehold.dev/metadata-token"
)

// hashLen is the number of hex digits of the name's SHA-256 in a mapped
// object name: 48 bits, so that two names meeting by chance is not a concern.
const hashLen = 12

// ObjectName returns the name of the Lease object that holds lease name, and
// whether it is name itself.
//
// A lease name that is already a valid Kubernetes object name (a DNS
// subdomain: lower-case letters, digits, '-' and '.', starting and ending with
// a letter or digit) is used as it is, so that leasehold and client-go
// electors configured with that name share one Lease. Any other valid lease
// name (upper case, '_', '/', ...) is mapped deterministically: lower-cased,
// every other disallowed byte turned into '-', trimmed into a DNS subdomain,
// then suffixed with '-' and the first 12 hex digits of the SHA-256 of the
// original name. "jobs/Nightly_Report" becomes
// "jobs-nightly-report-" followed by 12 hex digits. The original name is
// kept in the annotation leasehold.dev/name, and an object whose annotation
// names another lease is refused with store.ErrInvalid instead of shared.
func ObjectName(name string) (obj string, verbatim bool, err error) {
	if err := store.ValidateName(name); err != nil {
		return "", false, err
	}
	if isDNSSubdomain(name) {
		return name, true, nil
	}
	b := []byte(strings.ToLower(name))
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '-') {
			b[i] = '-'
		}
	}
	var labels []string
	for _, l := range strings.Split(string(b), ".") {
		if l = strings.Trim(l, "-"); l != "" {
			labels = append(labels, l)
		}
	}
	base := strings.Join(labels, ".")
	if base == "" {
		base = "lease"
	}
	sum := sha256.Sum256([]byte(name))
	obj = base + "-" + hex.EncodeToString(sum[:])[:hashLen]
	if !isDNSSubdomain(obj) {
		// Unreachable for names that pass store.ValidateName.
		return "", false, kit.Invalid("", "lease name %q maps to %q, not a valid object name", name, obj)
	}
	return obj, false, nil
}

// isDNSLabel reports whether s is an RFC 1123 label as Kubernetes names
// namespaces: 1 to 63 lower-case letters, digits and '-', starting and
// ending with a letter or digit.
func isDNSLabel(s string) bool { return isLabel(s, 63) }

// isDNSSubdomain reports whether s is an RFC 1123 subdomain as Kubernetes
// names most objects: at most 253 characters, labels of lower-case letters,
// digits and '-', each starting and ending with a letter or digit, joined
// by '.'.
func isDNSSubdomain(s string) bool {
	if len(s) > 253 {
		return false
	}
	for _, l := range strings.Split(s, ".") {
		if !isLabel(l, 253) {
			return false
		}
	}
	return true
}

func isLabel(s string, maxLen int) bool {
	if len(s) == 0 || len(s) > maxLen || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}
