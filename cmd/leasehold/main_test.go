package main_test

// These tests build the leasehold binary once and run it as users do: several
// `leasehold run` processes on one store, killed, frozen and signalled. The
// supervised command is this test binary itself, re-executed in "child" mode:
// it records what it sees (its token, the safe-until deadline it reads from
// LEASEHOLD_SAFE_UNTIL_FILE, the signals it gets) in a file, every 10 ms,
// so the tests judge from the child's own records.

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	_ "modernc.org/sqlite"

	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/store/zookeeper/zktest"
)

var leaseholdBin string // built by TestMain

const childEnv = "LEASEHOLD_E2E_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(child())
	}
	dir, err := os.MkdirTemp("", "leasehold-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	leaseholdBin = filepath.Join(dir, "leasehold")
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = "/usr/local/go/bin/go"
	}
	build := exec.Command(goBin, "build", "-o", leaseholdBin, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building leasehold:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// child is the supervised command. It appends to $E2E_RECORD:
//
//	start NOW PID TOKEN HOLDER
//	tick NOW SAFE_UNTIL     (every 10 ms; SAFE_UNTIL read from the file each time)
//	term NOW SIGNAL         (on SIGTERM or SIGINT)
//
// times in Unix nanoseconds. On a signal it exits with $E2E_TERM_EXIT,
// unless $E2E_IGNORE_TERM is set. With $E2E_EXIT_AFTER=N it exits 0 after N ticks.
// With $E2E_BARRIER=DIR and $E2E_BARRIER_N=K it marks its start in DIR and
// counts no tick towards $E2E_EXIT_AFTER until K commands have marked theirs,
// so that K commands certainly run at once.
func child() int {
	f, err := os.OpenFile(os.Getenv("E2E_RECORD"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 99
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	fmt.Fprintf(f, "start %d %d %s %s\n", time.Now().UnixNano(), os.Getpid(), os.Getenv("LEASEHOLD_TOKEN"), os.Getenv("LEASEHOLD_HOLDER"))
	termExit, _ := strconv.Atoi(os.Getenv("E2E_TERM_EXIT"))
	exitAfter, _ := strconv.Atoi(os.Getenv("E2E_EXIT_AFTER"))
	ignore := os.Getenv("E2E_IGNORE_TERM") != ""
	file := os.Getenv("LEASEHOLD_SAFE_UNTIL_FILE")
	barrier, barrierN := os.Getenv("E2E_BARRIER"), 0
	if barrier != "" {
		barrierN, _ = strconv.Atoi(os.Getenv("E2E_BARRIER_N"))
		if err := os.WriteFile(filepath.Join(barrier, filepath.Base(os.Getenv("E2E_RECORD"))), nil, 0o644); err != nil {
			fmt.Fprintf(f, "error %d %v\n", time.Now().UnixNano(), err)
		}
	}
	ticker := time.NewTicker(10 * time.Millisecond)
	for n := 1; ; {
		select {
		case s := <-sigs:
			fmt.Fprintf(f, "term %d %s\n", time.Now().UnixNano(), s)
			if !ignore {
				return termExit
			}
		case <-ticker.C:
			b, err := os.ReadFile(file)
			if err != nil {
				fmt.Fprintf(f, "error %d %v\n", time.Now().UnixNano(), err)
				continue
			}
			su, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(string(b)))
			if err != nil {
				fmt.Fprintf(f, "error %d %v\n", time.Now().UnixNano(), err)
				continue
			}
			fmt.Fprintf(f, "tick %d %d\n", time.Now().UnixNano(), su.UnixNano())
			if barrierN > 0 {
				if marks, _ := os.ReadDir(barrier); len(marks) < barrierN {
					continue
				}
				barrierN = 0
			}
			if exitAfter > 0 && n >= exitAfter {
				return 0
			}
			n++
		}
	}
}

// record is what a child wrote.
type record struct {
	starts []start
	ticks  []tick
	terms  []time.Time
	sigs   []string // the signal of each term line
	errors []string
}

type start struct {
	at     time.Time
	pid    int
	token  int64
	holder string
}

type tick struct{ at, safeUntil time.Time }

func readRecord(t *testing.T, path string) record {
	t.Helper()
	var r record
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return r
	}
	if err != nil {
		t.Fatal(err)
	}
	ns := func(s string) time.Time {
		n, _ := strconv.ParseInt(s, 10, 64)
		return time.Unix(0, n)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue // a line cut short by SIGKILL
		}
		switch f[0] {
		case "start":
			if len(f) == 5 {
				pid, _ := strconv.Atoi(f[2])
				tok, _ := strconv.ParseInt(f[3], 10, 64)
				r.starts = append(r.starts, start{ns(f[1]), pid, tok, f[4]})
			}
		case "tick":
			if len(f) == 3 {
				r.ticks = append(r.ticks, tick{ns(f[1]), ns(f[2])})
			}
		case "term":
			r.terms = append(r.terms, ns(f[1]))
			r.sigs = append(r.sigs, strings.Join(f[2:], " "))
		case "error":
			r.errors = append(r.errors, sc.Text())
		}
	}
	return r
}

