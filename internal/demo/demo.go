//go:build unix

package demo

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/sqlite"
)

// WorkerCommand is the hidden leasehold subcommand that runs Worker.
const WorkerCommand = "__demo-worker"

// Config configures the demo.
type Config struct {
	// Exe is the leasehold binary: the nodes are `Exe run … -- Exe __demo-worker …`.
	Exe string
	// Out gets the timeline.
	Out io.Writer
	// Dir is where the files go; empty means a new temporary directory,
	// removed at the end unless Keep.
	Dir  string
	Keep bool
}

// The demo's timings: short, so that it ends in seconds.
const (
	leaseName     = "demo"
	leaseDuration = 3 * time.Second
	renewDeadline = 2 * time.Second
	renewInterval = 500 * time.Millisecond
	retryPeriod   = 250 * time.Millisecond
	writeEvery    = 200 * time.Millisecond
	stepTimeout   = 15 * time.Second
)

type node struct {
	_ [0]func() // not comparable: spares the binary an equality function

	name string
	cmd  *exec.Cmd
	log  string // path of its log (run's JSON log and its worker's stderr)
	done chan struct{}
	err  error // Wait's result, once done is closed
}

type demo struct {
	cfg      Config
	dir      string
	start    time.Time
	out      io.Writer
	leases   *sqlite.Store
	register *sql.DB
	nodes    []*node
	frozen   []int // pids the demo stopped, resumed by stopAll whatever happens
	problems []string
	// timeline holds the lines of the timeline until flush prints them in
	// time order: a line is often read (from the store's history, a node's
	// log) after a later one was printed.
	timeline []timelineLine
}

type timelineLine struct {
	at   time.Time
	text string
	_    [0]func() // not comparable: spares the binary an equality function
}

// Run runs the demo and prints its timeline to cfg.Out. It returns an error
// if a step did not happen in time, or if what happened is not what the
// fence promises (a stale write accepted, tokens going back).
func Run(ctx context.Context, cfg Config) (err error) {
	d := &demo{cfg: cfg, out: cfg.Out}
	d.dir = cfg.Dir
	if d.dir == "" {
		if d.dir, err = os.MkdirTemp("", "leasehold-demo-"); err != nil {
			return err
		}
		if !cfg.Keep {
			defer os.RemoveAll(d.dir)
		}
	} else if err := os.MkdirAll(d.dir, 0o700); err != nil {
		return err
	}
	leasesPath := filepath.Join(d.dir, "leases.db")
	registerPath := filepath.Join(d.dir, "register.db")
	for _, p := range []string{leasesPath, registerPath} {
		for _, suffix := range []string{"", "-wal", "-shm"} {
			os.Remove(p + suffix) // a --dir used before
		}
	}
	if d.leases, err = sqlite.Open(ctx, leasesPath, sqlite.Options{}); err != nil {
		return err
	}
	defer d.leases.Close()
	if err := InitRegister(registerPath); err != nil {
		return fmt.Errorf("create the register: %w", err)
	}
	if d.register, err = openRegister(registerPath, 5*time.Second); err != nil {
		return err
	}
	defer d.register.Close()

	fmt.Fprintf(d.out, `leasehold demo: three nodes elect a leader through one SQLite file; the leader's worker
writes to a register that refuses an older term: a token lower than the last it accepted, or
the same token from another holder.
  lease store  %s  (lease %v, renew deadline %v, renewed every %v)
  register     %s
               (UPDATE register ... WHERE last_token < token OR (last_token = token AND last_holder = holder))
  node logs    %s
Each line says where it was read from: [store] the lease table's history, [register] the
register's log of write attempts, [node-N] that node's own log, [demo] what the demo did.

`, leasesPath, leaseDuration, renewDeadline, renewInterval, registerPath, filepath.Join(d.dir, "node-*.log"))

	d.start = time.Now()
	defer d.stopAll()
	if err := d.startNodes(leasesPath, registerPath); err != nil {
		return err
	}
	fmt.Fprintf(d.out, "Running (about five seconds)...\n\n")
	defer d.flush() // on an early return
	if err := d.script(ctx); err != nil {
		d.flush()
		d.printLogTails()
		return err
	}
	return d.finish(ctx)
}

