// Command leasehold runs a command on exactly one node at a time, while that
// node holds a lease, and hands it a fencing token. See internal/cli for the
// subcommands, or run `leasehold --help`.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/leasehold/leasehold/internal/cli"
)

func main() {
	// The first SIGINT or SIGTERM cancels the context, with the signal as
	// its cause: `run` forwards that same signal to its command. Later ones
	// are caught too (so they do not kill leasehold before its command is
	// stopped), and ignored: the command gets SIGKILL after --term-grace.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	ctx, cancel := context.WithCancelCause(context.Background())
	go func() {
		for s := range sigs {
			cancel(&cli.SignalError{Signal: s})
		}
	}()
	os.Exit(cli.Main(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
