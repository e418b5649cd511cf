package cli

import (
	"bytes"
	"context"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

// TestVersion: what --version says for a released module, a checkout with
// and without version-control stamps, and a binary without build info; and
// that --version, -version and `version` all print it.
func TestVersion(t *testing.T) {
	mod := debug.Module{Path: "github.com/leasehold/leasehold"}
	vcs := []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"}, {Key: "vcs.time", Value: "2026-12-02T18:00:00Z"}, {Key: "vcs.modified", Value: "true"}}
	for _, c := range []struct {
		name string
		bi   *debug.BuildInfo
		ok   bool
		want []string
		not  []string
	}{
		{"released", &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: mod.Path, Version: "v1.2.3"}}, true,
			[]string{"leasehold v1.2.3\n", "module    github.com/leasehold/leasehold\n", "go        go1.26.0 "}, []string{"commit", "devel"}},
		{"checkout with vcs", &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: mod.Path, Version: "(devel)"}, Settings: vcs}, true,
			[]string{"leasehold devel (built from a checkout", "commit    0123456789abcdef0123456789abcdef01234567 (2026-12-02T18:00:00Z), with uncommitted changes\n"}, []string{"(devel)"}},
		{"pseudo-version, clean", &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: mod.Path, Version: "v0.0.0-20261202180000-0123456789ab"}, Settings: vcs[:3]}, true,
			[]string{"leasehold v0.0.0-20261202180000-0123456789ab\n", "commit    0123456789abcdef0123456789abcdef01234567 (2026-12-02T18:00:00Z)\n"}, []string{"uncommitted"}},
		{"checkout without vcs", &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: mod.Path, Version: "(devel)"}}, true,
			[]string{"leasehold devel", "commit    unknown (built outside a repository, or with -buildvcs=false)"}, nil},
		{"no build info", nil, false, []string{"no build information", runtime.Version()}, nil},
	} {
		var b bytes.Buffer
		writeVersion(&b, c.bi, c.ok)
		for _, w := range c.want {
			if !strings.Contains(b.String(), w) {
				t.Errorf("%s: lacks %q:\n%s", c.name, w, b.String())
			}
		}
		for _, n := range c.not {
			if strings.Contains(b.String(), n) {
				t.Errorf("%s: says %q:\n%s", c.name, n, b.String())
			}
		}
	}

	for _, args := range [][]string{{"--version"}, {"-version"}, {"version"}} {
		var out, errb bytes.Buffer
		if code := Main(context.Background(), args, strings.NewReader(""), &out, &errb); code != ExitOK || !strings.HasPrefix(out.String(), "leasehold ") || !strings.Contains(out.String(), "go        go1.") {
			t.Errorf("%v: exit %d\n%s%s", args, code, out.String(), errb.String())
		}
	}
	var out, errb bytes.Buffer
	if code := Main(context.Background(), []string{"--version", "extra"}, strings.NewReader(""), &out, &errb); code != ExitUsage || !strings.Contains(errb.String(), "takes no arguments") {
		t.Errorf("--version extra: exit %d\n%s%s", code, out.String(), errb.String())
	}
}
