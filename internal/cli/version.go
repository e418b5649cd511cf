package cli

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"
)

// versionCmd is `leasehold version` (also `leasehold --version`).
type versionCmd struct{ env *Env }

func newVersionCmd(env *Env) Command { return &versionCmd{env: env} }

func (v *versionCmd) Run(_ context.Context, args []string) error {
	fs := newFlagSet(v.env, "version", "", `
Prints the module version of this build ("devel" when built from a checkout), the
commit it was built from with its time and whether the tree had uncommitted changes
(when go build could read them from git), and the Go toolchain.

Example:
  leasehold --version`)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("takes no arguments")
	}
	bi, ok := debug.ReadBuildInfo()
	writeVersion(v.env.Stdout, bi, ok)
	return nil
}

// writeVersion describes a build from its build info: the module version
// (set by `go install module@version`; "(devel)" when built from a
// checkout), then the version-control revision, its time and whether the
// tree had uncommitted changes (stamped by `go build` in a checkout), then
// the Go toolchain and platform.
func writeVersion(w io.Writer, bi *debug.BuildInfo, ok bool) {
	if !ok || bi == nil {
		fmt.Fprintf(w, "leasehold: no build information in this binary\n%s %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
		return
	}
	version := bi.Main.Version
	switch version {
	case "", "(devel)":
		version = "devel (built from a checkout, not from a module version)"
	}
	fmt.Fprintf(w, "leasehold %s\n", version)
	if bi.Main.Path != "" {
		fmt.Fprintf(w, "module    %s\n", bi.Main.Path)
	}
	vcs := map[string]string{}
	for _, s := range bi.Settings {
		if strings.HasPrefix(s.Key, "vcs") {
			vcs[s.Key] = s.Value
		}
	}
	switch rev := vcs["vcs.revision"]; {
	case rev != "":
		line := rev
		if t := vcs["vcs.time"]; t != "" {
			line += " (" + t + ")"
		}
		if vcs["vcs.modified"] == "true" {
			line += ", with uncommitted changes"
		}
		fmt.Fprintf(w, "commit    %s\n", line)
	case bi.Main.Version == "" || bi.Main.Version == "(devel)":
		fmt.Fprintf(w, "commit    unknown (built outside a repository, or with -buildvcs=false)\n")
	}
	goVersion := bi.GoVersion
	if goVersion == "" {
		goVersion = runtime.Version()
	}
	fmt.Fprintf(w, "go        %s %s/%s\n", goVersion, runtime.GOOS, runtime.GOARCH)
}