func (d *demo) say(at time.Time, source, format string, args ...any) {
	d.timeline = append(d.timeline, timelineLine{at: at, text: fmt.Sprintf("%6.2fs  %-10s %s\n", at.Sub(d.start).Seconds(), "["+source+"]", fmt.Sprintf(format, args...))})
}

// flush prints the timeline so far, in time order.
func (d *demo) flush() {
	sort.SliceStable(d.timeline, func(i, j int) bool { return d.timeline[i].at.Before(d.timeline[j].at) })
	for _, l := range d.timeline {
		fmt.Fprint(d.out, l.text)
	}
	d.timeline = nil
}

func (d *demo) startNodes(leasesPath, registerPath string) error {
	var pids []string
	for i := 1; i <= 3; i++ {
		n := &node{name: fmt.Sprintf("node-%d", i), done: make(chan struct{})}
		n.log = filepath.Join(d.dir, n.name+".log")
		f, err := os.Create(n.log)
		if err != nil {
			return err
		}
		n.cmd = exec.Command(d.cfg.Exe, "run",
			"--store", "sqlite://"+leasesPath,
			"--lease", leaseName,
			"--identity", n.name,
			"--lease-duration", leaseDuration.String(),
			"--renew-deadline", renewDeadline.String(),
			"--renew-interval", renewInterval.String(),
			"--retry-period", retryPeriod.String(),
			"--log-format", "json",
			"--",
			d.cfg.Exe, WorkerCommand, "--register", registerPath, "--node", n.name, "--every", writeEvery.String())
		n.cmd.Stdout, n.cmd.Stderr = f, f
		n.cmd.Env = append(os.Environ(), "LEASEHOLD_STORE=")
		// Its own process group, so that a Ctrl-C at the terminal reaches the
		// demo only (which then stops the nodes), and killed with the demo.
		n.cmd.SysProcAttr = nodeAttr()
		if err := n.cmd.Start(); err != nil {
			f.Close()
			return fmt.Errorf("start %s: %w", n.name, err)
		}
		f.Close()
		go func() {
			n.err = n.cmd.Wait()
			close(n.done)
		}()
		d.nodes = append(d.nodes, n)
		pids = append(pids, fmt.Sprintf("%s pid %d", n.name, n.cmd.Process.Pid))
	}
	d.say(time.Now(), "demo", "started 3 nodes (%s), each `leasehold run --lease demo -- leasehold %s`", strings.Join(pids, ", "), WorkerCommand)
	return nil
}

// logEntry is one line of a node's log: run's JSON, or a raw line of its worker.
type logEntry struct {
	Time  time.Time      `json:"time"`
	Msg   string         `json:"msg"`
	Attrs map[string]any `json:"-"`
	Raw   string         `json:"-"`
}

func (e logEntry) int(key string) int64 {
	switch v := e.Attrs[key].(type) {
	case float64:
		return int64(v)
	case string:
		n, _ := strconv.ParseInt(v, 10, 64)
		return n
	}
	return 0
}

func (e logEntry) str(key string) string {
	s, _ := e.Attrs[key].(string)
	return s
}

func (n *node) entries() []logEntry {
	b, err := os.ReadFile(n.log)
	if err != nil {
		return nil
	}
	var out []logEntry
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		var e logEntry
		if json.Unmarshal([]byte(line), &e) == nil && e.Msg != "" {
			json.Unmarshal([]byte(line), &e.Attrs)
		} else {
			e = logEntry{Raw: line}
		}
		out = append(out, e)
	}
	return out
}

// find returns the first entry after index from with message msg (or a raw
// line containing msg), and its index.
func (n *node) find(from int, msg string) (logEntry, int, bool) {
	es := n.entries()
	for i := from; i < len(es); i++ {
		if es[i].Msg == msg || (es[i].Raw != "" && strings.Contains(es[i].Raw, msg)) {
			return es[i], i, true
		}
	}
	return logEntry{}, len(es), false
}

