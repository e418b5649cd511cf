package main_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestKilledRunLeavesNoTempDir: `run` keeps the command's safe-until file in
// a directory under $TMPDIR. kill -9 of run cannot remove it; the next run
// must, and must remove its own when it ends, so $TMPDIR ends empty.
func TestKilledRunLeavesNoTempDir(t *testing.T) {
	tmp := t.TempDir()
	env := []string{"LEASEHOLD_STORE=", "TMPDIR=" + tmp}
	storeURL := sqliteURL(t) // not under tmp
	args := append([]string{"run", "--store", storeURL, "--lease", "killed"}, timingArgs...)
	p := startProc(t, env, append(args, "--", "sh", "-c", `echo "watchdog $PPID file $LEASEHOLD_SAFE_UNTIL_FILE"; exec sleep 60`)...)
	p.wait(t, "watchdog ", 30*time.Second, strings.HasPrefix)
	var (
		watchdog int
		file     string
	)
	for _, l := range strings.Split(p.output(), "\n") {
		if strings.HasPrefix(l, "watchdog ") {
			fmt.Sscanf(l, "watchdog %d file %s", &watchdog, &file)
		}
	}
	dir := filepath.Dir(file)
	if watchdog <= 1 || filepath.Dir(dir) != tmp {
		t.Fatalf("watchdog %d, safe-until file %q: not a file in a directory under %s", watchdog, file, tmp)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("run's directory: %v", err)
	}

	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.done
	// Its watchdog sees the pipe close, kills the command and exits.
	waitUntil(t, 10*time.Second, "the watchdog to exit", func() bool { return processGone(watchdog) || procState(watchdog) == "Z" })
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("after kill -9 the directory is already gone (%v): this test no longer tests the sweep", err)
	}

	// The next run, on another lease, removes the dead run's directory and
	// its own.
	code, stdout, stderr := leasehold(t, env, append(append([]string{"run", "--store", storeURL, "--lease", "next"}, timingArgs...), "--", "true")...)
	if code != 0 {
		t.Fatalf("next run: exit %d\n%s%s", code, stdout, stderr)
	}
	left, err := os.ReadDir(tmp)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range left {
		t.Errorf("left in $TMPDIR: %s", e.Name())
	}
}
