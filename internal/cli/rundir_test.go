//go:build unix

package cli

import (
	"os"
	"path/filepath"
	"testing"
)

// TestRunDirSweep: a run's directory survives other runs' sweeps while the
// run lives (its lock is held); a directory whose lock is free (its run was
// killed) is removed by the next run; the pending name is never swept.
func TestRunDirSweep(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	dead := filepath.Join(tmp, runDirPrefix+"dead")
	pending := filepath.Join(tmp, runDirPending+"x")
	for _, d := range []string{dead, pending} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dead, "safe-until"), []byte("x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	live, releaseLive, err := makeRunDir()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dead); !os.IsNotExist(err) {
		t.Errorf("a dead run's directory survived the sweep: %v", err)
	}
	if _, err := os.Stat(pending); err != nil {
		t.Errorf("a pending directory was swept: %v", err)
	}
	other, releaseOther, err := makeRunDir()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(live); err != nil {
		t.Errorf("a live run's directory was swept by another run: %v", err)
	}
	releaseLive()
	releaseOther()
	for _, d := range []string{live, other} {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("%s survived its release: %v", d, err)
		}
	}
}
