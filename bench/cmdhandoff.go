package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The command hand-off: what a user of the command line sees. Two processes
// of one tool contend for a lock on the embedded etcd, each to run
//
//	sh -c 'exec 3<>FIFO; echo holding; read x <&3'
//
// The holder's command is told to exit (a line written to its FIFO); the
// hand-off is the time from that write to the standby's command printing
// "holding": the holder's command exiting, its tool releasing, the standby's
// tool learning of it, acquiring, and starting its command. The tools:
//
//   - `leasehold run --store etcd://… --lease NAME -- CMD` (default timings:
//     15 s lease, 2 s retry period; the standby is woken by etcd's watch);
//   - `etcdctl lock NAME CMD` from etcd's own module, at the version of the
//     embedded server (its session TTL is 10 s; a waiter is woken by a watch
//     on the key before its own). etcdctl does not stop its command when the
//     session expires: it is a lock, not a supervisor.
//
// Both binaries are built into a temporary directory at start-up (never
// committed): leasehold from this checkout, etcdctl from its module through
// a throw-away module that requires it (its go.mod has replace directives,
// so `go install …@version` refuses it).
//
// The command opens its FIFO (read-write, which never blocks) before it
// prints "holding": a command that printed first and opened after could miss
// the write (a non-blocking open of a FIFO with no reader fails), and then
// held its lock until the sample's timeout.
const scCmdHandoff = "cmd-handoff"

// etcdctlVersion is the etcdctl module built: the version of the embedded
// etcd server (bench/go.mod).
const etcdctlVersion = "v3.7.3"

// cmdStandbyWait is how long the standby runs before the holder's command
// is told to exit: long enough for either tool to start, connect and wait.
const cmdStandbyWait = time.Second

const (
	toolLeasehold = "etcd/leasehold run"
	toolEtcdctl   = "etcd/etcdctl lock"
)

type cmdTools struct {
	dir                string
	leasehold, etcdctl string
}

func (c *cmdTools) close() { os.RemoveAll(c.dir) }

func goCmd(ctx context.Context, dir string, args ...string) error {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
	return nil
}

// buildCmdTools builds both commands into a new temporary directory.
func buildCmdTools(ctx context.Context) (*cmdTools, error) {
	dir, err := os.MkdirTemp("", "lhbench-cmd-")
	if err != nil {
		return nil, err
	}
	t := &cmdTools{dir: dir, leasehold: filepath.Join(dir, "leasehold"), etcdctl: filepath.Join(dir, "etcdctl")}
	root, err := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", "github.com/leasehold/leasehold").Output()
	if err != nil {
		t.close()
		return nil, fmt.Errorf("finding the leasehold checkout: %v", err)
	}
	if err := goCmd(ctx, strings.TrimSpace(string(root)), "build", "-o", t.leasehold, "./cmd/leasehold"); err != nil {
		t.close()
		return nil, err
	}
	mod := filepath.Join(dir, "etcdctl-mod")
	if err := os.Mkdir(mod, 0o755); err != nil {
		t.close()
		return nil, err
	}
	files := map[string]string{
		"go.mod":   "module etcdctlbuild\n\ngo 1.26.0\n\nrequire go.etcd.io/etcd/etcdctl/v3 " + etcdctlVersion + "\n",
		"tools.go": "//go:build tools\n\npackage tools\n\nimport _ \"go.etcd.io/etcd/etcdctl/v3\"\n",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(mod, name), []byte(body), 0o644); err != nil {
			t.close()
			return nil, err
		}
	}
	if err := goCmd(ctx, mod, "mod", "tidy"); err != nil {
		t.close()
		return nil, err
	}
	if err := goCmd(ctx, mod, "build", "-o", t.etcdctl, "go.etcd.io/etcd/etcdctl/v3"); err != nil {
		t.close()
		return nil, err
	}
	return t, nil
}

// toolProc is one running tool: when its command printed "holding".
type toolProc struct {
	cmd     *exec.Cmd
	holding chan time.Time // once
	stderr  bytes.Buffer
	done    chan struct{}
}

func startTool(argv []string) (*toolProc, error) {
	p := &toolProc{cmd: exec.Command(argv[0], argv[1:]...), holding: make(chan time.Time, 1), done: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), "LEASEHOLD_STORE=")
	p.cmd.Stderr = &p.stderr
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	var once sync.Once
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if sc.Text() == "holding" {
				at := time.Now()
				once.Do(func() { p.holding <- at })
			}
		}
		io.Copy(io.Discard, out)
		p.cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// stop waits for the process to end, killing it after timeout.
func (p *toolProc) stop(timeout time.Duration) {
	select {
	case <-p.done:
	case <-time.After(timeout):
		p.cmd.Process.Kill()
		<-p.done
	}
}

