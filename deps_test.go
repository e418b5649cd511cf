package leasehold_test

import (
	"os/exec"
	"strings"
	"testing"
)

// The core imports only the standard library: the user-facing package, the
// store contract, the store kit, the reference store, the fault wrapper and
// the suite.
func TestCoreImportsOnlyStandardLibrary(t *testing.T) {
	core := []string{".", "./store", "./store/storekit", "./store/memstore", "./store/faultstore", "./store/storetest"}
	args := append([]string{"list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}"}, core...)
	out, err := exec.Command("go", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, p := range strings.Fields(string(out)) {
		if !strings.HasPrefix(p, "github.com/leasehold/leasehold") || strings.Contains(p, "/store/") && !isCore(p) {
			t.Errorf("core depends on %s", p)
		}
	}
}

func isCore(p string) bool {
	for _, c := range []string{"store/storekit", "store/memstore", "store/faultstore", "store/storetest"} {
		if strings.HasSuffix(p, c) {
			return true
		}
	}
	return false
}
