package cli

import (
	"context"
	"os"
	"testing"
)

// TestMain serves the watchdog. `run` starts its own binary again as
// `leasehold __watchdog`, and in this package's tests its own binary is the
// test binary: without this, the watchdog would run every test of the package
// again, each test that reaches the watchdog would start more, and none would
// supervise anything (an earlier TestBadInputs left hundreds of them).
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == watchdogCommand {
		os.Exit(Main(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}
