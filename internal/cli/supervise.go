package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/leasehold/leasehold"
)

// The environment a supervised command gets.
const (
	EnvLease         = "LEASEHOLD_LEASE"
	EnvHolder        = "LEASEHOLD_HOLDER"
	EnvToken         = "LEASEHOLD_TOKEN"
	EnvSafeUntil     = "LEASEHOLD_SAFE_UNTIL"
	EnvSafeUntilFile = "LEASEHOLD_SAFE_UNTIL_FILE"
)

// supervisor starts run's command under a watchdog (see watchdog.go) for each
// term, keeps the watchdog's deadline and the safe-until file up to date, and
// reports how the command ended.
type supervisor struct {
	exe                   string // the leasehold binary, for the watchdog
	argv                  []string
	termGrace, killMargin time.Duration
	stdin                 io.Reader
	stdout, stderr        io.Writer
	log                   *slog.Logger
	root                  context.Context // run's context: its cause says which signal to forward
	safeFile              string
	renewed               chan struct{} // coalesced: a renewal moved safeUntil
	onStart               func(pid int)
	// extraEnv is added to the command's environment (a scheduled run's
	// period); set before runOnce.
	extraEnv []string
}

// monoAt converts a deadline on this process's monotonic clock into the
// host's CLOCK_MONOTONIC nanoseconds. The host clock is read first, so the
// result errs early, never late.
func monoAt(t time.Time) int64 {
	now := monoNow()
	return now + int64(time.Until(t))
}

// wallAt is the wall-clock time of a deadline on the monotonic clock, for
// people and for the command (advisory: see the README).
func wallAt(t time.Time) time.Time { return time.Now().Add(time.Until(t)).Round(0) }

// writeSafeUntil replaces the safe-until file atomically.
func (s *supervisor) writeSafeUntil(su time.Time) {
	dir := filepath.Dir(s.safeFile)
	f, err := os.CreateTemp(dir, ".safe-until-*")
	if err != nil {
		s.log.Warn("cannot write the safe-until file", "err", err)
		return
	}
	_, err = f.WriteString(wallAt(su).Format(time.RFC3339Nano) + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), s.safeFile)
	}
	if err != nil {
		os.Remove(f.Name())
		s.log.Warn("cannot write the safe-until file", "err", err)
	}
}

// stopSignal is the signal that stops the command: the one run received, if
// a signal is why run is stopping, else SIGTERM.
func (s *supervisor) stopSignal() syscall.Signal {
	var se *SignalError
	if errors.As(context.Cause(s.root), &se) {
		return signalNumber(se.Signal)
	}
	return syscall.SIGTERM
}

// childResult is how one run of the command ended.
type childResult struct {
	code int
	// stopped is true when the command was stopped by run (its term ended or
	// run is shutting down), false when it exited on its own.
	stopped bool
	// deadline is true when the watchdog stopped it at the deadline it knew
	// (run was frozen, or a renewal's new deadline reached it too late).
	deadline bool
}

func childEnv(l *leasehold.Lease, su time.Time, safeFile string) []string {
	drop := map[string]bool{EnvLease: true, EnvHolder: true, EnvToken: true, EnvSafeUntil: true, EnvSafeUntilFile: true,
		EnvPeriodStart: true, EnvPeriodSeconds: true}
	var env []string
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		switch {
		case drop[k]:
		case k == StoreEnv:
			// Never a secret to the command: see childStoreEnv.
			if rv, ok := childStoreEnv(v); ok {
				env = append(env, k+"="+rv)
			}
		default:
			env = append(env, kv)
		}
	}
	t := l.Term()
	return append(env,
		EnvLease+"="+t.Name,
		EnvHolder+"="+t.Holder,
		EnvToken+"="+strconv.FormatInt(t.Token, 10),
		EnvSafeUntil+"="+wallAt(su).Format(time.RFC3339Nano),
		EnvSafeUntilFile+"="+safeFile,
	)
}

