package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
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
	syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	<-s.exited
	return nil
}
