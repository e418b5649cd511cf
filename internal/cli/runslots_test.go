package cli

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSlotsBadInput: bad --slots values are refused with the flag named, and
// nothing is created.
func TestSlotsBadInput(t *testing.T) {
	long := strings.Repeat("s", 121) // fits alone; with ".slot-11" it is 129 bytes
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"negative", []string{"run", "--lease", "x", "--slots", "-1", "--", "true"}, "--slots -1: want 1 to 256"},
		{"too many", []string{"run", "--lease", "x", "--slots", "257", "--", "true"}, "--slots 257: want 1 to 256"},
		{"not a number", []string{"run", "--lease", "x", "--slots", "two", "--", "true"}, "-slots"},
		{"with --every", []string{"run", "--lease", "x", "--slots", "2", "--every", "1h", "--", "true"}, "--slots does not go with --every"},
		{"slot names too long", []string{"run", "--lease", long, "--slots", "12", "--", "true"}, "the slot lease names are too long"},
	} {
		t.Run(c.name, func(t *testing.T) {
			home, dir := t.TempDir(), t.TempDir()
			t.Setenv("HOME", home)
			t.Setenv("XDG_STATE_HOME", filepath.Join(home, "state"))
			t.Setenv(StoreEnv, "sqlite://"+filepath.Join(dir, "leases.db"))
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var out, errb bytes.Buffer
			code := Main(ctx, c.args, strings.NewReader(""), &out, &errb)
			msg := out.String() + errb.String()
			if code != ExitUsage || !strings.Contains(msg, c.want) {
				t.Errorf("exit %d, want %d saying %q; output:\n%s", code, ExitUsage, c.want, msg)
			}
			for _, d := range []string{home, dir} {
				if left := filesUnder(t, d); len(left) > 0 {
					t.Errorf("bad input created %v", left)
				}
			}
		})
	}
}