// node is one `leasehold run` process.
type node struct {
	t      *testing.T
	name   string
	cmd    *exec.Cmd
	rec    string // the child's record
	stderr string // run's log
	done   chan struct{}
}

func (n *node) record() record { return readRecord(n.t, n.rec) }

func (n *node) log() string {
	b, _ := os.ReadFile(n.stderr)
	return string(b)
}

// exitCode waits for run to exit and returns its code.
func (n *node) exitCode(timeout time.Duration) int {
	n.t.Helper()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-n.done:
	case <-t.C:
		n.t.Fatalf("%s: leasehold run did not exit within %v\n%s", n.name, timeout, n.log())
	}
	return n.cmd.ProcessState.ExitCode()
}

// startRun starts `leasehold run` with the child as its command.
func startRun(t *testing.T, dir, name string, childVars []string, args ...string) *node {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	n := &node{t: t, name: name, rec: filepath.Join(dir, name+".rec"), stderr: filepath.Join(dir, name+".log"), done: make(chan struct{})}
	logf, err := os.Create(n.stderr)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	full := append([]string{"run", "--identity", name}, args...)
	full = append(full, "--", exe)
	n.cmd = exec.Command(leaseholdBin, full...)
	n.cmd.Stdout, n.cmd.Stderr = logf, logf
	n.cmd.Env = append(os.Environ(), append([]string{childEnv + "=1", "E2E_RECORD=" + n.rec, "LEASEHOLD_STORE="}, childVars...)...)
	n.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // so that a test's signals go where it says
	if err := n.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		n.cmd.Wait()
		close(n.done)
	}()
	t.Cleanup(func() {
		select {
		case <-n.done:
			// It exited by itself: a failed test shows why, too.
			if t.Failed() {
				t.Logf("log of %s (it had exited: %v):\n%s", n.name, n.cmd.ProcessState, n.log())
			}
			return
		default:
		}
		n.cmd.Process.Signal(syscall.SIGCONT)
		n.cmd.Process.Signal(syscall.SIGTERM)
		timer := time.NewTimer(10 * time.Second)
		defer timer.Stop()
		select {
		case <-n.done:
		case <-timer.C:
			n.cmd.Process.Kill()
			<-n.done
		}
		if t.Failed() {
			t.Logf("log of %s:\n%s", n.name, n.log())
		}
	})
	return n
}

// waitUntil polls cond every 10 ms until it holds, or fails the test.
func waitUntil(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		timer := time.NewTimer(10 * time.Millisecond)
		<-timer.C
	}
}

func processGone(pid int) bool {
	return syscall.Kill(pid, 0) == syscall.ESRCH
}

// leasehold runs the binary to completion and returns its exit code, stdout and stderr.
func leasehold(t *testing.T, env []string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, leaseholdBin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.Env = append(os.Environ(), append([]string{"LEASEHOLD_STORE="}, env...)...)
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("leasehold %v: %v", args, err)
	}
	return cmd.ProcessState.ExitCode(), out.String(), errb.String()
}

// Short timings: a 2 s lease.
const (
	leaseDuration = 2 * time.Second
	renewInterval = 400 * time.Millisecond
	retryPeriod   = 200 * time.Millisecond
)

var timingArgs = []string{"--lease-duration", "2s", "--renew-deadline", "1200ms", "--renew-interval", "400ms", "--retry-period", "200ms"}

// kubeTimingArgs are timingArgs for Kubernetes, which tells renewals apart
// to the second: the lease must outlast the renew deadline by more than one.
var kubeTimingArgs = []string{"--lease-duration", "3s", "--renew-deadline", "1500ms", "--renew-interval", "500ms", "--retry-period", "250ms"}

func sqliteURL(t *testing.T) string {
	return "sqlite://" + filepath.Join(t.TempDir(), "leases.db")
}

// postgresURL makes a schema of its own for the test, dropped at the end.
func postgresURL(t *testing.T) string {
	u, _, _ := postgresSchema(t)
	return u
}

// postgresSchema is postgresURL, with the URL of the database without the
// schema (for a test's own connection) and the schema's name.
func postgresSchema(t *testing.T) (storeURL, dbURL, schema string) {
	addr := testenv.RequireTCP(t, "PostgreSQL", testenv.Env("LEASEHOLD_PG_ADDR", "127.0.0.1:5432"), "start PostgreSQL on 127.0.0.1:5432 (user postgres, trust auth, database test)")
	schema = fmt.Sprintf("lh_cli_e2e_%d", rand.Uint64()%1_000_000_000)
	base := "postgres://postgres@" + addr + "/test"
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Logf("drop schema %s: %v", schema, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE"); err != nil {
			t.Logf("drop schema %s: %v", schema, err)
		}
	})
	return base + "?schema=" + schema + "&create_if_missing=true", base, schema
}

