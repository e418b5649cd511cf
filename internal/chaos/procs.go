package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is one node process.
type proc struct {
	slot     string
	identity string
	inc      int
	name     string // slot.inc
	cmd      *exec.Cmd
	stdin    io.WriteCloser
	holder   string
	exited   chan struct{}
	history  string
	proxies  []*proxy
	offset   time.Duration
	killed   bool // by a kill fault
	forced   bool // killed because it did not stop when asked
	errLog   string
}

// gone reports whether err, from a write to p's stdin, says that p was
// stopped (its stdin closed) or has exited; so does a signal's.
func (p *proc) gone(err error) bool {
	if errors.Is(err, os.ErrClosed) || errors.Is(err, os.ErrProcessDone) || errors.Is(err, syscall.EPIPE) {
		return true
	}
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// slotProxies returns the proxies of a slot, creating them on first use.
func (h *harness) slotProxies(slot string) ([]*proxy, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if p, ok := h.proxies[slot]; ok {
		return p, nil
	}
	var ps []*proxy
	for _, ep := range h.eps {
		p, err := newProxy(ep)
		if err != nil {
			for _, q := range ps {
				q.Close()
			}
			return nil, err
		}
		ps = append(ps, p)
	}
	h.proxies[slot] = ps
	return ps, nil
}

func (h *harness) allProxies() []*proxy {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []*proxy
	for _, slot := range sortedKeys(h.proxies) {
		out = append(out, h.proxies[slot]...)
	}
	return out
}

func (h *harness) closeProxies() {
	for _, p := range h.allProxies() {
		p.Close()
	}
}

// startProc starts the next incarnation of slot and waits until it contends.
func (h *harness) startProc(ctx context.Context, slot, identity string, offset time.Duration) (*proc, error) {
	proxies, err := h.slotProxies(slot)
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	inc := 1
	for _, p := range h.all {
		if p.slot == slot && p.inc >= inc {
			inc = p.inc + 1
		}
	}
	h.mu.Unlock()
	p := &proc{slot: slot, identity: identity, inc: inc, name: procName(slot, inc), proxies: proxies, offset: offset,
		history: filepath.Join(h.dir, fmt.Sprintf("history-%s.jsonl", procName(slot, inc))), exited: make(chan struct{})}
	nodeURL, err := h.nodeURL(proxies)
	if err != nil {
		return nil, err
	}
	c := h.cfg
	t := c.Timings
	spec := h.reg.spec()
	res := make([]string, c.Resources)
	for i := range res {
		res[i] = fmt.Sprintf("r%d", i)
	}
	args := append([]string(nil), c.NodeCommand[1:]...)
	args = append(args,
		"--node", slot, "--identity", identity, "--inc", strconv.Itoa(inc),
		"--store", nodeURL, "--lease", h.lease, "--history", p.history,
		"--register-kind", spec.Kind, "--register", spec.URL, "--register-table", spec.Table,
		"--resources", strings.Join(res, ","),
		"--lease-duration", t.LeaseDuration.String(), "--renew-deadline", t.RenewDeadline.String(),
		"--renew-interval", t.RenewInterval.String(), "--retry-period", t.RetryPeriod.String(),
		"--jitter", strconv.FormatFloat(t.Jitter, 'g', -1, 64), "--wind-down", t.WindDown.String(),
		"--write-interval", c.WriteInterval.String(), "--think", c.Think.String(),
		// A write begun as the work is told to stop (think, then the write)
		// returns with half of the wind-down to spare before safeUntil.
		"--write-timeout", ((t.WindDown - c.Think) / 2).String(),
		"--clock-offset", offset.String(),
	)
	if !spec.Fenced {
		args = append(args, "--unfenced")
	}
	if c.BrokenStore != "" {
		args = append(args, "--broken-store", c.BrokenStore)
	}
	args = append(args, "--mode", c.Mode)
	if c.FairGroups > 0 { // this group's nodes are fair (runFleet gives each group 0 or 1)
		args = append(args, "--fair")
	}
	switch c.Mode {
	case ModeSemaphore:
		args = append(args, "--slots", strconv.Itoa(c.Slots))
	case ModeSchedule:
		args = append(args, "--every", c.Every.String())
	}
	cmd := exec.Command(c.NodeCommand[0], args...)
	cmd.Env = append(os.Environ(), c.NodeEnv...)
	setProcAttr(cmd)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("leasehold/chaos: start %s: %w", p.name, err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("leasehold/chaos: start %s: %w", p.name, err)
	}
	errf, err := os.Create(filepath.Join(h.dir, fmt.Sprintf("stderr-%s.log", p.name)))
	if err != nil {
		return nil, fmt.Errorf("leasehold/chaos: %w", err)
	}
	cmd.Stderr = errf
	p.errLog = errf.Name()
	if err := cmd.Start(); err != nil {
		errf.Close()
		return nil, fmt.Errorf("leasehold/chaos: start node %s (%s): %w", p.name, c.NodeCommand[0], err)
	}
	p.cmd, p.stdin = cmd, stdin
	go func() {
		cmd.Wait()
		errf.Close()
		close(p.exited)
	}()
	h.mu.Lock()
	h.all = append(h.all, p)
	h.procs[slot] = p
	h.mu.Unlock()

	ready := make(chan nodeReady, 1)
	go func() {
		br := bufio.NewReader(stdout)
		line, err := br.ReadBytes('\n')
		var r nodeReady
		if err == nil && json.Unmarshal(line, &r) == nil {
			ready <- r
		}
		close(ready)
		io.Copy(io.Discard, br)
	}()
	timer := time.NewTimer(nodeReadyTimeout)
	defer timer.Stop()
	select {
	case r, ok := <-ready:
		if !ok {
			<-p.exited
			return nil, fmt.Errorf("leasehold/chaos: node %s exited before it was ready (%v); see %s", p.name, cmd.ProcessState, errf.Name())
		}
		p.holder = r.Holder
	case <-timer.C:
		quitThenKill(p)
		return nil, fmt.Errorf("leasehold/chaos: node %s was not ready within %v (its goroutines are in %s)", p.name, nodeReadyTimeout, errf.Name())
	case <-ctx.Done():
		cmd.Process.Kill()
		return nil, ctx.Err()
	}
	return p, nil
}

// nodeReadyTimeout bounds a node's start (exec, then opening the store,
// which waits out a store restart or a cut). A PostgreSQL soak at load 80
// lost a 29-minute run to a restarted node that took over 30 s; a slow start
// proves nothing about safety, so the bound is generous.
const nodeReadyTimeout = 2 * time.Minute

// stopProc asks p to stop (closing its stdin: it releases its lease and
// exits) and kills it if it has not exited within wait.
func (h *harness) stopProc(p *proc, wait time.Duration) {
	p.stdin.Close()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-p.exited:
	case <-t.C:
		p.forced = true
		quitThenKill(p)
	}
}

