package cli

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
)

// verify refuses bad input before it starts anything, with exit code 2 and a
// message naming what was wrong; --plan prints the seed's schedule.
func TestVerifyFlags(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp) // where a run without --out makes its directory
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--faults", "pause,meteor", "--plan"}, ExitUsage, `unknown fault "meteor"`},
		{[]string{"--store", "sqlite:///tmp/x.db", "--faults", "blackhole", "--plan"}, ExitUsage, `fault "blackhole" needs a store reached over the network`},
		{[]string{"--max-drift", "0.35", "--plan"}, ExitUsage, "--max-drift 0.35 is impossible"},
		{[]string{"--duration", "2s", "--plan"}, ExitUsage, "too short"},
		{[]string{"--store", "kubernetes://default", "--plan"}, ExitUsage, "cannot run against kubernetes://"},
		{[]string{"--store", "redis://10.0.0.9:6379", "--plan"}, ExitUsage, "not a loopback address"},
		{[]string{"extra"}, ExitUsage, "takes no arguments"},
		{[]string{"--groups", "0", "--plan"}, ExitUsage, "--groups 0: need 1 to 64"},
		{[]string{"--overlap", "4", "--plan"}, ExitUsage, "--overlap 4: need 1 to --nodes (3)"},
		{[]string{"--until-faults", "-1", "--plan"}, ExitUsage, "--until-faults -1 is negative"},
		{[]string{"--overlap", "3", "--seed", "5", "--plan"}, ExitOK, "fault schedule of seed 5"},
		{[]string{"--seed", "42", "--plan"}, ExitOK, "fault schedule of seed 42"},
		{[]string{"--slots", "2", "--every", "2s", "--plan"}, ExitUsage, "a semaphore or a schedule, not both"},
		{[]string{"--slots", "3", "--plan"}, ExitUsage, "--slots 3: need 1 to --nodes - 1 (2)"},
		{[]string{"--every", "1500ms", "--plan"}, ExitUsage, "--every 1.5s: want a whole number of seconds"},
		{[]string{"--broken-store", "forget-claims", "--plan"}, ExitUsage, "--broken-store forget-claims needs a schedule run"},
		{[]string{"--broken-store", "extra-slot", "--every", "2s", "--plan"}, ExitUsage, "--broken-store extra-slot needs a semaphore run"},
		{[]string{"--slots", "2", "--seed", "7", "--plan"}, ExitOK, "fault schedule of seed 7"},
		{[]string{"--every", "2s", "--seed", "7", "--plan"}, ExitOK, "fault schedule of seed 7"},
		// Without --plan, refused before or inside the harness: nothing is
		// left in the temporary directory (checked below).
		{[]string{"--slots", "2", "--every", "2s"}, ExitUsage, "a semaphore or a schedule, not both"},
		{[]string{"--fair", "--slots", "2"}, ExitUsage, "--fair does not go with --slots"},
		{[]string{"--duration", "2s"}, ExitUsage, "too short"},
	}
	for _, tc := range cases {
		var out, errb bytes.Buffer
		code := Main(context.Background(), append([]string{"verify"}, tc.args...), nil, &out, &errb)
		if code != tc.code || !strings.Contains(out.String()+errb.String(), tc.want) {
			t.Errorf("verify %v: exit %d, want %d with %q; stdout %q stderr %q", tc.args, code, tc.code, tc.want, out.String(), errb.String())
		}
	}
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Errorf("refused runs left %d entries in the temporary directory, such as %s", len(left), left[0].Name())
	}
	// The same seed gives the same schedule.
	var a, b bytes.Buffer
	Main(context.Background(), []string{"verify", "--seed", "9", "--plan"}, nil, &a, &bytes.Buffer{})
	Main(context.Background(), []string{"verify", "--seed", "9", "--plan"}, nil, &b, &bytes.Buffer{})
	if a.String() != b.String() || !strings.Contains(a.String(), "the leader") && !strings.Contains(a.String(), "node ") {
		t.Errorf("schedules of one seed differ or are empty:\n%s\n%s", a.String(), b.String())
	}
}
