package cli

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

type serveCmd struct {
	env      *Env
	fs       *flag.FlagSet
	store    storeFlag
	httpAddr string
	leases   leaseNames
	interval time.Duration
	history  int
}

// leaseNames is a repeatable --lease flag.
type leaseNames []string

func (l *leaseNames) String() string { return strings.Join(*l, ",") }
func (l *leaseNames) Set(v string) error {
	for _, n := range strings.Split(v, ",") {
		if err := validateLeaseName(n); err != nil {
			return err
		}
		*l = append(*l, n)
	}
	return nil
}

func newServeCmd(env *Env) Command {
	c := &serveCmd{env: env}
	c.fs = newFlagSet(env, "serve", "--http ADDR [flags]", `
Serves a status page of a store's leases on ADDR: every lease with its holder, fencing
token, time left and metadata, updated live as the store changes (pushed to the page as
server-sent events; stores that watch push changes at once, the others are read every
--interval), and each lease's terms as a timeline: who held which token when, and how each
term ended (stores that keep a history: sqlite, postgres, mysql). The page needs no
network but this server, and works with a keyboard and a screen reader.

Without --lease it shows every lease the store knows (stores that can list them: all
the built-in ones); with --lease, just those. The page reads and never writes.

The same page is served by 'leasehold run --http ADDR', next to /healthz and /metrics.

Examples:
  leasehold serve --http 127.0.0.1:8080
  leasehold serve --http :8080 --store postgres://app@db/app --lease nightly-report`)
	c.store.register(c.fs)
	c.store.readOnly = true
	c.fs.StringVar(&c.httpAddr, "http", "", "serve the page on `ADDR` (such as 127.0.0.1:8080; required)")
	c.fs.Var(&c.leases, "lease", "show only the lease `NAME` (repeat, or separate with commas)")
	c.fs.DurationVar(&c.interval, "interval", time.Second, "read the leases at least this often")
	c.fs.IntVar(&c.history, "history", 50, "show at most this many changes of a lease on its timeline")
	return c
}

func (c *serveCmd) Run(ctx context.Context, args []string) error {
	if err := parseFlags(c.fs, args); err != nil {
		return err
	}
	switch {
	case c.fs.NArg() > 0:
		return usagef("unexpected argument %q (lease names go in --lease)", c.fs.Arg(0))
	case c.httpAddr == "":
		return usagef("--http is required: the address to serve the page on, such as 127.0.0.1:8080")
	case c.interval <= 0:
		return usagef("--interval %v must be positive", c.interval)
	case c.history < 1:
		return usagef("--history %d must be at least 1", c.history)
	}
	st, err := c.store.open(ctx, c.env)
	if err != nil {
		return err
	}
	defer closeStore(st)
	page, err := newStatusPage(st.Store, st.Name, c.leases, c.interval, c.store.timeout, c.history)
	if err != nil {
		return err
	}
	// The first read tells an unreachable store apart from a page to serve.
	if _, err := page.read(ctx); err != nil {
		return &StoreError{URL: st.Name, Err: err}
	}
	ln, err := net.Listen("tcp", c.httpAddr)
	if err != nil {
		return usagef("--http %s: %v", c.httpAddr, err)
	}
	mux := http.NewServeMux()
	page.routes(mux)
	stop := servePage(ctx, page, ln, scrubHandler(c.env.secrets, mux))
	defer stop()
	fmt.Fprintf(c.env.Stderr, "leasehold serve: the status page of %s is on http://%s/\n", st.Name, ln.Addr())
	<-ctx.Done()
	return nil
}

// servePage runs page's refresher and an HTTP server of h on ln; stop ends
// both and waits for them.
func servePage(ctx context.Context, page *statusPage, ln net.Listener, h http.Handler) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		page.run(ctx)
	}()
	go func() {
		defer wg.Done()
		srv.Serve(ln)
	}()
	return func() {
		cancel() // ends the refresher, which ends the event streams
		sctx, scancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer scancel()
		srv.Shutdown(sctx)
		wg.Wait()
	}
}
