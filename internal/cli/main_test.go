package cli

import (
	"context"
	"os"
	"testing"
)

// TestMain serves the keeper. `run` starts its own binary again as
// `leasehold __keeper`, and in this package's tests its own binary is the
// test binary: without this, the keeper would run every test of the package
// again, each test that reaches the keeper would start more, and none would
// supervise anything (an earlier TestBadInputs left hundreds of them).
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == keeperCommand {
		os.Exit(Main(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}