// quitThenKill ends p, first with SIGQUIT so that a Go node prints where
// each goroutine waits into its stderr log (which says what held it up),
// then, if it has not exited within 5 s, with SIGKILL.
func quitThenKill(p *proc) {
	if signalQuit(p.cmd.Process) == nil {
		select {
		case <-p.exited:
			return
		case <-time.After(5 * time.Second):
		}
	}
	p.cmd.Process.Kill()
	<-p.exited
}

// unexpectedExits lists the processes that failed on their own or had to be
// killed at the end. Call it after stopAll.
func (h *harness) unexpectedExits() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, p := range h.all {
		switch st := p.cmd.ProcessState; {
		case p.killed:
		case p.forced:
			out = append(out, fmt.Sprintf("%s did not stop within %v of being asked, and was killed (its goroutines are in %s)", p.name, h.cfg.Timings.LeaseDuration+5*time.Second, p.errLog))
		case st != nil && !st.Success():
			out = append(out, fmt.Sprintf("%s exited by itself: %v (see %s)", p.name, st, p.errLog))
		}
	}
	return out
}

func (h *harness) stopAll(ctx context.Context) {
	h.mu.Lock()
	procs := append([]*proc(nil), h.all...)
	h.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			signalCont(p.cmd.Process) // in case a pause was interrupted
			h.stopProc(p, h.cfg.Timings.LeaseDuration+5*time.Second)
		}()
	}
	wg.Wait()
}
