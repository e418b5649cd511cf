//go:build unix

package cli

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/leasehold/leasehold/internal/demo"
)

const demoWorkerCommand = demo.WorkerCommand

type demoCmd struct {
	_ [0]func() // not comparable: spares the binary an equality function

	env  *Env
	fs   *flag.FlagSet
	dir  string
	keep bool
}

func newDemoCmd(env *Env) Command {
	c := &demoCmd{env: env}
	c.fs = newFlagSet(env, "demo", "[flags]", `
Shows leasehold at work on this machine, with no server: three `+"`leasehold run`"+` processes
share one SQLite file in a temporary folder, and each runs a small worker that writes to a
fenced register (a SQLite table that refuses an older term: a token lower than the last
it accepted, or the same token from another holder).
One node leads; the demo freezes it with SIGSTOP past its lease; a standby takes over
with the next token; the frozen worker wakes and writes with its old token, and the
register refuses it. Every line printed is read from the store, the register or the
nodes' logs, and the timeline is printed in time order at the end. It takes about
five seconds.

Example:
  leasehold demo
  go run ./cmd/leasehold demo`)
	c.fs.StringVar(&c.dir, "dir", "", "put the files (lease store, register, node logs) in `DIR` and keep them")
	c.fs.BoolVar(&c.keep, "keep", false, "keep the temporary folder and print its path")
	return c
}

func (c *demoCmd) Run(ctx context.Context, args []string) error {
	if err := parseFlags(c.fs, args); err != nil {
		return err
	}
	if c.fs.NArg() != 0 {
		return usagef("takes no arguments, got %q", c.fs.Args())
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("cannot find the leasehold binary to start the nodes: %w", err)
	}
	return demo.Run(ctx, demo.Config{Exe: exe, Out: c.env.Stdout, Dir: c.dir, Keep: c.keep})
}

// demoWorkerCmd is the demo's worker, run by each node's `leasehold run`.
type demoWorkerCmd struct {
	_ [0]func() // not comparable: spares the binary an equality function

	env      *Env
	fs       *flag.FlagSet
	register string
	node     string
	every    time.Duration
}

func newDemoWorkerCmd(env *Env) Command {
	c := &demoWorkerCmd{env: env}
	c.fs = newFlagSet(env, demoWorkerCommand, "--register FILE --node NAME", "Internal: the worker of `leasehold demo`.")
	c.fs.StringVar(&c.register, "register", "", "the register's SQLite file")
	c.fs.StringVar(&c.node, "node", "", "this node's name")
	c.fs.DurationVar(&c.every, "every", 200*time.Millisecond, "write interval")
	return c
}

func (c *demoWorkerCmd) Run(ctx context.Context, args []string) error {
	if err := parseFlags(c.fs, args); err != nil {
		return err
	}
	if c.register == "" || c.node == "" {
		return usagef("needs --register and --node")
	}
	token, err := strconv.ParseInt(c.env.Getenv(EnvToken), 10, 64)
	if err != nil {
		return usagef("no fencing token in $%s: run it under leasehold run", EnvToken)
	}
	holder := c.env.Getenv(EnvHolder)
	if holder == "" {
		return usagef("no holder identity in $%s: run it under leasehold run", EnvHolder)
	}
	err = demo.Worker(ctx, demo.WorkerConfig{Register: c.register, Node: c.node, Holder: holder, Token: token, Every: c.every, Stderr: c.env.Stderr})
	if err == demo.ErrFencedOut {
		return &ExitError{Code: 3}
	}
	return err
}
