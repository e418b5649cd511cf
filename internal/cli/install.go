package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

type installCmd struct {
	env *Env
	fs  *flag.FlagSet
}

func newInstallCmd(env *Env) Command {
	c := &installCmd{env: env}
	c.fs = newFlagSet(env, "install", "DIR", `
Copies this leasehold binary to DIR/leasehold (mode 0755, replacing a file of that name
atomically). It is the init container's command in deploy/kubernetes/deployment.yaml: the
leasehold image is FROM scratch and has no cp, so the binary copies itself into a volume
the application's container shares, and 'leasehold run' then runs there, supervising the
application's command.

Example:
  leasehold install /leasehold-bin`)
	return c
}

func (c *installCmd) Run(ctx context.Context, args []string) error {
	if err := parseFlags(c.fs, args); err != nil {
		return err
	}
	if c.fs.NArg() != 1 {
		return usagef("want exactly one DIR, got %d arguments", c.fs.NArg())
	}
	dir := c.fs.Arg(0)
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return usagef("DIR %s is not a directory", dir)
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("cannot find this leasehold binary: %w", err)
	}
	src, err := os.Open(exe)
	if err != nil {
		return fmt.Errorf("cannot read this leasehold binary: %w", err)
	}
	defer src.Close()
	tmp, err := os.CreateTemp(dir, ".leasehold-*")
	if err != nil {
		return fmt.Errorf("cannot write to %s: %w", dir, err)
	}
	defer os.Remove(tmp.Name()) // after a successful rename, there is nothing to remove
	if _, err := io.Copy(tmp, src); err != nil {
		tmp.Close()
		return fmt.Errorf("copying to %s: %w", dir, err)
	}
	if err := tmp.Chmod(0o755); err != nil {
		tmp.Close()
		return fmt.Errorf("copying to %s: %w", dir, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("copying to %s: %w", dir, err)
	}
	dst := filepath.Join(dir, "leasehold")
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return fmt.Errorf("copying to %s: %w", dir, err)
	}
	fmt.Fprintf(c.env.Stderr, "leasehold install: installed %s\n", dst)
	return nil
}
