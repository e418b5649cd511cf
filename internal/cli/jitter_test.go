package cli

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
)

// TestJitterZeroMeansNone: on the command line --jitter 0 means no jitter
// (the core's NoJitter), not the core's default, which a zero Jitter in
// leasehold.Timings would silently select.
func TestJitterZeroMeansNone(t *testing.T) {
	for _, c := range []struct {
		args     []string
		jitter   float64 // Timings.Jitter
		fraction float64 // what is added at most
	}{
		{nil, leasehold.DefaultTimings().Jitter, leasehold.DefaultTimings().Jitter},
		{[]string{"--jitter", "0"}, leasehold.NoJitter, 0},
		{[]string{"--jitter", "0.5"}, 0.5, 0.5},
		{[]string{"--jitter", "1"}, 1, 1},
	} {
		tm, _, _, err := resolve(t, c.args...)
		if err != nil {
			t.Errorf("%v: refused: %v", c.args, err)
			continue
		}
		if tm.Jitter != c.jitter || tm.JitterFraction() != c.fraction {
			t.Errorf("%v: Jitter %v (adds at most %v), want %v (%v)", c.args, tm.Jitter, tm.JitterFraction(), c.jitter, c.fraction)
		}
		if err := tm.Validate(); err != nil {
			t.Errorf("%v: the core refuses the timings: %v", c.args, err)
		}
	}

	// Through the command: run accepts it and runs its command; doctor
	// reports no jitter.
	dir := t.TempDir()
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("XDG_STATE_HOME", filepath.Join(home, "state"))
	t.Setenv(StoreEnv, "")
	storeURL := "sqlite://" + filepath.Join(dir, "l.db")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// run's logger and the command's output share the writers.
	var runOut, runErr syncBuffer
	if code := Main(ctx, []string{"run", "--store", storeURL, "--lease", "j", "--jitter", "0", "--", "true"}, strings.NewReader(""), &runOut, &runErr); code != 0 {
		t.Fatalf("run --jitter 0: exit %d:\n%s%s", code, runOut.String(), runErr.String())
	}
	var out, errb bytes.Buffer
	if code := Main(ctx, []string{"doctor", "--store", storeURL, "--jitter", "0"}, strings.NewReader(""), &out, &errb); code != 0 {
		t.Fatalf("doctor --jitter 0: exit %d:\n%s%s", code, out.String(), errb.String())
	}
	if !strings.Contains(out.String(), "(+ up to 0% jitter)") {
		t.Errorf("doctor --jitter 0 does not report no jitter:\n%s", out.String())
	}
}