// runOnce runs the command once for the term l, and returns when it is dead:
// on its own exit, or after ctx ends (the term is over or run is stopping)
// and the watchdog has stopped it.
func (s *supervisor) runOnce(ctx context.Context, l *leasehold.Lease) (childResult, error) {
	ctlR, ctlW, err := os.Pipe()
	if err != nil {
		return childResult{}, err
	}
	defer ctlW.Close()
	repR, repW, err := os.Pipe()
	if err != nil {
		ctlR.Close()
		return childResult{}, err
	}
	defer repR.Close()

	su := l.SafeUntil()
	s.writeSafeUntil(su)
	var ctlMu sync.Mutex
	send := func(format string, args ...any) {
		ctlMu.Lock()
		defer ctlMu.Unlock()
		fmt.Fprintf(ctlW, format+"\n", args...) // an error means the watchdog is gone; Wait tells
	}

	args := append([]string{watchdogCommand,
		"--term-grace", s.termGrace.String(),
		"--deadline", strconv.FormatInt(monoAt(su)-int64(s.killMargin), 10),
		"--"}, s.argv...)
	cmd := exec.CommandContext(ctx, s.exe, args...)
	cmd.Env = append(childEnv(l, su, s.safeFile), s.extraEnv...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = s.stdin, s.stdout, s.stderr
	cmd.ExtraFiles = []*os.File{ctlR, repW}
	// The watchdog outlives a frozen run, and dies with a dead one only through
	// its control pipe (which it watches): no parent-death signal for it.
	cmd.SysProcAttr = watchdogAttr()
	var stopSent atomic.Bool
	cmd.Cancel = func() error {
		sig := s.stopSignal()
		s.log.Info("stopping command", "signal", sig.String(), "kill_in", s.termGrace.String())
		stopSent.Store(true)
		send("stop %d", int(sig))
		return nil
	}
	// If the watchdog has not ended the command by then (it is frozen, or
	// hung), os/exec kills the watchdog and this function kills the command's
	// group: still before safeUntil, by half the kill margin.
	cmd.WaitDelay = s.termGrace + s.killMargin/2
	if err := cmd.Start(); err != nil {
		ctlR.Close()
		repW.Close()
		return childResult{}, fmt.Errorf("start the watchdog %s: %w", s.exe, err)
	}
	ctlR.Close()
	repW.Close()

	// The watchdog's reports.
	type report struct {
		pid      int
		code     int
		exited   bool
		deadline bool
		startErr string
	}
	repc := make(chan report, 1)
	pidc := make(chan int, 1)
	go func() {
		var r report
		sc := bufio.NewScanner(repR)
		for sc.Scan() {
			verb, arg, _ := strings.Cut(sc.Text(), " ")
			switch verb {
			case "pid":
				r.pid, _ = strconv.Atoi(arg)
				pidc <- r.pid
			case "exit":
				code, why, _ := strings.Cut(arg, " ")
				r.code, _ = strconv.Atoi(code)
				r.exited = true
				r.deadline = why == "deadline"
			case "start-error":
				r.startErr = arg
			}
		}
		repc <- r
	}()
	waitc := make(chan error, 1)
	go func() { waitc <- cmd.Wait() }()

	for {
		select {
		case pid := <-pidc:
			s.log.Info("command started", "pid", pid, "watchdog_pid", cmd.Process.Pid, "token", l.Token(), "safe_until", wallAt(l.SafeUntil()).Format(time.RFC3339Nano))
			if s.onStart != nil {
				s.onStart(pid)
			}
		case <-s.renewed:
			su := l.SafeUntil()
			send("deadline %d", monoAt(su)-int64(s.killMargin))
			s.writeSafeUntil(su)
		case werr := <-waitc:
			r := <-repc
			stopped := stopSent.Load() || ctx.Err() != nil
			switch {
			case r.startErr != "":
				code := ExitCannotExecute
				if cmd.ProcessState != nil && cmd.ProcessState.ExitCode() == ExitNotFound {
					code = ExitNotFound
				}
				return childResult{code: code}, &ExitError{Code: code, Msg: "cannot start the command: " + r.startErr}
			case r.exited:
				s.log.Info("command exited", "code", r.code, "stopped_by_leasehold", stopped || r.deadline, "at_deadline", r.deadline)
				return childResult{code: r.code, stopped: stopped, deadline: r.deadline}, nil
			default:
				// The watchdog died without a word (killed, or by WaitDelay):
				// end the command's group here.
				if r.pid > 0 {
					killGroup(r.pid, syscall.SIGKILL)
				}
				s.log.Error("the watchdog died; killed the command's process group", "watchdog_pid", cmd.Process.Pid, "pid", r.pid, "err", werr)
				return childResult{code: ExitFailure, stopped: stopped}, nil
			}
		}
	}
}