func TestTwoRunsSQLite(t *testing.T)   { twoRuns(t, sqliteURL(t)) }
func TestTwoRunsPostgres(t *testing.T) { twoRuns(t, postgresURL(t)) }

// TestTwoRunsPostgresPrepared: the same with the URL's
// prepared_statements=true (the store's own tests show the statements are
// then prepared once per connection; this one that run takes the option
// and fails over with it).
func TestTwoRunsPostgresPrepared(t *testing.T) {
	twoRuns(t, postgresURL(t)+"&prepared_statements=true")
}

// TestTwoRunsZooKeeper: the same through zookeeper://, on a ZooKeeper server
// of the test's own; the token is a czxid, above a's but not a's + 1.
func TestTwoRunsZooKeeper(t *testing.T) { twoRuns(t, zookeeperURL(t)) }

// zookeeperURL starts a ZooKeeper server for the test (tick 100 ms: the 2 s
// lease is ten ticks).
func zookeeperURL(t *testing.T) string {
	srv := zktest.Standalone(t, zktest.Options{})
	return "zookeeper://" + srv.Addr() + "/e2e"
}

// consecutive reports whether storeURL's store counts its tokens up by one
// per grant; ZooKeeper's are czxids and NATS's key revisions, which rise by
// every write.
func consecutive(storeURL string) bool {
	return !strings.HasPrefix(storeURL, "zookeeper:") && !strings.HasPrefix(storeURL, "nats:")
}

// twoRuns: two `leasehold run` on one lease; kill -9 the leader; the other
// takes over after the lease, with token + 1 (a higher token where the store
// does not count by one), and the killed leader's command is dead before
// that; status shows the lease held; then SIGTERM to the new leader's run is forwarded to
// its command, whose exit code run returns, after releasing the lease.
func twoRuns(t *testing.T, storeURL string) {
	dir := t.TempDir()
	// A term grace of 500 ms (the default here is 200): under CI's load the
	// command once took longer than 200 ms to exit after the forwarded
	// SIGTERM, and was killed as one that ignores it.
	args := append([]string{"--store", storeURL, "--lease", "e2e", "--term-grace", "500ms"}, timingArgs...)
	a := startRun(t, dir, "a", nil, args...)
	waitUntil(t, 20*time.Second, "a's command to start", func() bool { return len(a.record().starts) > 0 })
	b := startRun(t, dir, "b", []string{"E2E_TERM_EXIT=5"}, args...)
	waitUntil(t, 10*time.Second, "b to stand by", func() bool { return strings.Contains(b.log(), "standing by") })
	aStart := a.record().starts[0]

	// kill -9 the leader's run: its watchdog sees its pipe close and kills the command.
	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killedAt := time.Now()
	waitUntil(t, 10*time.Second, "a's command to die with its run", func() bool { return processGone(aStart.pid) })
	aDead := time.Now()

	waitUntil(t, 20*time.Second, "b's command to start", func() bool { return len(b.record().starts) > 0 })
	bStart := b.record().starts[0]
	if bStart.token <= aStart.token || consecutive(storeURL) && bStart.token != aStart.token+1 {
		t.Fatalf("b's token %d, want above a's %d (a's + 1 on a store that counts)", bStart.token, aStart.token)
	}
	// a's last successful renewal was sent at most one renew interval (plus
	// one retry period, had a renewal failed) before it was killed, so the
	// store let b in no earlier than a lease duration after that: b did not
	// take over early.
	earliest := killedAt.Add(leaseDuration - renewInterval - retryPeriod)
	switch aLog := a.log(); {
	case !bStart.at.Before(earliest):
	case strings.Contains(aLog, "term ended"):
		// a's renewals failed (a store slow beyond their deadline, as under
		// CI's load) and its term ended before it was killed: it stopped its
		// command and gave the lease back, and b took it at once, as it
		// should.
		t.Logf("a's term ended before it was killed; b took over %v after the kill:\n%s", bStart.at.Sub(killedAt), aLog)
	default:
		t.Fatalf("b took over %v after a was killed, before a's lease could expire (lease %v, renewed every %v)", bStart.at.Sub(killedAt), leaseDuration, renewInterval)
	}
	ar := a.record()
	if last := ar.ticks[len(ar.ticks)-1].at; !last.Before(bStart.at) {
		t.Fatalf("a's command ticked at %v, after b's command started at %v", last, bStart.at)
	}
	t.Logf("a killed; its command dead %v later; b took over %v after the kill with token %d", aDead.Sub(killedAt).Round(time.Millisecond), bStart.at.Sub(killedAt).Round(time.Millisecond), bStart.token)

	// SIGTERM to b's run: forwarded to the command, which exits 5; b releases.
	waitUntil(t, 5*time.Second, "b's command to tick", func() bool { return len(b.record().ticks) > 0 })
	if code, out, errOut := leasehold(t, nil, "status", "--store", storeURL, "--json", "e2e"); code != 0 || !strings.Contains(out, `"held"`) {
		t.Fatalf("status while b holds: exit %d: %s%s", code, out, errOut)
	}
	if err := b.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := b.exitCode(10 * time.Second); code != 5 {
		t.Fatalf("b's run exited %d, want its command's 5\n%s", code, b.log())
	}
	if br := b.record(); len(br.terms) != 1 {
		t.Fatalf("b's command recorded %d signals, want 1 (the forwarded SIGTERM)", len(br.terms))
	}
	code, out, errOut := leasehold(t, nil, "status", "--store", storeURL, "--json", "e2e")
	if code != 0 {
		t.Fatalf("status: exit %d: %s", code, errOut)
	}
	var views []struct {
		State  string `json:"state"`
		Holder string `json:"holder"`
		Token  int64  `json:"token"`
	}
	if err := json.Unmarshal([]byte(out), &views); err != nil || len(views) != 1 {
		t.Fatalf("status --json: %q: %v", out, err)
	}
	if views[0].State != "free" || views[0].Token != bStart.token {
		t.Fatalf("after b's SIGTERM the lease is %+v; want free, with token %d kept", views[0], bStart.token)
	}
	if !strings.Contains(b.log(), "released lease") {
		t.Fatalf("b's log does not say it released the lease:\n%s", b.log())
	}
}

