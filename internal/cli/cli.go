// Package cli is the leasehold command: one small type per subcommand, each
// with its own flag set, dispatched by Main. cmd/leasehold's main only builds
// the context (cancelled, with a *SignalError cause, on SIGINT or SIGTERM)
// and exits with the code Main returns.
//
// Exit codes: 0 success; 1 failure; 2 usage error (the message names the bad
// flag or argument); 3 `run --stop-on-loss` lost its lease; 69 the store
// cannot be reached (the message names it, password redacted); 126/127 the
// command given to `run` cannot be executed / was not found. `run` otherwise
// exits with its command's exit code (128+N when the command died of signal N).
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"
)

// Exit codes of the leasehold command.
const (
	ExitOK               = 0
	ExitFailure          = 1
	ExitUsage            = 2
	ExitLeaseLost        = 3
	ExitStoreUnavailable = 69 // EX_UNAVAILABLE in sysexits.h
	ExitCannotExecute    = 126
	ExitNotFound         = 127
)

// SignalError is the cause main gives the context when a signal arrives, so
// that `run` can forward that same signal to its command.
type SignalError struct{ Signal os.Signal }

func (e *SignalError) Error() string { return "leasehold: received " + e.Signal.String() }

// Is makes a SignalError match context.Canceled: the context was cancelled on
// purpose, and leasehold.LossReason reports it as "shutdown".
func (e *SignalError) Is(target error) bool { return target == context.Canceled }

// signalNumber is the number of a SignalError's signal (SIGTERM if unknown).
func signalNumber(s os.Signal) syscall.Signal {
	if n, ok := s.(syscall.Signal); ok {
		return n
	}
	return syscall.SIGTERM
}

// UsageError is a bad flag or argument: exit code 2.
type UsageError struct{ Msg string }

func (e *UsageError) Error() string { return e.Msg }

func usagef(format string, args ...any) error { return &UsageError{Msg: fmt.Sprintf(format, args...)} }

// StoreError is a store that cannot be opened or reached: exit code 69. URL
// is already redacted.
type StoreError struct {
	_ [0]func() // not comparable: spares the binary an equality function

	URL string
	Err error
}

func (e *StoreError) Error() string {
	var wr *writeRefusedError
	if errors.As(e.Err, &wr) {
		return wr.Error()
	}
	return fmt.Sprintf("store %s is unavailable: %v", e.URL, e.Err)
}
func (e *StoreError) Unwrap() error { return e.Err }

// ExitError carries an exit code chosen by a command (such as the exit code
// of `run`'s child), with an optional message.
type ExitError struct {
	Code int
	Msg  string
}

func (e *ExitError) Error() string {
	if e.Msg != "" {
		return e.Msg
	}
	return fmt.Sprintf("exit status %d", e.Code)
}

// Env is what a command may use of the outside world.
type Env struct {
	Stdin io.Reader
	// Stdout and Stderr are for leasehold's own messages: Main makes them
	// scrub the secrets of every store URL the command opened.
	Stdout, Stderr io.Writer
	Getenv         func(string) string
	// rawStdout and rawStderr are the unscrubbed streams, handed to `run`'s
	// command as they are (so that it keeps its terminal).
	rawStdout, rawStderr io.Writer
	secrets              *secretSet
}

// newEnv makes the Env of one command.
func newEnv(stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) *Env {
	sec := &secretSet{}
	return &Env{
		Stdin:  stdin,
		Stdout: &scrubWriter{w: stdout, s: sec}, Stderr: &scrubWriter{w: stderr, s: sec},
		Getenv:    getenv,
		rawStdout: stdout, rawStderr: stderr,
		secrets: sec,
	}
}

// Command is one subcommand. Run gets the arguments after the command's name.
type Command interface {
	Run(ctx context.Context, args []string) error
}

// commandInfo registers a subcommand.
type commandInfo struct {
	name    string
	summary string
	hidden  bool // internal helpers, not listed in help
	new     func(env *Env) Command
}

// commands is the table of subcommands. A new subcommand (such as
// `leasehold verify`, the chaos harness) adds one line here and its own file.
var commands = []commandInfo{
	{name: "run", summary: "run a command on exactly one node at a time, while this node holds a lease", new: newRunCmd},
	{name: "status", summary: "show the leases in a store: holder, token, time left", new: newStatusCmd},
	{name: "history", summary: "show the recent grants and releases of a lease", new: newHistoryCmd},
	{name: "serve", summary: "serve a live status page of the leases and their terms' timeline (serve --http ADDR)", new: newServeCmd},
	{name: "release", summary: "end a lease's live term, whoever holds it (release --force NAME)", new: newReleaseCmd},
	{name: "handover", summary: "ask a lease's holder to step down gracefully, preferring a successor", new: newHandoverCmd},
	{name: "migrate", summary: "create the lease table of a SQL store", new: newMigrateCmd},
	{name: "doctor", summary: "check a store and timings: round trip, failover time, safety margin", new: newDoctorCmd},
	{name: "demo", summary: "see leader election, takeover and fencing on three local processes", new: newDemoCmd},
	{name: watchdogCommand, hidden: true, new: newWatchdogCmd},
	{name: demoWorkerCommand, hidden: true, new: newDemoWorkerCmd},
	{name: "verify", summary: "prove on a store that no stale write is accepted: real processes, real faults, a checked history", new: newVerifyCmd},
	{name: chaosNodeCommand, hidden: true, new: newChaosNodeCmd},
	{name: "install", summary: "copy this binary into DIR (an init container's command: the image has no cp)", new: newInstallCmd},
	{name: "version", summary: "print the version and commit of this build (also --version)", new: newVersionCmd},
}

