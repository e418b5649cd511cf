package storetest_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/memstore"
	"github.com/leasehold/leasehold/store/storetest"
)

// Negative control of the semaphore race's checker: holders that use three
// slots where the checker allows two must be caught running three at once.
func TestSemaphoreCheckerCatchesTooManyHolders(t *testing.T) {
	b := memstore.NewBackend(nil)
	open := func() (store.Store, error) { return memstore.Open(b), nil }
	v := storetest.RaceSemaphore(t, open, 3, 2, 4)
	if len(v) == 0 {
		t.Fatal("checker found nothing wrong with three holders at once under a limit of two")
	}
	if !strings.Contains(strings.Join(v, "\n"), "3 terms trusted at once, the limit is 2") {
		t.Fatalf("violations %q, want one naming 3 terms at once", v)
	}
}

// Negative control of the race through the store: a store that grants a held
// lease (two winners) fails SemaphoreRace with a slot granted twice.
func TestSemaphoreRaceCatchesTwoWinners(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestBrokenStoreHelper$/^SemaphoreRace$", "-test.v")
	cmd.Env = append(os.Environ(), "STORETEST_BUG=two-winners")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("the semaphore race passed a store that grants held leases:\n%s", out)
	}
	if !strings.Contains(string(out), "--- FAIL: TestBrokenStoreHelper/SemaphoreRace") || !strings.Contains(string(out), "granted twice") {
		t.Fatalf("want SemaphoreRace to fail with a slot granted twice; output:\n%s", out)
	}
}
