package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/internal/freeport"
	"github.com/leasehold/leasehold/internal/testenv"
)

// pgServer is a PostgreSQL server of the test's own: initdb into a
// temporary directory, started on a free port of 127.0.0.1. As the harness's
// StoreControl, Stop kills it with SIGKILL (by its PID: a crash, not a
// shutdown) and Start starts it again on the same data directory, which
// recovers from its WAL. The machine's shared server is never touched.
//
// PostgreSQL refuses to run as root: when the test runs as root, initdb and
// the server run as the OS user postgres (the Debian package's), with the
// data directory chowned to it.
type pgServer struct {
	bin    string // the directory holding initdb and postgres
	dir    string // the data directory
	port   int
	cred   *syscall.Credential
	cmd    *exec.Cmd
	exited chan struct{}
	log    string
}

// pgBinDir finds the newest /usr/lib/postgresql/*/bin holding initdb and
// postgres.
func pgBinDir() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	for i := len(dirs) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(dirs[i], "initdb")); err == nil {
			if _, err := os.Stat(filepath.Join(dirs[i], "postgres")); err == nil {
				return dirs[i], nil
			}
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), nil
	}
	return "", errors.New("no initdb and postgres in /usr/lib/postgresql/*/bin or on PATH")
}

func startPG(t *testing.T) *pgServer {
	t.Helper()
	bin, err := pgBinDir()
	if err != nil {
		testenv.Missing(t, "PostgreSQL server binaries ("+err.Error()+")", "install postgresql (apt-get install postgresql)")
	}
	s := &pgServer{bin: bin, port: freeport.ForTest(t)}
	// Not t.TempDir: its parents are private to this user, and the server
	// may run as another.
	base, err := os.MkdirTemp("", "leasehold-chaos-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	s.dir = filepath.Join(base, "data")
	s.log = filepath.Join(base, "postgres.log")
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			testenv.Missing(t, "an OS user postgres to run a private PostgreSQL server as (PostgreSQL refuses to run as root; the test runs as root)",
				"install the postgresql package (it creates the user), or run the test as a user other than root")
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		s.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(base, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", s.dir, "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8", "--no-instructions")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Stop(context.Background()) })
	return s
}

// URL is a store URL on the server's database postgres, with a schema.
func (s *pgServer) URL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable&schema=chaos", s.port)
}

func (s *pgServer) Start(ctx context.Context) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := s.launch(ctx, deadline)
		if !errors.Is(err, errExitedAtStart) {
			return err
		}
		// A start right after a crash can find the old backends, killed
		// with the postmaster, not yet gone: PostgreSQL then refuses the
		// shared memory they still hold ("pre-existing shared memory block
		// is still in use") and exits. They go within moments; try again.
		if time.Now().After(deadline) {
			return fmt.Errorf("postgres exited at start, again for 30 s; the end of its log:\n%s", s.logTail())
		}
		// A process of the old server that Stop did not find as the
		// postmaster's child (a CI run's start was refused for 30 s) still
		// runs in the data directory: kill it.
		waitGone(s.killLeftovers(), 10*time.Second)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond): // for the old backends to go
		}
	}
}

var errExitedAtStart = errors.New("postgres exited at start")

// launch starts the postmaster once and waits until it answers queries, it
// exits (errExitedAtStart), or the deadline passes.
func (s *pgServer) launch(ctx context.Context, deadline time.Time) error {
	logf, err := os.OpenFile(s.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	// fsync stays on: a crash must not lose a committed token.
	s.cmd = exec.Command(filepath.Join(s.bin, "postgres"), "-D", s.dir, "-p", strconv.Itoa(s.port), "-h", "127.0.0.1",
		"-k", "", "-c", "max_connections=300", "-c", "shared_buffers=32MB")
	// Its own process group: a crash kills the postmaster and every backend
	// at once, as a machine's crash would.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred, Setpgid: true}
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	if err := s.cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start postgres: %w", err)
	}
	s.exited = make(chan struct{})
	go func(c *exec.Cmd, done chan struct{}) { c.Wait(); logf.Close(); close(done) }(s.cmd, s.exited)
	for {
		// Up means answering queries: after a crash, the server listens
		// while it recovers from its WAL, and refuses logins until done.
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		c, err := pgx.Connect(cctx, fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", s.port))
		if err == nil {
			_, err = c.Exec(cctx, "SELECT 1")
			c.Close(cctx)
		}
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-s.exited:
			return errExitedAtStart
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("postgres did not answer on %d within 30s; the end of its log:\n%s", s.port, s.logTail())
		}
		time.Sleep(20 * time.Millisecond) // polling interval
	}
}

// logTail is the end of the server's log (it lives in a temporary directory
// that is gone when the test ends, so errors carry it).
func (s *pgServer) logTail() string {
	b, _ := os.ReadFile(s.log)
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return string(b)
}