// TestFrozenRunChildKilledBeforeSafeUntil freezes the leader's run (SIGSTOP to
// that one process, not its watchdog): run cannot act, yet its command, which
// ignores SIGTERM, must be dead by safeUntil. The child's own records say
// when it last ran and what deadline it had read.
func TestFrozenRunChildKilledBeforeSafeUntil(t *testing.T) {
	dir := t.TempDir()
	url := sqliteURL(t)
	// A kill margin of 300 ms (of the 800 ms between the renewal and
	// safeUntil): under CI's load (the chaos package runs beside this one on
	// two cores) the watchdog's SIGKILL once landed 100 ms late.
	args := append([]string{"--store", url, "--lease", "frozen", "--term-grace", "200ms", "--kill-margin", "300ms"}, timingArgs...)
	a := startRun(t, dir, "a", []string{"E2E_IGNORE_TERM=1"}, args...)
	waitUntil(t, 20*time.Second, "a's command to tick", func() bool { return len(a.record().ticks) >= 3 })
	b := startRun(t, dir, "b", nil, args...)
	waitUntil(t, 10*time.Second, "b to stand by", func() bool { return strings.Contains(b.log(), "standing by") })
	aStart := a.record().starts[0]

	frozenAt := freezeOutsideWrite(t, strings.TrimPrefix(url, "sqlite://"), a.cmd.Process.Pid)
	waitUntil(t, 10*time.Second, "a's command to be killed while a's run is frozen", func() bool { return processGone(aStart.pid) })
	killedAt := time.Now()
	if st := procState(a.cmd.Process.Pid); st != "T" {
		t.Fatalf("a's run is in state %q, not stopped (T): the test did not freeze it", st)
	}

	r := a.record()
	if len(r.errors) > 0 {
		t.Fatalf("a's command could not read its deadline: %v", r.errors)
	}
	if len(r.terms) == 0 {
		t.Fatal("a's command never got SIGTERM")
	}
	for _, tk := range r.ticks {
		if tk.at.After(tk.safeUntil) {
			t.Fatalf("a's command ran at %v, past the safeUntil %v it had read", tk.at.Format(time.RFC3339Nano), tk.safeUntil.Format(time.RFC3339Nano))
		}
	}
	last := r.ticks[len(r.ticks)-1]
	afterTerm := 0
	for _, tk := range r.ticks {
		if tk.at.After(r.terms[0]) {
			afterTerm++
		}
	}
	if afterTerm == 0 {
		t.Fatal("a's command, which ignores SIGTERM, did not run after it: the test does not show the SIGKILL")
	}
	t.Logf("a's run frozen at %s; command got SIGTERM %v before safeUntil, ran %d more ticks, last ran %v before safeUntil; reaped %v after the freeze",
		frozenAt.Format("15:04:05.000"), last.safeUntil.Sub(r.terms[0]).Round(time.Millisecond), afterTerm,
		last.safeUntil.Sub(last.at).Round(time.Millisecond), killedAt.Sub(frozenAt).Round(time.Millisecond))

	// b takes over, after a's command last ran.
	waitUntil(t, 20*time.Second, "b's command to start", func() bool { return len(b.record().starts) > 0 })
	bStart := b.record().starts[0]
	if bStart.token != aStart.token+1 || !bStart.at.After(last.at) {
		t.Fatalf("b started at %v with token %d; want after a's last tick %v, token %d", bStart.at, bStart.token, last.at, aStart.token+1)
	}
	// a wakes past safeUntil: it steps down and stands by.
	if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 10*time.Second, "a to step down and stand by", func() bool {
		l := a.log()
		return strings.Contains(l, `msg="term ended"`) && strings.Count(l, "standing by") >= 1
	})
	if m := regexp.MustCompile(`msg="term ended".* reason=(\w+)`).FindStringSubmatch(a.log()); m == nil || (m[1] != "expired" && m[1] != "lost") {
		t.Fatalf("a's term ended for reason %v, want expired or lost\n%s", m, a.log())
	}
	if len(a.record().starts) != 1 {
		t.Fatal("a started its command again, while b leads")
	}
}

