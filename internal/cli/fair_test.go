package cli

import (
	"errors"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/memstore"
)

// TestCheckFairRefusesStoreWithoutQueue: --fair on a store that keeps no
// queue is a usage error (exit 2) naming the store, given before anything
// is written. The store here is memstore behind a wrapper that embeds only
// store.Store, which hides memstore's queue; memstore itself is accepted
// (the control), and so is any store without --fair.
func TestCheckFairRefusesStoreWithoutQueue(t *testing.T) {
	hidden := &openedStore{Store: struct{ store.Store }{memstore.New()}, Name: "noqueue://job"}
	err := checkFair(true, hidden)
	var usage *UsageError
	if !errors.As(err, &usage) || !strings.Contains(err.Error(), "--fair: the store noqueue://job") || !strings.Contains(err.Error(), "no first-come, first-served queue") {
		t.Fatalf("checkFair on a store without a queue: %v; want a usage error naming the store and its missing queue", err)
	}
	var stderr strings.Builder
	if code := exitCode(&stderr, "run", err); code != ExitUsage || !strings.Contains(stderr.String(), "leasehold run: --fair: the store noqueue://job") {
		t.Fatalf("exit code %d, want %d; stderr %q", code, ExitUsage, stderr.String())
	}
	if err := checkFair(false, hidden); err != nil {
		t.Fatalf("without --fair: %v", err)
	}
	if err := checkFair(true, &openedStore{Store: memstore.New(), Name: "mem"}); err != nil {
		t.Fatalf("--fair on memstore, which queues: %v", err)
	}
}