// Stop kills the postmaster and its backends with SIGKILL: the process group
// led by the postmaster's PID. The next start recovers from the WAL.
func (s *pgServer) Stop(context.Context) error {
	if s.cmd == nil || s.cmd.Process == nil {
		return nil
	}
	select {
	case <-s.exited:
		return nil
	default:
	}
	// Every child of the postmaster (backends, the checkpointer, the WAL
	// writer) leads a session of its own (PostgreSQL calls setsid in each),
	// so killing the postmaster's process group left them running: orphans
	// that went on answering and committing for moments after the "crash"
	// (a register write sent after it returned accepted 557 ms later, past
	// its own 275 ms deadline and past the writer's safeUntil). Stop the
	// postmaster so that it forks no more, then kill it and every child at
	// once, as a machine's crash would.
	pid := s.cmd.Process.Pid
	syscall.Kill(pid, syscall.SIGSTOP)
	kids := childrenOf(pid)
	for _, k := range kids {
		syscall.Kill(k, syscall.SIGKILL)
	}
	syscall.Kill(-pid, syscall.SIGKILL)
	<-s.exited
	waitGone(kids, 10*time.Second)
	return nil
}

// killLeftovers kills, with SIGKILL, every process whose working directory
// is this server's data directory (each PostgreSQL process runs there; the
// directory is this test's own), and returns their PIDs.
func (s *pgServer) killLeftovers() []int {
	pids := procsWhere(func(pid int) bool {
		cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid))
		return err == nil && cwd == s.dir
	})
	for _, pid := range pids {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	return pids
}

// TestPGServerKillsLeftovers: a process left running in the server's data
// directory is killed; one elsewhere is not (the control).
func TestPGServerKillsLeftovers(t *testing.T) {
	s := &pgServer{dir: t.TempDir()}
	start := func(dir string) *exec.Cmd {
		c := exec.Command("sleep", "60")
		c.Dir = dir
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Process.Kill(); c.Wait() })
		return c
	}
	left, other := start(s.dir), start(t.TempDir())
	if got := s.killLeftovers(); !slices.Equal(got, []int{left.Process.Pid}) {
		t.Fatalf("killed %v, want only %d (the process in the data directory)", got, left.Process.Pid)
	}
	if err := left.Wait(); err == nil {
		t.Fatal("the process in the data directory exited cleanly; want it killed")
	}
	if _, state, ok := procStat(other.Process.Pid); !ok || state == 'Z' {
		t.Fatal("control: the process elsewhere is gone too")
	}
}

// childrenOf lists the processes whose parent is pid (from /proc; none where
// there is no /proc).
func childrenOf(pid int) []int {
	return procsWhere(func(k int) bool {
		ppid, state, ok := procStat(k)
		return ok && ppid == pid && state != 'Z'
	})
}

// procsWhere lists the processes in /proc for which match is true (none
// where there is no /proc).
func procsWhere(match func(pid int) bool) []int {
	dirs, _ := os.ReadDir("/proc")
	var out []int
	for _, d := range dirs {
		if pid, err := strconv.Atoi(d.Name()); err == nil && match(pid) {
			out = append(out, pid)
		}
	}
	return out
}

// procStat reads a process's parent and state from /proc/PID/stat.
func procStat(pid int) (ppid int, state byte, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, false
	}
	// "pid (comm) state ppid ...": comm may hold spaces and parentheses.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 || len(f[0]) != 1 {
		return 0, 0, false
	}
	ppid, err = strconv.Atoi(f[1])
	return ppid, f[0][0], err == nil
}

// waitGone waits up to d for the processes to be gone (or zombies, which
// hold no shared memory).
func waitGone(pids []int, d time.Duration) {
	deadline := time.Now().Add(d)
	for _, p := range pids {
		for time.Now().Before(deadline) {
			if _, state, ok := procStat(p); !ok || state == 'Z' {
				break
			}
			time.Sleep(10 * time.Millisecond) // an outside process's exit: nothing to wait on
		}
	}
}

// TestPGServerStopKillsEveryProcess: the store-restart fault's crash leaves
// no process of the server behind, a busy backend included (each backend
// leads a session of its own, out of reach of the postmaster's group).
func TestPGServerStopKillsEveryProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a PostgreSQL server")
	}
	s := startPG(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	raw := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", s.port)
	conn, err := pgx.Connect(ctx, raw)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var backend int
	if err := conn.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&backend); err != nil {
		t.Fatal(err)
	}
	kids := childrenOf(s.cmd.Process.Pid)
	if !slices.Contains(kids, backend) {
		t.Fatalf("the backend %d is not among the postmaster's children %v", backend, kids)
	}
	// Busy when the crash comes: sleeping inside a statement, not waiting
	// for its client.
	go conn.Exec(ctx, `SELECT pg_sleep(20)`)
	for {
		var busy bool
		probe, err := pgx.Connect(ctx, raw)
		if err != nil {
			t.Fatal(err)
		}
		err = probe.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND state = 'active')`, backend).Scan(&busy)
		probe.Close(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if busy {
			break
		}
	}
	if err := s.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	for _, k := range kids {
		if _, state, ok := procStat(k); ok && state != 'Z' {
			t.Errorf("process %d of the server is still running (state %c) after Stop", k, state)
		}
	}
}
