package cli

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/testenv"
)

// TestBadInputs runs the command on bad input, each case in a fresh home and
// state directory, with every SQLite URL pointing into a fresh directory.
// Each must exit with its code, say what was wrong (the message names the
// flag, parameter or value), and leave both directories empty: nothing
// created, so nothing changed and nothing held. Cases on a PostgreSQL or
// Redis server run when the server is there; they never get as far as a
// lease.
func TestBadInputs(t *testing.T) {
	const D = "DIR" // replaced by the case's own directory
	long := strings.Repeat("m", 2000)
	cases := []struct {
		name  string
		args  []string
		code  int
		want  string
		needs string // "pg", "redis": the server the case talks to
	}{
		{"jitter NaN", []string{"run", "--lease", "x", "--jitter", "NaN", "--", "true"}, ExitUsage, "--jitter NaN", ""},
		{"jitter Inf", []string{"run", "--lease", "x", "--jitter", "Inf", "--", "true"}, ExitUsage, "--jitter +Inf", ""},
		{"jitter negative", []string{"run", "--lease", "x", "--jitter", "-0.1", "--", "true"}, ExitUsage, "--jitter -0.1", ""},
		{"jitter above 1", []string{"run", "--lease", "x", "--jitter", "1.5", "--", "true"}, ExitUsage, "--jitter 1.5", ""},
		{"jitter not a number", []string{"run", "--lease", "x", "--jitter", "lots", "--", "true"}, ExitUsage, "--jitter", ""},
		{"lease 10ms", []string{"run", "--lease", "x", "--lease-duration", "10ms", "--", "true"}, ExitUsage, "--lease-duration 10ms is below", ""},
		{"lease 114 years", []string{"run", "--lease", "x", "--lease-duration", "1000000h", "--", "true"}, ExitUsage, "--lease-duration 1000000h0m0s is longer", ""},
		{"lease overflow", []string{"run", "--lease", "x", "--lease-duration", "2562047h", "--", "true"}, ExitUsage, "--lease-duration 2562047h0m0s is longer", ""},
		{"renew deadline overflow", []string{"run", "--lease", "x", "--renew-deadline", "2562047h", "--", "true"}, ExitUsage, "--renew-deadline 2562047h0m0s is longer", ""},
		{"retry period huge", []string{"run", "--lease", "x", "--retry-period", "100h", "--", "true"}, ExitUsage, "--retry-period 100h0m0s is longer", ""},
		{"lease zero", []string{"run", "--lease", "x", "--lease-duration", "0s", "--", "true"}, ExitUsage, "--lease-duration 0s must be positive", ""},
		{"lease negative", []string{"run", "--lease", "x", "--lease-duration", "-5s", "--", "true"}, ExitUsage, "--lease-duration -5s must be positive", ""},
		{"lease not a duration", []string{"run", "--lease", "x", "--lease-duration", "15", "--", "true"}, ExitUsage, "--lease-duration", ""},
		{"renew deadline above lease", []string{"run", "--lease", "x", "--renew-deadline", "20s", "--", "true"}, ExitUsage, "--renew-deadline 20s must be less than --lease-duration", ""},
		{"renew interval above deadline", []string{"run", "--lease", "x", "--renew-interval", "12s", "--", "true"}, ExitUsage, "--renew-interval 12s must be less than --renew-deadline", ""},
		{"retry period above deadline", []string{"run", "--lease", "x", "--retry-period", "12s", "--", "true"}, ExitUsage, "--retry-period 12s must be less than --renew-deadline", ""},
		{"term grace too long", []string{"run", "--lease", "x", "--term-grace", "10s", "--", "true"}, ExitUsage, "--term-grace", ""},
		{"kill margin too long", []string{"run", "--lease", "x", "--kill-margin", "10s", "--", "true"}, ExitUsage, "--kill-margin", ""},
		{"renew deadline zero", []string{"run", "--lease", "x", "--renew-deadline", "0s", "--", "true"}, ExitUsage, "--renew-deadline 0s must be positive", ""},
		{"connect timeout negative", []string{"run", "--lease", "x", "--connect-timeout", "-1s", "--", "true"}, ExitUsage, "--connect-timeout -1s must be positive", ""},
		{"connect timeout zero", []string{"status", "--connect-timeout", "0s"}, ExitUsage, "--connect-timeout 0s must be positive", ""},
		{"store empty", []string{"run", "--store", "", "--lease", "x", "--", "true"}, ExitUsage, "--store is empty", ""},
		{"store empty, status", []string{"status", "--store="}, ExitUsage, "--store is empty", ""},
		{"semicolon drops table", []string{"run", "--store", "sqlite://" + D + "/l.db?table=jobs;", "--lease", "x", "--", "true"}, ExitUsage, "holds a ';'", ""},
		{"semicolon drops sslmode", []string{"status", "--store", "postgres://postgres@127.0.0.1:1/test?sslmode=verify-full;x", "x"}, ExitUsage, "holds a ';'", ""},
		{"sqlite unknown parameter", []string{"run", "--store", "sqlite://" + D + "/l.db?tabel=jobs", "--lease", "x", "--", "true"}, ExitUsage, `unknown URL parameter "tabel"`, ""},
		{"sqlite reserved table", []string{"migrate", "--store", "sqlite://" + D + "/l.db?table=sqlite_leases"}, ExitUsage, "sqlite_ are reserved", ""},
		{"sqlite bad table", []string{"run", "--store", "sqlite://" + D + "/l.db?table=bad-name", "--lease", "x", "--", "true"}, ExitUsage, `table name "bad-name"`, ""},
		{"sqlite host", []string{"status", "--store", "sqlite://db.example/l.db", "x"}, ExitUsage, "names a host", ""},
		{"unknown scheme", []string{"run", "--store", "consul://h/db", "--lease", "x", "--", "true"}, ExitUsage, `unknown store scheme "consul"`, ""},
		{"etcd unknown parameter", []string{"status", "--store", "etcd://127.0.0.1:1/x?bogus=1", "x"}, ExitUsage, `unknown option "bogus"`, ""},
		{"kubernetes unknown parameter", []string{"status", "--store", "kubernetes://default?bogus=1", "x"}, ExitUsage, `unknown URL parameter "bogus"`, ""},
		{"kubernetes bad namespace", []string{"status", "--store", "kubernetes://Bad_NS", "x"}, ExitUsage, `namespace "Bad_NS"`, ""},
		{"redis database 99", []string{"run", "--store", "redis://127.0.0.1:6379/99", "--lease", "x", "--", "true"}, ExitUsage, "database 99 does not exist", "redis"},
		{"redis unknown parameter", []string{"status", "--store", "redis://127.0.0.1:6379/0?bogus=1", "x"}, ExitUsage, "bogus", "redis"},
		{"postgres unknown parameter", []string{"run", "--store", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable&bogus_param=1", "--lease", "x", "--", "true"}, ExitUsage, "bogus_param", "pg"},
		{"postgres reserved schema", []string{"migrate", "--store", "postgres://postgres@127.0.0.1:5432/test?schema=pg_leases"}, ExitUsage, "pg_ are reserved", "pg"},
		{"postgres bad table", []string{"migrate", "--store", "postgres://postgres@127.0.0.1:5432/test?table=Bad-Table"}, ExitUsage, `table name "Bad-Table"`, "pg"},
		{"lease non-ASCII", []string{"run", "--lease", "naïve", "--", "true"}, ExitUsage, `"ï" (U+00EF)`, ""},
		{"lease missing", []string{"run", "--", "true"}, ExitUsage, "--lease is required", ""},
		{"lease starts with slash", []string{"run", "--lease", "/abs", "--", "true"}, ExitUsage, `starts with '/'`, ""},
		{"lease too long", []string{"status", strings.Repeat("n", 200)}, ExitUsage, "lease name is 200 bytes", ""},
		{"no command", []string{"run", "--lease", "x"}, ExitUsage, "no command given", ""},
		{"restart delay negative", []string{"run", "--lease", "x", "--restart-delay", "-1s", "--", "true"}, ExitUsage, "--restart-delay -1s", ""},
		{"log format", []string{"run", "--lease", "x", "--log-format", "xml", "--", "true"}, ExitUsage, `--log-format "xml"`, ""},
		{"log level", []string{"run", "--lease", "x", "--log-level", "loud", "--", "true"}, ExitUsage, `--log-level "loud"`, ""},
		{"metadata too long", []string{"run", "--lease", "x", "--metadata", long, "--", "true"}, ExitUsage, "--metadata", ""},
		{"unknown flag", []string{"run", "--lease", "x", "--bogus", "--", "true"}, ExitUsage, "--bogus", ""},
		{"status missing sqlite file", []string{"status", "--store", "sqlite://" + D + "/typo.db", "x"}, ExitStoreUnavailable, "no SQLite store at", ""},
		{"history missing sqlite file", []string{"history", "--store", "sqlite://" + D + "/typo.db", "x"}, ExitStoreUnavailable, "no SQLite store at", ""},
		{"doctor missing sqlite file", []string{"doctor", "--store", "sqlite://" + D + "/typo.db"}, ExitStoreUnavailable, "no SQLite store at", ""},
		{"release missing sqlite file", []string{"release", "--force", "--store", "sqlite://" + D + "/typo.db", "x"}, ExitStoreUnavailable, "no SQLite store at", ""},
		{"doctor without any store", []string{"doctor"}, ExitStoreUnavailable, "no default store yet", ""},
		{"status without any store", []string{"status"}, ExitStoreUnavailable, "no default store yet", ""},
		{"status interval", []string{"status", "--interval", "0s", "x"}, ExitUsage, "--interval 0s", ""},
		{"history limit", []string{"history", "--limit", "0", "x"}, ExitUsage, "--limit 0", ""},
		{"history two names", []string{"history", "a", "b"}, ExitUsage, "exactly one lease NAME", ""},
		{"release without force", []string{"release", "x"}, ExitUsage, "--force is required", ""},
		{"doctor samples", []string{"doctor", "--samples", "0"}, ExitUsage, "--samples 0", ""},
		{"doctor lease 10ms", []string{"doctor", "--lease-duration", "10ms"}, ExitUsage, "--lease-duration 10ms", ""},
		{"migrate arguments", []string{"migrate", "extra"}, ExitUsage, "takes no arguments", ""},
		{"fair with slots", []string{"run", "--lease", "x", "--fair", "--slots", "2", "--", "true"}, ExitUsage, "--fair does not go with --slots", ""},
		{"fair with every", []string{"run", "--lease", "x", "--fair", "--every", "1h", "--", "true"}, ExitUsage, "--fair does not go with --every", ""},
		{"verify fair with slots", []string{"verify", "--fair", "--slots", "2"}, ExitUsage, "--fair does not go with --slots", ""},
		{"verify fair with every", []string{"verify", "--fair", "--every", "2s"}, ExitUsage, "--fair does not go with --every", ""},
		{"unknown command", []string{"rn", "--lease", "x"}, ExitUsage, `unknown command "rn"`, ""},
	}
	if len(cases) < 40 {
		t.Fatalf("only %d cases", len(cases))
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			switch c.needs {
			case "pg":
				requireTCP(t, "PostgreSQL", "127.0.0.1:5432")
			case "redis":
				requireTCP(t, "Redis", "127.0.0.1:6379")
			}
			home, dir := t.TempDir(), t.TempDir()
			t.Setenv("HOME", home)
			t.Setenv("XDG_STATE_HOME", filepath.Join(home, "state"))
			t.Setenv(StoreEnv, "")
			args := make([]string, len(c.args))
			for i, a := range c.args {
				args[i] = strings.ReplaceAll(a, D, dir)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var out, errb bytes.Buffer
			code := Main(ctx, args, strings.NewReader(""), &out, &errb)
			msg := out.String() + errb.String()
			if code != c.code {
				t.Errorf("exit %d, want %d; output:\n%s", code, c.code, msg)
			}
			if !strings.Contains(msg, c.want) {
				t.Errorf("output does not say %q:\n%s", c.want, msg)
			}
			for _, d := range []string{home, dir} {
				if left := filesUnder(t, d); len(left) > 0 {
					t.Errorf("bad input created %v", left)
				}
			}
		})
	}
}

func requireTCP(t *testing.T, what, addr string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		testenv.Missing(t, what+" at "+addr, "start it on loopback")
		return
	}
	c.Close()
}

// filesUnder lists everything under dir.
func filesUnder(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && p != dir {
			out = append(out, p)
		}
		return nil
	})
	return out
}
