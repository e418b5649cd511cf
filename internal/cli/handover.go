package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store"
)

type handoverCmd struct {
	_ [0]func() // not comparable: spares the binary an equality function

	env       *Env
	fs        *flag.FlagSet
	store     storeFlag
	lease     string
	to        string
	preferFor time.Duration
	timeout   time.Duration
}

const handoverAbout = `
Asks the holder of the lease NAME to step down gracefully: the holder (a ` + "`leasehold run`" + ` or
a program's Elector) stops its work as on shutdown (run sends its command SIGTERM and waits
for it), and only then ends its term. With --to, the named successor is preferred: on a
store that can transfer a term in one write (every built-in store), the lease is reserved for it for --prefer-for,
judged by the store's clock, and no other node can take it meanwhile; the successor takes
over at once. Without --to, the holder releases and stays out of the contest for
--prefer-for, so that another node takes over.

The successor is named by its full holder identity (--identity plus its random suffix, as
its log's "contending" line and ` + "`leasehold status`" + ` show it).

This is not ` + "`release --force`" + `, which evicts a holder that may still be working: here the
holder ends its own term, after its work returned. A holder that does not answer within
--timeout (dead, or not a leasehold Elector) is left alone: its term expires as usual, and
the request expires on its own. Exit 0 when the term ended; 1 when it did not in time or
nobody holds the lease.

Example:
  leasehold handover --store postgres://app@db/app --lease nightly-report --to node-b-1f2e3d4c`

func newHandoverCmd(env *Env) Command {
	c := &handoverCmd{env: env}
	c.fs = newFlagSet(env, "handover", "--lease NAME [--to IDENTITY] [flags]", handoverAbout)
	c.store.register(c.fs)
	c.store.readOnly = true // a mistyped path must not become a new, empty store
	c.fs.StringVar(&c.lease, "lease", "", "the lease `NAME` whose holder is asked to step down (required)")
	c.fs.StringVar(&c.to, "to", "", "the successor's holder `IDENTITY` (optional)")
	c.fs.DurationVar(&c.preferFor, "prefer-for", leasehold.DefaultHandoverPreferFor, "how long the successor is preferred, and the holder stays out of the contest")
	c.fs.DurationVar(&c.timeout, "timeout", leasehold.DefaultHandoverTimeout, "how long the holder has to step down")
	return c
}

func (c *handoverCmd) Run(ctx context.Context, args []string) error {
	if err := parseFlags(c.fs, args); err != nil {
		return err
	}
	switch {
	case c.fs.NArg() != 0:
		return usagef("unexpected arguments %q: leasehold handover --lease NAME [--to IDENTITY]", c.fs.Args())
	case c.lease == "":
		return usagef("--lease is required")
	case c.preferFor <= 0 || c.preferFor > maxFlagDuration:
		return usagef("--prefer-for %v must be positive and at most %v", c.preferFor, maxFlagDuration)
	case c.timeout <= 0 || c.timeout > maxFlagDuration:
		return usagef("--timeout %v must be positive and at most %v", c.timeout, maxFlagDuration)
	}
	if err := validateLeaseName(c.lease); err != nil {
		return usagef("--lease: %v", err)
	}
	if _, err := leasehold.HandoverRequestName(c.lease); err != nil {
		return usagef("--lease: %v", err)
	}
	if c.to != "" {
		if err := store.ValidateHolder(c.to); err != nil {
			return usagef("--to: %v", err)
		}
	}
	st, err := c.store.open(ctx, c.env)
	if err != nil {
		return err
	}
	defer closeStore(st)
	res, err := leasehold.Handover(ctx, st.Store, c.lease, leasehold.HandoverOptions{To: c.to, PreferFor: c.preferFor, Timeout: c.timeout})
	switch {
	case errors.Is(err, store.ErrNotFound):
		return fmt.Errorf("no lease named %s in %s", c.lease, st.Name)
	case errors.Is(err, store.ErrNotHeld):
		return fmt.Errorf("nobody holds %s (last token %d): nothing to hand over", c.lease, res.Next.Token)
	case errors.Is(err, leasehold.ErrInvalidConfig):
		return usagef("%v", err)
	case errors.Is(err, leasehold.ErrHandoverTimeout):
		return fmt.Errorf("%s (token %d) did not step down within %v; its term expires on its own: %w", res.From.Holder, res.From.Token, c.timeout, err)
	case errors.Is(err, leasehold.ErrHandoverPending):
		return err
	case err != nil:
		return &StoreError{URL: st.Name, Err: err}
	}
	fmt.Fprintf(c.env.Stdout, "%s: %s (token %d) stepped down after %v\n", c.lease, res.From.Holder, res.From.Token, res.Ended.Round(time.Millisecond))
	fmt.Fprintln(c.env.Stdout, handoverOutcome(c.lease, c.to, c.preferFor, res))
	return nil
}

// handoverOutcome says who has lease after the holder stepped down.
func handoverOutcome(lease, to string, preferFor time.Duration, res leasehold.HandoverResult) string {
	switch {
	case res.TookOver:
		return fmt.Sprintf("%s: %s took over with token %d after %v", lease, res.Next.Holder, res.Next.Token, res.TookOverAfter.Round(time.Millisecond))
	case to != "" && res.Next.Live() && !leasehold.IsReservation(res.Next):
		// The reservation ended (at the end of the window, or early if
		// the store lost it) and another node took the lease: name it.
		return fmt.Sprintf("%s: %s did not take over within %v; %s took over with token %d", lease, to, preferFor, res.Next.Holder, res.Next.Token)
	case to != "":
		return fmt.Sprintf("%s: %s did not take over within %v; its reservation expires on its own, then any node may take the lease", lease, to, preferFor)
	case res.Next.Live():
		return fmt.Sprintf("%s: now held by %s with token %d", lease, res.Next.Holder, res.Next.Token)
	default:
		return fmt.Sprintf("%s: free (last token %d)", lease, res.Next.Token)
	}
}