// freezeOutsideWrite sends SIGSTOP to pid at a moment when it is not inside a
// write transaction on the SQLite file (it would then block every other
// writer until it wakes; see store/sqlite's docs), and returns when.
func freezeOutsideWrite(t *testing.T, path string, pid int) time.Time {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(0)&_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for try := 0; try < 100; try++ {
		syscall.Kill(pid, syscall.SIGSTOP)
		at := time.Now()
		tx, err := db.Begin()
		if err == nil {
			tx.Rollback()
			return at
		}
		syscall.Kill(pid, syscall.SIGCONT)
		timer := time.NewTimer(time.Duration(1+try) * time.Millisecond)
		<-timer.C
	}
	t.Fatal("could not freeze the process between two writes")
	return time.Time{}
}

// procState is the state letter of a process in /proc (T: stopped).
func procState(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "?"
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2 : i+3]
	}
	return "?"
}

func TestBadFlags(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"run", "--", "true"}, "--lease is required"},
		{[]string{"run", "--lease", "x"}, "no command given"},
		{[]string{"run", "--lease", "x", "--lease-duration", "abc", "--", "true"}, "--lease-duration"},
		{[]string{"run", "--lease", "x", "--renew-deadline", "20s", "--", "true"}, "--renew-deadline 20s must be less than --lease-duration"},
		{[]string{"run", "--lease", "x", "--retry-period", "11s", "--", "true"}, "--retry-period"},
		{[]string{"run", "--lease", "x", "--term-grace", "5s", "--", "true"}, "--term-grace"},
		{[]string{"run", "--lease", "x", "--jitter", "2", "--", "true"}, "--jitter"},
		{[]string{"run", "--lease", "x y", "--", "true"}, "--lease"},
		{[]string{"run", "--lease", "x", "--log-format", "xml", "--", "true"}, "--log-format"},
		{[]string{"run", "--lease", "x", "--no-such-flag", "--", "true"}, "--no-such-flag"},
		{[]string{"status", "--store", "nosuch://x"}, `unknown store scheme "nosuch"`},
		{[]string{"status", "--store", "sqlite:///tmp/x.db?tabel=y"}, `unknown URL parameter "tabel"`},
		{[]string{"release", "x"}, "--force is required"},
		{[]string{"history"}, "exactly one lease NAME"},
		{[]string{"doctor", "--samples", "0"}, "--samples"},
		{[]string{"no-such-command"}, `unknown command "no-such-command"`},
		{nil, "Usage:"},
	}
	for _, c := range cases {
		code, _, errOut := leasehold(t, nil, c.args...)
		if code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("leasehold %q: exit %d, stderr %q; want exit 2 and %q", c.args, code, errOut, c.want)
		}
	}
	// A URL that does not parse is refused without echoing its password.
	code, _, errOut := leasehold(t, nil, "status", "--store", "postgres://u:pa ss%zz@host/db")
	if code != 2 || strings.Contains(errOut, "pa ss") {
		t.Errorf("bad URL: exit %d, stderr %q; want 2, without the password", code, errOut)
	}
}

