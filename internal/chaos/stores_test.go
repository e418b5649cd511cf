package chaos

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/internal/freeport"
	"github.com/leasehold/leasehold/internal/testenv"
)

func randomSuffix() string {
	var b [4]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// pgURL returns a URL on the machine's PostgreSQL with a schema of the
// test's own, dropped when the test ends.
func pgURL(t *testing.T) string {
	t.Helper()
	addr := testenv.Env("LEASEHOLD_PG_ADDR", "127.0.0.1:5432")
	testenv.RequireTCP(t, "PostgreSQL", addr, "start PostgreSQL on 127.0.0.1:5432 (user postgres, trust auth, database test)")
	schema := "chaos_" + randomSuffix()
	base := fmt.Sprintf("postgres://postgres@%s/test?sslmode=disable", addr)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Logf("drop schema %s: %v", schema, err)
			return
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE"); err != nil {
			t.Logf("drop schema %s: %v", schema, err)
		}
	})
	return base + "&schema=" + schema
}

// redisServer is a redis-server of the test's own, on a free port, with an
// fsync on every write (appendfsync always): a restart keeps every token
// counter, as a production Redis holding fencing tokens must. It is the
// chaos harness's StoreControl: Stop kills it (SIGKILL), Start starts it
// again on the same port and data.
type redisServer struct {
	t      *testing.T
	bin    string
	dir    string
	port   int
	cmd    *exec.Cmd
	exited chan struct{}
}

func startRedis(t *testing.T) *redisServer {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		testenv.Missing(t, "redis-server", "install redis-server (apt-get install redis-server)")
	}
	// A port below the kernel's ephemeral range (freeport): one taken from
	// a listener on port 0 and closed was once handed by the kernel to
	// another test process's HTTP server before redis-server bound it, and
	// the run talked to that server ("can't parse map reply: HTTP/1.1 400").
	r := &redisServer{t: t, bin: bin, dir: t.TempDir(), port: freeport.ForTest(t)}
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Stop(context.Background()) })
	return r
}

func (r *redisServer) URL() string { return fmt.Sprintf("redis://127.0.0.1:%d/0", r.port) }

func (r *redisServer) Start(ctx context.Context) error {
	r.cmd = exec.Command(r.bin, "--port", fmt.Sprint(r.port), "--bind", "127.0.0.1", "--save", "",
		"--appendonly", "yes", "--appendfsync", "always", "--dir", r.dir, "--daemonize", "no",
		"--logfile", filepath.Join(r.dir, "redis.log"))
	r.cmd.Stdout, r.cmd.Stderr = os.Stderr, os.Stderr
	if err := r.cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	r.exited = make(chan struct{})
	go func(c *exec.Cmd, done chan struct{}) { c.Wait(); close(done) }(r.cmd, r.exited)
	// Poll until it answers a PING as Redis does, with a deadline: +PONG,
	// or an error such as -LOADING while it reads its append-only file
	// after a restart (it then runs, as a restarted server does; clients
	// see the error until it is done). A port that accepts but answers
	// otherwise is another process's, and said so.
	deadline := time.Now().Add(15 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", r.port), time.Second)
		if err == nil {
			answer, perr := ping(c)
			c.Close()
			if perr == nil && (strings.HasPrefix(answer, "+") || strings.HasPrefix(answer, "-")) {
				return nil
			}
			if perr == nil {
				return fmt.Errorf("port %d answered a PING with %q, not as Redis does: another process listens there; see %s", r.port, answer, filepath.Join(r.dir, "redis.log"))
			}
		}
		select {
		case <-r.exited:
			return fmt.Errorf("redis-server exited at start; see %s", filepath.Join(r.dir, "redis.log"))
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server did not listen on %d within 15s", r.port)
		}
		time.Sleep(20 * time.Millisecond) // polling interval
	}
}

// ping sends a Redis PING on c and returns the first line of the answer.
func ping(c net.Conn) (string, error) {
	c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimRight(line, "\r\n"), err
}

func (r *redisServer) Stop(context.Context) error {
	if r.cmd == nil || r.cmd.Process == nil {
		return nil
	}
	select {
	case <-r.exited:
		return nil
	default:
	}
	r.cmd.Process.Kill()
	<-r.exited
	return nil
}
