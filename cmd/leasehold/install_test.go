package main_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestInstall: install copies the binary into a directory, as the image's
// init container does; the copy runs. A missing directory is named.
func TestInstall(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "leasehold"), []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := leasehold(t, nil, "install", dir)
	if code != 0 || !strings.Contains(stderr, "installed "+filepath.Join(dir, "leasehold")) {
		t.Fatalf("install: exit %d, %s", code, stderr)
	}
	out, err := exec.Command(filepath.Join(dir, "leasehold"), "--version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "github.com/leasehold/leasehold") {
		t.Errorf("the installed copy: %v\n%s", err, out)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("install left %d files in %s, want 1", len(ents), dir)
	}
	missing := filepath.Join(dir, "nope")
	if code, _, stderr := leasehold(t, nil, "install", missing); code != 2 || !strings.Contains(stderr, missing+" is not a directory") {
		t.Errorf("install into a missing directory: exit %d, %s", code, stderr)
	}
}
