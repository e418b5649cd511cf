package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/leasehold/leasehold/store"
)

type statusCmd struct {
	_ [0]func() // not comparable: spares the binary an equality function

	env      *Env
	fs       *flag.FlagSet
	store    storeFlag
	json     bool
	watch    bool
	interval time.Duration
}

func newStatusCmd(env *Env) Command {
	c := &statusCmd{env: env}
	c.fs = newFlagSet(env, "status", "[flags] [NAME...]", `
Shows the leases in a store: holder, fencing token, state (held, expired, free) and the
time left, as the store's clock judges it. Without names it lists every lease the store
knows (stores that can list them: sqlite, postgres); with names, just those.

Examples:
  leasehold status
  leasehold status --store postgres://app@db/app nightly-report
  leasehold status --json | jq '.[] | select(.state == "held")'
  leasehold status --watch`)
	c.store.register(c.fs)
	c.store.readOnly = true
	c.fs.BoolVar(&c.json, "json", false, "print JSON (an array; with --watch, one array per line)")
	c.fs.BoolVar(&c.watch, "watch", false, "print again every --interval until interrupted")
	c.fs.DurationVar(&c.interval, "interval", time.Second, "refresh interval for --watch")
	return c
}

func (c *statusCmd) Run(ctx context.Context, args []string) error {
	if err := parseFlags(c.fs, args); err != nil {
		return err
	}
	names := c.fs.Args()
	for _, n := range names {
		if err := validateLeaseName(n); err != nil {
			return usagef("lease name: %v", err)
		}
	}
	if c.interval <= 0 {
		return usagef("--interval %v must be positive", c.interval)
	}
	st, err := c.store.open(ctx, c.env)
	if err != nil {
		return err
	}
	defer closeStore(st)
	if len(names) == 0 {
		if _, ok := st.Store.(store.Lister); !ok {
			return usagef("store %s cannot list its leases: name them (leasehold status NAME...)", st.Name)
		}
	}
	tty := isTerminal(c.env.rawStdout)
	for first := true; ; first = false {
		recs, err := c.read(ctx, st, names)
		if err != nil {
			if !first && ctx.Err() != nil {
				return nil
			}
			if first && !errors.Is(err, store.ErrInvalid) {
				return &StoreError{URL: st.Name, Err: err}
			}
			return err
		}
		if c.watch && !c.json {
			if tty {
				fmt.Fprint(c.env.Stdout, "\x1b[H\x1b[2J")
			}
			fmt.Fprintf(c.env.Stdout, "%s  %s\n", time.Now().Format("15:04:05"), st.Name)
		}
		if c.json {
			views := make([]leaseView, 0, len(recs))
			for _, r := range recs {
				views = append(views, leaseJSON(r, r.Name))
			}
			b, _ := json.Marshal(views)
			fmt.Fprintln(c.env.Stdout, string(b))
		} else {
			printLeases(c.env.Stdout, recs)
		}
		if !c.watch {
			return nil
		}
		t := time.NewTimer(c.interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// read returns the named leases (a never-granted name shows as free, token
// 0), or every lease.
func (c *statusCmd) read(ctx context.Context, st *openedStore, names []string) ([]store.Record, error) {
	rctx, cancel := context.WithTimeout(ctx, c.store.timeout)
	defer cancel()
	if len(names) == 0 {
		return st.Store.(store.Lister).List(rctx)
	}
	var out []store.Record
	for _, n := range names {
		rec, err := st.Store.Get(rctx, n)
		switch {
		case errors.Is(err, store.ErrNotFound):
			rec = store.Record{Term: store.Term{Name: n}}
		case err != nil:
			return nil, err
		}
		out = append(out, rec)
	}
	return out, nil
}

func printLeases(w io.Writer, recs []store.Record) {
	if len(recs) == 0 {
		fmt.Fprintln(w, "no leases")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "LEASE\tSTATE\tHOLDER\tTOKEN\tLEFT\tTTL")
	for _, r := range recs {
		state, holder, token, left, ttl := "free", "-", "-", "-", "-"
		if r.Token > 0 {
			state = leaseState(r)
			token = fmt.Sprint(r.Token)
			ttl = r.TTL.String()
			if r.Holder != "" {
				holder = r.Holder
			}
			switch state {
			case "held":
				left = r.Remaining.Round(100 * time.Millisecond).String()
			case "expired":
				left = "expired " + (-r.Remaining).Round(100*time.Millisecond).String() + " ago"
			}
		} else {
			state = "never granted"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Name, state, holder, token, left, ttl)
	}
	tw.Flush()
}

func isTerminal(w any) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
