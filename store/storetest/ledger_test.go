package storetest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/store"
)

// TestLedgerCatchesTwoHoldersAndFallingTokens is the negative control of the
// ledger the cluster tests use: two holders at once, an equal token and a
// lower one must each be reported; a clean hand-off must not.
func TestLedgerCatchesTwoHoldersAndFallingTokens(t *testing.T) {
	var errs []string
	l := newLedger(func(f string, a ...any) { errs = append(errs, fmt.Sprintf(f, a...)) }, t.Logf)

	l.enter("a", 1, "a/1")
	l.leave("a", "a/1")
	l.enter("b", 2, "b/2")
	if len(errs) != 0 {
		t.Fatalf("a clean hand-off was reported: %q", errs)
	}
	if who, tok := l.Leading(); who != "b" || tok != 2 || l.Terms() != 2 {
		t.Fatalf("Leading() = %s, %d; Terms() = %d; want b, 2; 2", who, tok, l.Terms())
	}

	l.enter("c", 3, "c/3") // b is still inside
	if len(errs) != 1 || !strings.HasPrefix(errs[0], "TWO HOLDERS: c leads with token 3 while b still leads with token 2") {
		t.Fatalf("two holders at once: reported %q", errs)
	}
	l.leave("b", "b/2")
	l.leave("c", "c/3")

	errs = nil
	l.enter("d", 3, "d/3") // the same token again
	l.leave("d", "d/3")
	l.enter("e", 1, "e/1") // a lower token
	if len(errs) != 2 || !strings.Contains(errs[0], "d leads with token 3, not above the previous 3") ||
		!strings.Contains(errs[1], "e leads with token 1, not above the previous 3") {
		t.Fatalf("tokens that do not rise: reported %q", errs)
	}
}

// timedOut tells a store that did not answer in time (which the semaphore
// race forgives a Release) from one that answered wrong (which it does not).
func TestTimedOut(t *testing.T) {
	dial := &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("release: %w", context.DeadlineExceeded), true},
		{fmt.Errorf("failed to receive message: %w", dial), true},
		{fmt.Errorf("release: %w", store.ErrNotHeld), false},
		{fmt.Errorf("release: %w", context.Canceled), false},
		{errors.New("timeout"), false}, // only the text: not a timeout
	} {
		if got := timedOut(tc.err); got != tc.want {
			t.Errorf("timedOut(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
