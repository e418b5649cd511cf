package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"

	"github.com/leasehold/leasehold/store"
)

type releaseCmd struct {
	_ [0]func() // not comparable: spares the binary an equality function

	env   *Env
	fs    *flag.FlagSet
	store storeFlag
	force bool
}

func newReleaseCmd(env *Env) Command {
	c := &releaseCmd{env: env}
	c.fs = newFlagSet(env, "release", "--force [flags] NAME", `
Ends the live term of a lease, whoever holds it: for an operator whose holder is stuck.
The token counter is kept, so the next grant still gets a higher token, and the evicted
holder's next renewal is refused: it stops its work at the latest at its safeUntil.
Until then it may still act, which is why writes must carry the token and the resource
must refuse stale ones. --force is required, as a reminder.

Example:
  leasehold release --force nightly-report`)
	c.store.register(c.fs)
	c.store.readOnly = true // a mistyped path must not become a new, empty store
	c.fs.BoolVar(&c.force, "force", false, "required: yes, evict whoever holds the lease")
	return c
}

func (c *releaseCmd) Run(ctx context.Context, args []string) error {
	if err := parseFlags(c.fs, args); err != nil {
		return err
	}
	if c.fs.NArg() != 1 {
		return usagef("want exactly one lease NAME, got %d arguments", c.fs.NArg())
	}
	name := c.fs.Arg(0)
	if err := validateLeaseName(name); err != nil {
		return usagef("lease name: %v", err)
	}
	if !c.force {
		return usagef("--force is required: release evicts whoever holds %s", name)
	}
	st, err := c.store.open(ctx, c.env)
	if err != nil {
		return err
	}
	defer closeStore(st)
	fr, ok := st.Store.(store.ForceReleaser)
	if !ok {
		return fmt.Errorf("store %s cannot force-release a lease", st.Name)
	}
	rctx, cancel := context.WithTimeout(ctx, c.store.timeout)
	defer cancel()
	rec, err := fr.ForceRelease(rctx, name)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return fmt.Errorf("no lease named %s in %s", name, st.Name)
	case errors.Is(err, store.ErrNotHeld):
		fmt.Fprintf(c.env.Stdout, "%s was not held (last token %d): nothing to release\n", name, rec.Token)
		return nil
	case err != nil:
		return &StoreError{URL: st.Name, Err: err}
	}
	fmt.Fprintf(c.env.Stdout, "released %s: evicted %s (token %d, %v were left); the next grant gets a higher token\n",
		name, rec.Holder, rec.Token, rec.Remaining.Round(1e6))
	return nil
}