// last returns the last entry with message msg.
func (n *node) last(msg string) (logEntry, bool) {
	es := n.entries()
	for i := len(es) - 1; i >= 0; i-- {
		if es[i].Msg == msg {
			return es[i], true
		}
	}
	return logEntry{}, false
}

// waitFor polls cond every 20 ms until it is true, for at most stepTimeout.
func (d *demo) waitFor(ctx context.Context, what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(stepTimeout)
	for {
		ok, err := cond()
		if err != nil {
			return fmt.Errorf("demo: waiting for %s: %w", what, err)
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("demo: %s did not happen within %v", what, stepTimeout)
		}
		t := time.NewTimer(20 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

func (d *demo) nodeOf(holder string) *node {
	for _, n := range d.nodes {
		if strings.HasPrefix(holder, n.name+"-") {
			return n
		}
	}
	return nil
}

// grant returns the history entry of the grant of token.
func (d *demo) grant(ctx context.Context, token int64) (store.HistoryEntry, bool) {
	hist, err := d.leases.History(ctx, leaseName, 50)
	if err != nil {
		return store.HistoryEntry{}, false
	}
	for _, e := range hist {
		if e.Token == token && (e.Event == "acquired" || e.Event == "expired-takeover") {
			return e, true
		}
	}
	return store.HistoryEntry{}, false
}

// script is the story: election, freeze, takeover, stale write, recovery.
func (d *demo) script(ctx context.Context) error {
	// 1. One node leads.
	var first store.Record
	if err := d.waitFor(ctx, "a leader", func() (bool, error) {
		rec, err := d.leases.Get(ctx, leaseName)
		if errors.Is(err, store.ErrNotFound) {
			return false, nil
		}
		first = rec
		return err == nil && rec.Live(), err
	}); err != nil {
		return err
	}
	old := d.nodeOf(first.Holder)
	if old == nil {
		return fmt.Errorf("demo: the lease is held by %q, not by one of the demo's nodes", first.Holder)
	}
	if g, ok := d.grant(ctx, first.Token); ok {
		d.say(g.At, "store", "%s acquired the lease: token %d", old.name, g.Token)
	}
	var started logEntry
	if err := d.waitFor(ctx, old.name+"'s worker to start", func() (bool, error) {
		var ok bool
		started, _, ok = old.find(0, "command started")
		return ok, nil
	}); err != nil {
		return err
	}
	workerPID, watchdogPID := int(started.int("pid")), int(started.int("watchdog_pid"))
	d.say(started.Time, old.name, "started its worker (pid %d) under its watchdog (pid %d), with LEASEHOLD_TOKEN=%d", workerPID, watchdogPID, started.int("token"))
	var accepted []writeRow
	if err := d.waitFor(ctx, old.name+"'s first writes", func() (bool, error) {
		ws, err := readWrites(ctx, d.register, 0)
		accepted = ws
		return len(ws) >= 3, err
	}); err != nil {
		return err
	}
	for _, n := range d.nodes {
		if n == old {
			continue
		}
		if e, _, ok := n.find(0, "standing by"); ok {
			d.say(e.Time, n.name, "standing by: %s leads with token %d", d.nameOf(e.str("leader")), e.int("token"))
		}
	}
	w := accepted[0]
	d.say(w.at, "register", "%s's worker wrote with token %d: %s (and keeps writing every %v)", w.node, w.token, verdict(w), writeEvery)
	lastSeq := accepted[len(accepted)-1].seq

	// 2. Freeze the whole leader node: its run, its watchdog and its worker.
	d.frozen = []int{workerPID, watchdogPID, old.cmd.Process.Pid}
	frozeAt, err := d.freeze(ctx, d.frozen)
	if err != nil {
		return err
	}
	d.say(frozeAt, "demo", "froze %s with SIGSTOP: its run (pid %d), watchdog (pid %d) and worker (pid %d), like a VM pause; it cannot renew, and its lease runs out %v after its last renewal", old.name, old.cmd.Process.Pid, watchdogPID, workerPID, leaseDuration)

	// 3. A standby takes over with the next token.
	var cur store.Record
	if err := d.waitFor(ctx, "a takeover", func() (bool, error) {
		rec, err := d.leases.Get(ctx, leaseName)
		cur = rec
		return err == nil && rec.Live() && rec.Token > first.Token, err
	}); err != nil {
		return err
	}
	next := d.nodeOf(cur.Holder)
	if next == nil || next == old {
		return fmt.Errorf("demo: the lease went to %q, not to a standby", cur.Holder)
	}
	if g, ok := d.grant(ctx, cur.Token); ok {
		d.say(g.At, "store", "%s took over: token %d (%s, %.1fs after %s froze)", next.name, g.Token, g.Event, g.At.Sub(frozeAt).Seconds(), old.name)
	}
	if err := d.waitFor(ctx, next.name+"'s first write", func() (bool, error) {
		ws, err := readWrites(ctx, d.register, lastSeq)
		for _, w := range ws {
			if w.node == next.name && w.accepted {
				d.say(w.at, "register", "%s's worker wrote with token %d: %s", w.node, w.token, verdict(w))
				lastSeq = w.seq
				return true, nil
			}
		}
		return false, err
	}); err != nil {
		return err
	}

	// 4. The old leader's worker wakes first, still holding token 1, and writes.
	syscall.Kill(workerPID, syscall.SIGCONT)
	d.say(time.Now(), "demo", "resumed %s's worker alone (SIGCONT): it still believes it holds token %d, and writes at once", old.name, first.Token)
	var stale writeRow
	if err := d.waitFor(ctx, old.name+"'s stale write", func() (bool, error) {
		ws, err := readWrites(ctx, d.register, lastSeq)
		for _, w := range ws {
			if w.node == old.name {
				stale = w
				return true, nil
			}
		}
		return false, err
	}); err != nil {
		return err
	}
	note := ""
	if stale.note != "" {
		note = " (" + stale.note + ")"
	}
	var lastToken int64
	d.register.QueryRowContext(ctx, `SELECT last_token FROM register WHERE id = 1`).Scan(&lastToken)
	d.say(stale.at, "register", "%s's worker wrote with token %d%s: %s", stale.node, stale.token, note, verdict(stale))
	if stale.accepted {
		d.problems = append(d.problems, fmt.Sprintf("the stale write of %s with token %d was ACCEPTED", old.name, stale.token))
	}
	if e, _, ok := old.find(0, "refused by the fence"); ok {
		d.say(time.Now(), old.name, "its worker: %q", strings.TrimSpace(e.Raw))
	}

	// 5. The old leader's run wakes: past safeUntil, it steps down.
	before := len(old.entries())
	syscall.Kill(old.cmd.Process.Pid, syscall.SIGCONT)
	d.say(time.Now(), "demo", "resumed %s's run (SIGCONT)", old.name)
	var ended logEntry
	if err := d.waitFor(ctx, old.name+" to end its term", func() (bool, error) {
		var ok bool
		ended, _, ok = old.find(before, "term ended")
		return ok, nil
	}); err != nil {
		return err
	}
	d.say(ended.Time, old.name, "its term %d ended: reason %q (%s)", ended.int("token"), ended.str("reason"), ended.str("cause"))
	syscall.Kill(watchdogPID, syscall.SIGCONT)
	d.say(time.Now(), "demo", "resumed %s's watchdog (SIGCONT)", old.name)
	var exited logEntry
	if err := d.waitFor(ctx, old.name+"'s command to be reaped", func() (bool, error) {
		var ok bool
		exited, _, ok = old.find(before, "command exited")
		if !ok {
			exited, _, ok = old.find(before, "the watchdog died; killed the command's process group")
		}
		return ok, nil
	}); err != nil {
		return err
	}
	if exited.Msg == "command exited" {
		d.say(exited.Time, old.name, "its watchdog reaped the worker: exit code %d", exited.int("code"))
	} else {
		d.say(exited.Time, old.name, "%s", exited.Msg)
	}
	if e, _, ok := old.find(before, "standing by"); ok {
		d.say(e.Time, old.name, "standing by: %s leads with token %d", d.nameOf(e.str("leader")), e.int("token"))
	}
	return nil
}

func (d *demo) nameOf(holder string) string {
	if n := d.nodeOf(holder); n != nil {
		return n.name
	}
	return holder
}

func verdict(w writeRow) string {
	if w.accepted {
		return "accepted"
	}
	return "REFUSED by the fence (the register has accepted a higher token)"
}

// freeze stops the processes (in order) at a moment when none of them is
// inside a write transaction on either SQLite file: a process frozen while it
// holds a file's write lock would block every other writer until it wakes
// (see the SQLite store's docs), which is not what this demo is about. It
// returns when they were stopped.
func (d *demo) freeze(ctx context.Context, pids []int) (time.Time, error) {
	files := []string{d.leases.Path(), filepath.Join(d.dir, "register.db")}
	for try := 0; try < 50; try++ {
		for _, pid := range pids {
			syscall.Kill(pid, syscall.SIGSTOP)
		}
		at := time.Now()
		busy := ""
		for _, f := range files {
			if locked, err := writeLocked(ctx, f); err != nil {
				return at, err
			} else if locked {
				busy = f
			}
		}
		if busy == "" {
			return at, nil
		}
		for i := len(pids) - 1; i >= 0; i-- {
			syscall.Kill(pids[i], syscall.SIGCONT)
		}
		t := time.NewTimer(time.Duration(5+try) * time.Millisecond)
		<-t.C
	}
	return time.Time{}, errors.New("demo: could not freeze the leader between two writes")
}

// writeLocked reports whether another connection holds the write lock of the
// SQLite file at path.
func writeLocked(ctx context.Context, path string) (bool, error) {
	db, err := openRegister(path, 0)
	if err != nil {
		return false, err
	}
	defer db.Close()
	tx, err := db.BeginTx(ctx, nil) // BEGIN IMMEDIATE, no waiting
	if err != nil {
		if strings.Contains(err.Error(), "SQLITE_BUSY") || strings.Contains(err.Error(), "database is locked") {
			return true, nil
		}
		return false, err
	}
	tx.Rollback()
	return false, nil
}

// finish stops the nodes, checks the register's log, and prints the summary.
func (d *demo) finish(ctx context.Context) error {
	// A last look at the leader while everything runs.
	rec, err := d.leases.Get(ctx, leaseName)
	if err != nil {
		return err
	}
	leader := d.nodeOf(rec.Holder)
	for _, n := range d.nodes {
		n.cmd.Process.Signal(syscall.SIGTERM)
	}
	d.say(time.Now(), "demo", "sent SIGTERM to every node's run")
	for _, n := range d.nodes {
		t := time.NewTimer(stepTimeout)
		select {
		case <-n.done:
		case <-t.C:
			n.cmd.Process.Kill()
			<-n.done
			d.problems = append(d.problems, n.name+" did not stop within "+stepTimeout.String())
		}
		t.Stop()
		code := n.cmd.ProcessState.ExitCode()
		if n == leader {
			stopping, ok1 := n.last("stopping command")
			exited, ok2 := n.last("command exited")
			released, ok3 := n.last("released lease")
			if ok1 && ok2 && ok3 {
				d.say(released.Time, n.name, "sent %s to its worker, which exited with code %d; released token %d; run exited %d",
					stopping.str("signal"), exited.int("code"), released.int("token"), code)
				continue
			}
		}
		d.say(time.Now(), n.name, "run exited %d", code)
	}

	d.flush()
	ws, err := readWrites(ctx, d.register, 0)
	if err != nil {
		return err
	}
	fmt.Fprintf(d.out, "\nThe register's log, in commit order:\n")
	type run struct {
		node     string
		token    int64
		accepted bool
		n        int
		from, to time.Time
	}
	var runs []run
	// The term (token, holder) of the newest accepted write: a write of that
	// term or a newer one must be accepted, any other refused.
	var maxAccepted int64
	var maxHolder string
	for _, w := range ws {
		newer := w.token > maxAccepted || (w.token == maxAccepted && w.holder == maxHolder)
		switch {
		case w.accepted && w.token < maxAccepted:
			d.problems = append(d.problems, fmt.Sprintf("write #%d with token %d was accepted after token %d", w.seq, w.token, maxAccepted))
		case w.accepted && !newer:
			d.problems = append(d.problems, fmt.Sprintf("write #%d with token %d from %s was accepted after the same token from %s", w.seq, w.token, w.holder, maxHolder))
		case w.accepted:
			maxAccepted, maxHolder = w.token, w.holder
		case newer:
			d.problems = append(d.problems, fmt.Sprintf("write #%d with token %d was refused although no newer term had written", w.seq, w.token))
		}
		if k := len(runs) - 1; k >= 0 && runs[k].node == w.node && runs[k].token == w.token && runs[k].accepted == w.accepted {
			runs[k].n++
			runs[k].to = w.at
			continue
		}
		runs = append(runs, run{node: w.node, token: w.token, accepted: w.accepted, n: 1, from: w.at, to: w.at})
	}
	for _, r := range runs {
		what := "accepted"
		if !r.accepted {
			what = "REFUSED"
		}
		fmt.Fprintf(d.out, "  %6.2fs-%6.2fs  %s  token %d  %-8s x%d\n", r.from.Sub(d.start).Seconds(), r.to.Sub(d.start).Seconds(), r.node, r.token, what, r.n)
	}
	hist, err := d.leases.History(ctx, leaseName, 50)
	if err != nil {
		return err
	}
	sort.Slice(hist, func(i, j int) bool {
		return hist[i].At.Before(hist[j].At) || (hist[i].At.Equal(hist[j].At) && hist[i].Token < hist[j].Token)
	})
	fmt.Fprintf(d.out, "\nThe lease's history [store]:\n")
	for _, e := range hist {
		fmt.Fprintf(d.out, "  %6.2fs  %-16s %s  token %d\n", e.At.Sub(d.start).Seconds(), e.Event, d.nameOf(e.Holder), e.Token)
	}
	refused := 0
	for _, w := range ws {
		if !w.accepted {
			refused++
		}
	}
	if refused == 0 {
		d.problems = append(d.problems, "no stale write was refused")
	}
	fmt.Fprintln(d.out)
	if len(d.problems) > 0 {
		return fmt.Errorf("demo: not what the fence promises:\n  %s", strings.Join(d.problems, "\n  "))
	}
	fmt.Fprintf(d.out, "Result: one leader at a time; each takeover got a higher token; the register accepted\n"+
		"terms in rising order only, and refused %d stale write(s) from the frozen leader.\n", refused)
	if d.cfg.Keep || d.cfg.Dir != "" {
		fmt.Fprintf(d.out, "Files kept in %s\n", d.dir)
	}
	return nil
}

// stopAll makes sure no node outlives the demo.
func (d *demo) stopAll() {
	for _, pid := range d.frozen {
		syscall.Kill(pid, syscall.SIGCONT)
	}
	for _, n := range d.nodes {
		select {
		case <-n.done:
			continue
		default:
		}
		n.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, n := range d.nodes {
		t := time.NewTimer(5 * time.Second)
		select {
		case <-n.done:
		case <-t.C:
			n.cmd.Process.Kill()
			<-n.done
		}
		t.Stop()
	}
}

// printLogTails shows the end of each node's log after a failed step.
func (d *demo) printLogTails() {
	for _, n := range d.nodes {
		es := n.entries()
		if len(es) > 8 {
			es = es[len(es)-8:]
		}
		fmt.Fprintf(d.out, "--- last lines of %s:\n", n.log)
		for _, e := range es {
			if e.Raw != "" {
				fmt.Fprintf(d.out, "  %s\n", e.Raw)
			} else {
				b, _ := json.Marshal(e.Attrs)
				fmt.Fprintf(d.out, "  %s\n", b)
			}
		}
	}
}
