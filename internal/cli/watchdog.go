package cli

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The watchdog is the process between `leasehold run` and its command. run
// starts it (the leasehold binary again, as `leasehold __watchdog`) in a process
// group of its own; it starts the command in another, and it enforces the
// deadline by itself:
//
//	leasehold run            (the caller's process group; holds the lease)
//	└─ leasehold __watchdog  (own group; knows the deadline)
//	   └─ CMD ARGS…          (own group, with its grandchildren)
//
// run tells the watchdog, over a pipe (fd 3), the absolute CLOCK_MONOTONIC
// time by which the command must be dead: safeUntil minus the kill margin,
// moved forward at each renewal. The watchdog sends SIGTERM to the command's
// group a term grace before that, and SIGKILL at it. So the command is dead
// by safeUntil even when run itself is frozen (SIGSTOP, a debugger, a swap
// storm) and cannot act: that is what SAFETY.md rule 14 needs, and a
// supervisor in one process cannot give it. If run dies (its end of the pipe
// closes), the watchdog kills the command's group at once. If the watchdog dies,
// the kernel kills the command (Linux's parent-death signal) and run kills
// its group when it notices.
//
// Messages on fd 3, one per line:
//
//	deadline NS   the new absolute deadline (ignored once stopping)
//	stop SIG      send SIG now; SIGKILL after the term grace, or at the deadline if sooner
//	signal SIG    forward SIG to the command's group
//
// Reports on fd 4, one per line: "pid PID" once the command runs, then
// "exit CODE [deadline]" (128+N if it died of signal N; "deadline" when the
// watchdog's own deadline stopped it, not a message from run) or
// "start-error MESSAGE".
// The watchdog exits with the command's code.
const watchdogCommand = "__watchdog"

type watchdogCmd struct {
	env       *Env
	fs        *flag.FlagSet
	termGrace time.Duration
	deadline  int64
}

func newWatchdogCmd(env *Env) Command {
	k := &watchdogCmd{env: env}
	k.fs = newFlagSet(env, watchdogCommand, "--term-grace D --deadline NS -- CMD [ARGS...]", "Internal: supervises the command of `leasehold run`. Not for direct use.")
	k.fs.DurationVar(&k.termGrace, "term-grace", time.Second, "time between SIGTERM and SIGKILL")
	k.fs.Int64Var(&k.deadline, "deadline", 0, "CLOCK_MONOTONIC nanoseconds by which the command must be dead")
	return k
}

func (k *watchdogCmd) Run(ctx context.Context, args []string) error {
	if err := parseFlags(k.fs, args); err != nil {
		return err
	}
	argv := k.fs.Args()
	if len(argv) == 0 || k.deadline == 0 {
		return usagef("needs --deadline and a command")
	}
	ctl := os.NewFile(3, "leasehold-control")
	report := os.NewFile(4, "leasehold-report")
	if ctl == nil || report == nil {
		return usagef("is started by `leasehold run` only (no control descriptors)")
	}
	closeOnExec(3)
	closeOnExec(4)
	defer report.Close()

	// The parent-death signal is tied to the thread that started the child:
	// keep this goroutine on one thread until the command is gone.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(report, "start-error %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
		code := ExitCannotExecute
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			code = ExitNotFound
		}
		return &ExitError{Code: code}
	}
	pgid := cmd.Process.Pid
	fmt.Fprintf(report, "pid %d\n", pgid)

	waitc := make(chan *os.ProcessState, 1)
	go func() {
		cmd.Wait()
		waitc <- cmd.ProcessState
	}()
	msgs := make(chan string)
	go func() {
		defer close(msgs)
		sc := bufio.NewScanner(ctl)
		for sc.Scan() {
			msgs <- sc.Text()
		}
	}()

	until := func(ns int64) time.Duration { return time.Duration(ns - monoNow()) }
	deadline := k.deadline
	termT := time.NewTimer(until(deadline - int64(k.termGrace)))
	killT := time.NewTimer(until(deadline))
	defer termT.Stop()
	defer killT.Stop()
	stopping := false
	why := "" // "deadline" when the watchdog's own deadline stopped the command
	stop := func(sig syscall.Signal) {
		if stopping {
			return
		}
		stopping = true
		termT.Stop()
		killGroup(pgid, sig)
		if at := monoNow() + int64(k.termGrace); at < deadline {
			killT.Reset(until(at))
		}
	}
	done := ctx.Done()
	for {
		select {
		case line, ok := <-msgs:
			if !ok {
				// run is gone: nobody renews the lease any more.
				msgs = nil
				killGroup(pgid, syscall.SIGKILL)
				continue
			}
			verb, arg, _ := strings.Cut(line, " ")
			n, err := strconv.ParseInt(arg, 10, 64)
			if err != nil {
				continue
			}
			switch verb {
			case "deadline":
				if !stopping {
					deadline = n
					termT.Reset(until(deadline - int64(k.termGrace)))
					killT.Reset(until(deadline))
				}
			case "stop":
				stop(syscall.Signal(n))
			case "signal":
				killGroup(pgid, syscall.Signal(n))
			}
		case <-termT.C:
			if !stopping {
				why = "deadline"
			}
			stop(syscall.SIGTERM)
		case <-killT.C:
			if !stopping {
				why = "deadline"
			}
			stopping = true
			killGroup(pgid, syscall.SIGKILL)
		case <-done:
			done = nil
			stop(syscall.SIGTERM)
		case st := <-waitc:
			// Whatever the command left behind in its group goes with it:
			// nothing it started may outlive the lease.
			killGroup(pgid, syscall.SIGKILL)
			code := exitStatus(st)
			fmt.Fprintf(report, "exit %d %s\n", code, why)
			return &ExitError{Code: code}
		}
	}
}

// exitStatus is a process's exit code, or 128+N if it died of signal N.
func exitStatus(st *os.ProcessState) int {
	if st == nil {
		return ExitFailure
	}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return st.ExitCode()
}