func lookup(name string) (commandInfo, bool) {
	for _, c := range commands {
		if c.name == name {
			return c, true
		}
	}
	return commandInfo{}, false
}

// Main runs the leasehold command with args (without the program name) and
// returns its exit code.
func Main(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	env := newEnv(stdin, stdout, stderr, os.Getenv)
	stdout, stderr = env.Stdout, env.Stderr
	if len(args) == 0 {
		topUsage(stderr)
		return ExitUsage
	}
	name := args[0]
	switch name {
	case "-h", "-help", "--help":
		topUsage(stdout)
		return ExitOK
	case "-version", "--version":
		name = "version"
		args = append([]string{name}, args[1:]...)
	case "help":
		if len(args) > 1 {
			if c, ok := lookup(args[1]); ok && !c.hidden {
				return exitCode(stderr, c.name, c.new(env).Run(ctx, []string{"--help"}))
			}
			fmt.Fprintf(stderr, "leasehold help: unknown command %q\n", args[1])
			return ExitUsage
		}
		topUsage(stdout)
		return ExitOK
	}
	c, ok := lookup(name)
	if !ok {
		fmt.Fprintf(stderr, "leasehold: unknown command %q; run 'leasehold --help' for the list\n", name)
		return ExitUsage
	}
	return exitCode(stderr, c.name, c.new(env).Run(ctx, args[1:]))
}

// exitCode prints err (if any) and maps it to an exit code.
func exitCode(stderr io.Writer, name string, err error) int {
	var (
		usage *UsageError
		st    *StoreError
		exit  *ExitError
	)
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return ExitOK
	case errors.As(err, &exit):
		if exit.Msg != "" {
			fmt.Fprintf(stderr, "leasehold %s: %s\n", name, exit.Msg)
		}
		return exit.Code
	case errors.As(err, &usage):
		fmt.Fprintf(stderr, "leasehold %s: %s\nRun 'leasehold %s --help' for usage.\n", name, usage.Msg, name)
		return ExitUsage
	case errors.As(err, &st):
		fmt.Fprintf(stderr, "leasehold %s: %v\n", name, st)
		return ExitStoreUnavailable
	default:
		fmt.Fprintf(stderr, "leasehold %s: %v\n", name, err)
		return ExitFailure
	}
}

func topUsage(w io.Writer) {
	fmt.Fprint(w, `leasehold: leases with fencing tokens. Run a command on exactly one node at a time,
and give the resource it writes to a number with which to refuse a stale writer.

Usage:
  leasehold <command> [flags] [arguments]

Commands:
`)
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	for _, c := range commands {
		if !c.hidden {
			fmt.Fprintf(tw, "  %s\t%s\n", c.name, c.summary)
		}
	}
	tw.Flush()
	fmt.Fprintf(w, `
New here? Try:  leasehold demo

Every command that uses a store takes --store URL (or the LEASEHOLD_STORE variable).
Known schemes: %s.
Without either, leasehold uses a SQLite file in your state directory:
  $XDG_STATE_HOME/leasehold/leases.db, or ~/.local/state/leasehold/leases.db
and says so on stderr.

Exit codes: 0 ok, 1 failure, 2 usage error, 3 lease lost (run --stop-on-loss),
69 store unavailable, 126/127 command not executable/not found; otherwise run
exits with its command's code.

Run 'leasehold <command> --help' for a command's flags.
`, strings.Join(schemeNames(), ", "))
}

// newFlagSet makes a subcommand's flag set; usage prints the command's help.
func newFlagSet(env *Env, name, synopsis, about string) *flag.FlagSet {
	fs := flag.NewFlagSet("leasehold "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {
		w := env.Stdout
		fmt.Fprintf(w, "Usage: leasehold %s %s\n\n%s\n\nFlags:\n", name, synopsis, strings.TrimSpace(about))
		fs.SetOutput(w)
		printDefaults(w, fs)
		fs.SetOutput(io.Discard)
	}
	return fs
}

// printDefaults prints the flags with two dashes, sorted.
func printDefaults(w io.Writer, fs *flag.FlagSet) {
	var fl []*flag.Flag
	fs.VisitAll(func(f *flag.Flag) { fl = append(fl, f) })
	sort.Slice(fl, func(i, j int) bool { return fl[i].Name < fl[j].Name })
	for _, f := range fl {
		name, usage := flag.UnquoteUsage(f)
		line := "  --" + f.Name
		if name != "" {
			line += " " + name
		}
		fmt.Fprintf(w, "%s\n    \t%s", line, strings.ReplaceAll(usage, "\n", "\n    \t"))
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" && f.DefValue != "0s" {
			fmt.Fprintf(w, " (default %s)", f.DefValue)
		}
		fmt.Fprintln(w)
	}
}

// parseFlags parses args; --help prints the usage and returns flag.ErrHelp,
// any other error is a UsageError naming the flag.
func parseFlags(fs *flag.FlagSet, args []string) error {
	// The flag package prints the usage on any error; print it on --help only.
	usage := fs.Usage
	fs.Usage = func() {}
	err := fs.Parse(args)
	fs.Usage = usage
	switch {
	case err == nil:
		return nil
	case errors.Is(err, flag.ErrHelp):
		usage()
		return flag.ErrHelp
	default:
		msg := err.Error()
		// The flag package writes "-name"; this command documents "--name".
		msg = strings.Replace(msg, ": -", ": --", 1)
		msg = strings.Replace(msg, "flag -", "flag --", 1)
		return usagef("%s", msg)
	}
}
