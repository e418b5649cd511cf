package chaos

import (
	"errors"
	"testing"
)

// The proxy itself is tested in package faultproxy; here, that the harness's
// constructor names a bad target with the harness's ErrInvalid.
func TestProxyRejectsBadTarget(t *testing.T) {
	if _, err := newProxy("no-port"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("err = %v", err)
	}
}