// tell makes the command reading fifo exit. The open does not block: a
// FIFO nobody reads (a command that has exited, or not started) is ENXIO.
func tell(fifo string) error {
	f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString("go\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// cmdHandoff measures one hand-off of tool; standbyWait is how long the
// standby waits before the holder's command is told to exit.
func cmdHandoff(ctx context.Context, t *cmdTools, tool, etcdURL, prefix string, standbyWait time.Duration) (time.Duration, bool, error) {
	name := "cmdh-" + randHex(4)
	fifos := [2]string{filepath.Join(t.dir, name+"-a"), filepath.Join(t.dir, name+"-b")}
	for _, f := range fifos {
		if err := syscall.Mkfifo(f, 0o600); err != nil {
			return 0, false, err
		}
		defer os.Remove(f)
	}
	argv := func(fifo string) []string {
		// The FIFO is opened (read-write: never blocks) before "holding" is
		// printed, so tell always finds a reader.
		sh := []string{"sh", "-c", `exec 3<>"$0"; echo holding; read x <&3`, fifo}
		if tool == toolLeasehold {
			store := "etcd://" + strings.TrimPrefix(etcdURL, "http://") + "/" + prefix + "cmd"
			return append([]string{t.leasehold, "run", "--store", store, "--lease", name, "--"}, sh...)
		}
		return append([]string{t.etcdctl, "--endpoints", etcdURL, "lock", prefix + "cmd/" + name, "--"}, sh...)
	}
	var procs []*toolProc
	defer func() {
		for i, p := range procs {
			tell(fifos[i]) // a command still holding exits; a tool still waiting is killed by stop
			p.stop(20 * time.Second)
		}
	}()
	start := func(i int) (*toolProc, error) {
		p, err := startTool(argv(fifos[i]))
		if err == nil {
			procs = append(procs, p)
		}
		return p, err
	}
	holder, err := start(0)
	if err != nil {
		return 0, false, err
	}
	select {
	case <-holder.holding:
	case <-holder.done:
		return 0, false, fmt.Errorf("%s: holder exited before its command started: %s", tool, holder.stderr.String())
	case <-time.After(sampleTimeout):
		return 0, false, fmt.Errorf("%s: holder's command did not start within %v", tool, sampleTimeout)
	case <-ctx.Done():
		return 0, false, ctx.Err()
	}
	standby, err := start(1)
	if err != nil {
		return 0, false, err
	}
	wait(ctx, standbyWait)
	violation := false
	select {
	case <-standby.holding:
		violation = true // the standby's command ran while the holder's did
	default:
	}
	rel := time.Now()
	if err := tell(fifos[0]); err != nil {
		return 0, violation, err
	}
	select {
	case at := <-standby.holding:
		return at.Sub(rel), violation, nil
	case <-standby.done:
		return 0, violation, fmt.Errorf("%s: standby exited before its command started: %s", tool, standby.stderr.String())
	case <-time.After(sampleTimeout):
		return 0, violation, fmt.Errorf("%s: standby's command did not start within %v", tool, sampleTimeout)
	case <-ctx.Done():
		return 0, violation, ctx.Err()
	}
}

// runCmdHandoffs runs n hand-offs of each tool, the tools interleaved.
func runCmdHandoffs(ctx context.Context, r *Results, t *cmdTools, e *etcdEnv, n int, standbyWait time.Duration, round int) {
	tools := rotateStrings([]string{toolLeasehold, toolEtcdctl}, round)
	for i := 0; i < n && ctx.Err() == nil; i++ {
		for _, tool := range tools {
			d, violation, err := cmdHandoff(ctx, t, tool, e.url, e.prefix, standbyWait)
			if violation {
				r.violate(scCmdHandoff, tool)
			}
			if err != nil {
				r.fail(scCmdHandoff, tool)
				logf("%s %s: %v", scCmdHandoff, tool, err)
				continue
			}
			r.add(scCmdHandoff, tool, ms(d))
		}
	}
}

// reportCmdHandoff prints the command hand-off table.
func reportCmdHandoff(w io.Writer, r *Results) {
	if len(r.keys(scCmdHandoff)) == 0 {
		return
	}
	fmt.Fprintf(w, "\n== Command hand-off on etcd: the holder's command is told to exit; ms until the waiting standby's command prints its first line\n")
	fmt.Fprintf(w, "   (leasehold run: default timings, woken by etcd's watch; etcdctl lock %s: etcd's own CLI, session TTL 10 s)\n", etcdctlVersion)
	fmt.Fprintf(w, "%-22s %4s %9s %9s %9s\n", "tool", "n", "p50", "p99", "max")
	for _, k := range []string{toolLeasehold, toolEtcdctl} {
		xs := r.get(scCmdHandoff, k)
		if len(xs) == 0 {
			continue
		}
		fmt.Fprintf(w, "%-22s %4d %9s %9s %9s\n", k, len(xs), fmtMs(median(xs)), fmtMs(quantile(xs, 0.99)), fmtMs(maxOf(xs)))
	}
}
