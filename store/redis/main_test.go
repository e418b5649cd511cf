package redis_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/freeport"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/testenv"
	lhredis "github.com/leasehold/leasehold/store/redis"
)

// The tests talk to the Redis on this machine (LEASEHOLD_REDIS_ADDR, default
// 127.0.0.1:6379), each under its own random key prefix, and delete only the
// keys under that prefix. Tests that kill Redis start their own redis-server.

const howToGetRedis = "start redis-server on 127.0.0.1:6379 (apt-get install redis-server) or set LEASEHOLD_REDIS_ADDR"

func redisAddr(t testing.TB) string {
	t.Helper()
	return testenv.RequireTCP(t, "Redis", testenv.Env("LEASEHOLD_REDIS_ADDR", "127.0.0.1:6379"), howToGetRedis)
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// admin is a client as the default user, closed at cleanup.
func admin(t testing.TB, addr string) *goredis.Client {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	t.Cleanup(func() { c.Close() })
	return c
}

// freshPrefix returns a key prefix no other test uses, and deletes its keys
// when the test ends.
func freshPrefix(t testing.TB, addr string) string {
	t.Helper()
	prefix := "lhtest:" + randHex(6) + ":"
	c := admin(t, addr)
	t.Cleanup(func() { deletePrefix(t, c, prefix) })
	return prefix
}

func deletePrefix(t testing.TB, c *goredis.Client, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	it := c.Scan(ctx, 0, prefix+"*", 500).Iterator()
	var keys []string
	for it.Next(ctx) {
		keys = append(keys, it.Val())
	}
	if err := it.Err(); err != nil {
		t.Errorf("cleanup: scan %s*: %v", prefix, err)
		return
	}
	for len(keys) > 0 {
		n := min(len(keys), 500)
		if err := c.Del(ctx, keys[:n]...).Err(); err != nil {
			t.Errorf("cleanup: del: %v", err)
			return
		}
		keys = keys[n:]
	}
}

func storeURL(addr, prefix string) string {
	return "redis://" + addr + "/0?prefix=" + prefix
}

func openStore(t testing.TB, rawURL string) *lhredis.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := lhredis.Open(ctx, rawURL)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// redisServer is a redis-server process this test started: no persistence,
// bound to loopback. Kill and Start act on its PID only.
type redisServer struct {
	t    testing.TB
	port int
	args []string
	dir  string
	cmd  *exec.Cmd
	exit chan struct{}
}

func newRedisServer(t testing.TB, extra ...string) *redisServer {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		testenv.Missing(t, "redis-server", "apt-get install redis-server")
	}
	port := freeport.ForTest(t)
	dir := t.TempDir()
	args := []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", dir, "--logfile", filepath.Join(dir, "redis.log")}
	args = append(args, extra...)
	r := &redisServer{t: t, port: port, args: append([]string{bin}, args...), dir: dir}
	r.Start()
	t.Cleanup(r.Kill)
	return r
}

func (r *redisServer) Addr() string { return "127.0.0.1:" + strconv.Itoa(r.port) }

// Start starts the server and waits until it listens.
func (r *redisServer) Start() {
	r.t.Helper()
	r.cmd = exec.Command(r.args[0], r.args[1:]...)
	r.cmd.Dir = r.dir
	if err := r.cmd.Start(); err != nil {
		r.t.Fatalf("start redis-server: %v", err)
	}
	r.exit = make(chan struct{})
	go func(cmd *exec.Cmd, exit chan struct{}) { cmd.Wait(); close(exit) }(r.cmd, r.exit)
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", r.Addr(), time.Second)
		if err == nil {
			c.Close()
			return
		}
		select {
		case <-r.exit:
			log, _ := os.ReadFile(filepath.Join(r.dir, "redis.log"))
			r.t.Fatalf("redis-server exited at start: %s", log)
		default:
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("redis-server on %s did not listen within 20s", r.Addr())
		}
		timer := time.NewTimer(20 * time.Millisecond)
		<-timer.C
	}
}

// Kill sends SIGKILL to the server's PID and waits for it to exit.
func (r *redisServer) Kill() {
	if r.cmd == nil || r.cmd.Process == nil {
		return
	}
	select {
	case <-r.exit:
	default:
		r.cmd.Process.Kill()
		<-r.exit
	}
	r.cmd = nil
}

func (r *redisServer) String() string {
	return fmt.Sprintf("redis-server pid %d on %s", r.cmd.Process.Pid, r.Addr())
}

// TestMain deletes the examples' keys after the run.
func TestMain(m *testing.M) {
	code := m.Run()
	c := goredis.NewClient(&goredis.Options{Addr: testenv.Env("LEASEHOLD_REDIS_ADDR", "127.0.0.1:6379")})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	it := c.Scan(ctx, 0, "leasehold-example:*", 500).Iterator()
	for it.Next(ctx) {
		c.Del(ctx, it.Val())
	}
	cancel()
	c.Close()
	os.Exit(code)
}
