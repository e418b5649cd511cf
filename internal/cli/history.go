package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/leasehold/leasehold/store"
)

type historyCmd struct {
	_ [0]func() // not comparable: spares the binary an equality function

	env   *Env
	fs    *flag.FlagSet
	store storeFlag
	limit int
	json  bool
}

func newHistoryCmd(env *Env) Command {
	c := &historyCmd{env: env}
	c.fs = newFlagSet(env, "history", "[flags] NAME", `
Shows the most recent changes of a lease, newest first: each grant (acquired, or
expired-takeover when a new holder took over an expired term) and each end (released,
force-released), with the holder, the fencing token, and the store's time of the change.
Stores that keep a history: sqlite, postgres (those that implement store.Historian).

Example:
  leasehold history --limit 5 nightly-report`)
	c.store.register(c.fs)
	c.store.readOnly = true
	c.fs.IntVar(&c.limit, "limit", 20, "show at most this many changes")
	c.fs.BoolVar(&c.json, "json", false, "print JSON")
	return c
}

type historyView struct {
	_ [0]func() // not comparable: spares the binary an equality function

	At       time.Time `json:"at"`
	Event    string    `json:"event"`
	Holder   string    `json:"holder"`
	Token    int64     `json:"token"`
	Metadata string    `json:"metadata,omitempty"`
}

func (c *historyCmd) Run(ctx context.Context, args []string) error {
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
	if c.limit < 1 {
		return usagef("--limit %d must be at least 1", c.limit)
	}
	st, err := c.store.open(ctx, c.env)
	if err != nil {
		return err
	}
	defer closeStore(st)
	h, ok := st.Store.(store.Historian)
	if !ok {
		return fmt.Errorf("store %s keeps no history of its leases", st.Name)
	}
	hctx, cancel := context.WithTimeout(ctx, c.store.timeout)
	defer cancel()
	entries, err := h.History(hctx, name, c.limit)
	if err != nil {
		return &StoreError{URL: st.Name, Err: err}
	}
	if c.json {
		views := make([]historyView, 0, len(entries))
		for _, e := range entries {
			views = append(views, historyView{At: e.At, Event: e.Event, Holder: e.Holder, Token: e.Token, Metadata: e.Metadata})
		}
		b, _ := json.Marshal(views)
		fmt.Fprintln(c.env.Stdout, string(b))
		return nil
	}
	if len(entries) == 0 {
		fmt.Fprintf(c.env.Stdout, "no history for %s\n", name)
		return nil
	}
	tw := tabwriter.NewWriter(c.env.Stdout, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "AT\tEVENT\tHOLDER\tTOKEN")
	for _, e := range entries {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\n", e.At.Local().Format("2006-01-02 15:04:05.000"), e.Event, e.Holder, e.Token)
	}
	return tw.Flush()
}