func TestHelpEveryLevel(t *testing.T) {
	code, out, _ := leasehold(t, nil, "--help")
	if code != 0 || !strings.Contains(out, "leasehold demo") {
		t.Fatalf("--help: exit %d\n%s", code, out)
	}
	for _, cmd := range []string{"run", "status", "history", "release", "migrate", "doctor", "demo"} {
		if !strings.Contains(out, "  "+cmd+" ") {
			t.Errorf("--help does not list %s", cmd)
		}
		for _, args := range [][]string{{cmd, "--help"}, {cmd, "-h"}, {"help", cmd}} {
			code, out, errOut := leasehold(t, nil, args...)
			if code != 0 || !strings.HasPrefix(out, "Usage: leasehold "+cmd) || !strings.Contains(out, "Example") || errOut != "" {
				t.Errorf("leasehold %v: exit %d, stdout %.60q, stderr %q", args, code, out, errOut)
			}
		}
	}
	if _, out, _ := leasehold(t, nil, "--help"); strings.Contains(out, "__watchdog") || strings.Contains(out, "__demo") {
		t.Error("--help lists the hidden internal commands")
	}
}

func TestUnreachableStore(t *testing.T) {
	cases := []struct{ url, name string }{
		{"postgres://leaser:hunter2secret@127.0.0.1:1/app?connect_timeout=2", "postgres://leaser:xxxxx@127.0.0.1:1/app"},
		{"sqlite:///nonexistent-dir-for-leasehold/leases.db", "sqlite:///nonexistent-dir-for-leasehold/leases.db"},
	}
	for _, c := range cases {
		for _, args := range [][]string{
			{"run", "--store", c.url, "--lease", "x", "--", "true"},
			{"status", "--store", c.url},
			{"doctor", "--store", c.url},
		} {
			code, _, errOut := leasehold(t, nil, args...)
			if code != 69 || !strings.Contains(errOut, c.name) || !strings.Contains(errOut, "unavailable") {
				t.Errorf("leasehold %s with an unreachable store: exit %d, stderr %q; want 69 naming %s", args[0], code, errOut, c.name)
			}
			if strings.Contains(errOut, "hunter2secret") {
				t.Errorf("leasehold %s printed the password: %s", args[0], errOut)
			}
		}
	}
	// The same through $LEASEHOLD_STORE.
	code, _, errOut := leasehold(t, []string{"LEASEHOLD_STORE=" + cases[0].url}, "status")
	if code != 69 || !strings.Contains(errOut, cases[0].name) || strings.Contains(errOut, "hunter2secret") {
		t.Errorf("$LEASEHOLD_STORE unreachable: exit %d, stderr %q", code, errOut)
	}
}

func TestDefaultStore(t *testing.T) {
	home := t.TempDir()
	want := filepath.Join(home, ".local", "state", "leasehold", "leases.db")
	// A read-only command creates no default store: it says there is none.
	code, _, errOut := leasehold(t, []string{"HOME=" + home, "XDG_STATE_HOME="}, "status")
	if code != 69 || !strings.Contains(errOut, "no default store yet") || !strings.Contains(errOut, want) {
		t.Fatalf("status with no store yet: exit %d, stderr %q; want 69 naming %s", code, errOut, want)
	}
	if _, err := os.Stat(filepath.Join(home, ".local")); !os.IsNotExist(err) {
		t.Fatalf("status created %s: %v", filepath.Join(home, ".local"), err)
	}
	// migrate sets it up, and says where.
	code, _, errOut = leasehold(t, []string{"HOME=" + home, "XDG_STATE_HOME="}, "migrate")
	if code != 0 || !strings.Contains(errOut, "using the default store sqlite://"+want) {
		t.Fatalf("migrate with no store: exit %d, stderr %q; want it to name %s", code, errOut, want)
	}
	if fi, err := os.Stat(want); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("default store file: %v (mode %v), want it created with mode 0600", err, fi)
	}
	if code, _, errOut = leasehold(t, []string{"HOME=" + home, "XDG_STATE_HOME="}, "status"); code != 0 {
		t.Fatalf("status on the default store: exit %d, stderr %q", code, errOut)
	}
	xdg := t.TempDir()
	code, _, errOut = leasehold(t, []string{"HOME=" + home, "XDG_STATE_HOME=" + xdg}, "migrate")
	want = filepath.Join(xdg, "leasehold", "leases.db")
	if code != 0 || !strings.Contains(errOut, want) {
		t.Fatalf("migrate with XDG_STATE_HOME: exit %d, stderr %q; want %s", code, errOut, want)
	}
}

