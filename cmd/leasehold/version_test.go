package main_test

import (
	"strings"
	"testing"
)

// TestVersionFlag: the built binary names its module and toolchain.
func TestVersionFlag(t *testing.T) {
	code, stdout, stderr := leasehold(t, nil, "--version")
	if code != 0 || !strings.HasPrefix(stdout, "leasehold ") || !strings.Contains(stdout, "module    github.com/leasehold/leasehold\n") || !strings.Contains(stdout, "go        go1.") {
		t.Errorf("--version: exit %d\n%s%s", code, stdout, stderr)
	}
}
