package zktest

import (
	"errors"
	"testing"

	"github.com/leasehold/leasehold/internal/testenv"
)

// Standalone starts a standalone server in t.TempDir() (o.Dir is ignored)
// and kills it when t ends. A missing installation is testenv.Missing: a
// loud skip, and a failure in CI.
func Standalone(t testing.TB, o Options) *Server {
	t.Helper()
	o.Dir = t.TempDir()
	s, err := StartServer(o)
	if errors.Is(err, ErrNotInstalled) {
		testenv.Missing(t, "ZooKeeper", HowToInstall+" ("+err.Error()+")")
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Kill)
	return s
}

// NewEnsemble starts an ensemble of n members in t.TempDir() and stops it
// when t ends, as Standalone does for one server.
func NewEnsemble(t testing.TB, n int, o Options) *Ensemble {
	t.Helper()
	o.Dir = t.TempDir()
	e, err := StartEnsemble(n, o)
	if errors.Is(err, ErrNotInstalled) {
		testenv.Missing(t, "ZooKeeper", HowToInstall+" ("+err.Error()+")")
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			// A failed test says what each member was doing.
			for _, s := range e.Servers {
				t.Logf("member %d (%s, mode %q), the end of its log:\n%s", s.ID, s.Addr(), s.Mode(), s.logTail())
			}
		}
		e.Stop()
	})
	return e
}