func TestDemo(t *testing.T) {
	start := time.Now()
	code, out, errOut := leasehold(t, nil, "demo")
	if code != 0 {
		t.Fatalf("demo: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	for _, want := range []string{
		"acquired the lease: token 1",
		"froze node-",
		"took over: token 2 (expired-takeover",
		"wrote with token 2: accepted",
		"wrote with token 1 (woke after a gap of",
		"REFUSED by the fence",
		"its term 1 ended",
		"sent terminated to its worker, which exited with code 0; released token 2; run exited 0",
		"Result: one leader at a time",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("demo output:\n%s", out)
	}
	t.Logf("demo took %v", time.Since(start).Round(time.Millisecond))
}

// TestStatusHistoryForceRelease: an operator evicts a running leader. Its run
// hears of it at the next renewal, stops its command, and contends again; the
// next grant has a higher token, and the history shows it all.
func TestStatusHistoryForceRelease(t *testing.T) {
	dir := t.TempDir()
	url := sqliteURL(t)
	a := startRun(t, dir, "a", nil, append([]string{"--store", url, "--lease", "ops"}, timingArgs...)...)
	waitUntil(t, 20*time.Second, "a's command to start", func() bool { return len(a.record().starts) > 0 })

	code, out, errOut := leasehold(t, nil, "status", "--store", url)
	if code != 0 || !regexp.MustCompile(`ops\s+held\s+a-[0-9a-f]{8}\s+1\s`).MatchString(out) {
		t.Fatalf("status: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = leasehold(t, nil, "release", "--force", "--store", url, "ops")
	if code != 0 || !strings.Contains(out, "released ops: evicted a-") {
		t.Fatalf("release --force: exit %d\n%s%s", code, out, errOut)
	}
	waitUntil(t, 10*time.Second, "a to lead again with token 2", func() bool {
		r := a.record()
		return len(r.starts) == 2 && r.starts[1].token == 2
	})
	if r := a.record(); len(r.terms) != 1 || r.terms[0].After(r.starts[1].at) {
		t.Fatalf("a's first command was not stopped before the second started: %+v", r)
	}
	code, out, _ = leasehold(t, nil, "history", "--store", url, "ops")
	for _, re := range []string{`acquired\s+a-\w+\s+2`, `force-released\s+a-\w+\s+1`, `acquired\s+a-\w+\s+1`} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("history lacks %s:\n%s", re, out)
		}
	}
	if code != 0 {
		t.Fatalf("history: exit %d", code)
	}
	code, out, _ = leasehold(t, nil, "history", "--store", url, "--json", "--limit", "1", "ops")
	var hist []struct {
		Event string `json:"event"`
		Token int64  `json:"token"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &hist) != nil || len(hist) != 1 || hist[0].Event != "acquired" || hist[0].Token != 2 {
		t.Fatalf("history --json --limit 1: exit %d, %s", code, out)
	}
	code, out, _ = leasehold(t, nil, "release", "--force", "--store", url, "nope")
	if code != 1 {
		t.Fatalf("release of an unknown lease: exit %d, want 1", code)
	}
}

// TestHTTP checks /healthz, /leader and /metrics of a leading run.
func TestHTTP(t *testing.T) {
	dir := t.TempDir()
	url := sqliteURL(t)
	a := startRun(t, dir, "a", nil, append([]string{"--store", url, "--lease", "web", "--http", "127.0.0.1:0"}, timingArgs...)...)
	var addr string
	waitUntil(t, 20*time.Second, "a to lead and serve HTTP", func() bool {
		m := regexp.MustCompile(`msg="serving the status page, /healthz.*addr=(127\.0\.0\.1:\d+)`).FindStringSubmatch(a.log())
		if m != nil {
			addr = m[1]
		}
		return addr != "" && len(a.record().ticks) > 0
	})
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// The status page, the same as `leasehold serve`'s, marks this node.
	if code, body := get("/"); code != 200 || !strings.Contains(body, `<script src="/static/app.js"`) {
		t.Errorf("GET / = %d:\n%s", code, body)
	}
	waitUntil(t, 10*time.Second, "the page's snapshot to show a leading", func() bool {
		_, body := get("/api/leases")
		return strings.Contains(body, `"name":"web","state":"held"`) && strings.Contains(body, `"self":true`)
	})
	code, body := get("/leader")
	var leader struct {
		Name  string `json:"name"`
		State string `json:"state"`
		Token int64  `json:"token"`
		Self  bool   `json:"self"`
	}
	// Token 1 unless a grant came back too late to trust and was given back
	// (a loaded machine): each grant on this SQLite file is the next token,
	// and this node is the only one asking, so every later check uses tok.
	if code != 200 || json.Unmarshal([]byte(body), &leader) != nil || leader.State != "held" || leader.Token < 1 || !leader.Self || leader.Name != "web" {
		t.Errorf("/leader = %d %s", code, body)
	}
	tok := leader.Token
	if code, body := get("/healthz"); code != 200 || !strings.Contains(body, fmt.Sprintf("leading with token %d", tok)) {
		t.Errorf("/healthz = %d %q, want leading with token %d", code, body, tok)
	}
	waitUntil(t, 5*time.Second, "a renewal", func() bool {
		_, body := get("/metrics")
		return !strings.Contains(body, `leasehold_renew_latency_seconds_count{lease="web"} 0`)
	})
	_, body = get("/metrics")
	for _, want := range []string{
		`leasehold_is_leader{lease="web"} 1`,
		fmt.Sprintf(`leasehold_token{lease="web"} %d`, tok),
		`leasehold_terms_started_total{lease="web"} 1`,
		fmt.Sprintf(`leasehold_acquire_attempts_total{lease="web",result="granted"} %d`, tok),
		`leasehold_terms_ended_total{lease="web",reason="expired"} 0`,
		`leasehold_renew_latency_seconds_bucket{lease="web",le="+Inf"}`,
		`# TYPE leasehold_renew_latency_seconds histogram`,
		`leasehold_command_starts_total{lease="web"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if m := regexp.MustCompile(`leasehold_safe_until_remaining_seconds\{lease="web"\} ([0-9.e-]+)`).FindStringSubmatch(body); m == nil {
		t.Errorf("/metrics has no safe-until gauge")
	} else if v, _ := strconv.ParseFloat(m[1], 64); v <= 0 || v > 1.2 {
		t.Errorf("safe-until gauge %v, want in (0, 1.2] seconds", v)
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s", body)
	}
}

// TestSIGINTForwarded: SIGINT to run reaches the command as SIGINT (not as
// SIGTERM), once; run waits for it and exits with its code.
func TestSIGINTForwarded(t *testing.T) {
	dir := t.TempDir()
	a := startRun(t, dir, "a", []string{"E2E_TERM_EXIT=9"}, append([]string{"--store", sqliteURL(t), "--lease", "int"}, timingArgs...)...)
	waitUntil(t, 20*time.Second, "a's command to tick", func() bool { return len(a.record().ticks) > 0 })
	if err := a.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := a.exitCode(10 * time.Second); code != 9 {
		t.Fatalf("run exited %d, want the command's 9", code)
	}
	if r := a.record(); len(r.sigs) != 1 || r.sigs[0] != "interrupt" {
		t.Fatalf("the command got signals %q, want exactly one interrupt", r.sigs)
	}
}

// TestRestart: with --restart, a command that exits 0 is run again in the
// same term.
func TestRestart(t *testing.T) {
	dir := t.TempDir()
	a := startRun(t, dir, "a", []string{"E2E_EXIT_AFTER=3"}, append([]string{"--store", sqliteURL(t), "--lease", "again", "--restart", "--restart-delay", "50ms"}, timingArgs...)...)
	waitUntil(t, 20*time.Second, "three runs of the command", func() bool { return len(a.record().starts) >= 3 })
	r := a.record()
	for _, s := range r.starts {
		if s.token != r.starts[0].token {
			t.Fatalf("restarted command got token %d, want the term's %d", s.token, r.starts[0].token)
		}
	}
}

// TestCommandExitCode: without --restart, run exits with its command's code
// after releasing the lease.
func TestCommandExitCode(t *testing.T) {
	url := sqliteURL(t)
	code, _, errOut := leasehold(t, nil, append([]string{"run", "--store", url, "--lease", "once"}, append(timingArgs, "--", "sh", "-c", "test \"$LEASEHOLD_TOKEN\" = 1 && exit 42")...)...)
	if code != 42 {
		t.Fatalf("run exited %d, want the command's 42\n%s", code, errOut)
	}
	code, out, _ := leasehold(t, nil, "status", "--store", url, "--json", "once")
	if code != 0 || !strings.Contains(out, `"state":"free"`) || !strings.Contains(out, `"token":1`) {
		t.Fatalf("after the command exited the lease is %s, want released with token 1", out)
	}
	code, _, errOut = leasehold(t, nil, "run", "--store", url, "--lease", "once", "--", "/nonexistent/command")
	if code != 127 {
		t.Fatalf("run of a missing command: exit %d, want 127\n%s", code, errOut)
	}
}

func TestDoctorAndMigrate(t *testing.T) {
	url := sqliteURL(t)
	code, out, errOut := leasehold(t, nil, "migrate", "--store", url)
	if code != 0 || !strings.Contains(out, ": migrated: ") {
		t.Fatalf("migrate: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = leasehold(t, nil, "doctor", "--store", url)
	if code != 0 || !strings.Contains(out, "safety margin      5s") || !strings.Contains(out, "OK: the arithmetic is safe") {
		t.Fatalf("doctor with default timings: exit %d\n%s%s", code, out, errOut)
	}
	code, out, _ = leasehold(t, nil, "doctor", "--store", url, "--lease-duration", "10s", "--renew-deadline", "9900ms", "--renew-interval", "9s", "--retry-period", "2s")
	if code != 1 || !strings.Contains(out, "WARNING: the safety margin 100ms") || !strings.Contains(out, "renewal") {
		t.Fatalf("doctor with a thin margin: exit %d, want 1 with warnings\n%s", code, out)
	}
}
