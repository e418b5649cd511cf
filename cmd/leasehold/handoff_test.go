package main_test

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/store/kubernetes/kubetest"
)

// The hand-off tests start a holder and a standby `leasehold run` with a
// retry period of one minute on each store that has a watch (store.Watcher),
// let the holder's command exit, and measure how long the standby's command
// takes to start. A standby that polls waits out its retry period (a minute,
// plus jitter, since the holder's lease has three minutes left); a standby
// the store's watch wakes starts within milliseconds of the release. The CLI
// once hid the watch behind a wrapper (issue 14): these tests failed then.
//
// SQLite has no watch (no store.Watcher): a standby there polls by design, so
// it is not in this list.

// handOffBound is far below the one-minute retry period and far above any
// real hand-off, so a slow machine cannot fail the test and a polling
// standby cannot pass it.
const handOffBound = 20 * time.Second

var handOffArgs = []string{"--lease-duration", "3m", "--retry-period", "1m", "--jitter", "0.01"}

func TestHandOffWokenPostgres(t *testing.T) { handOff(t, postgresURL(t)) }

func TestHandOffWokenRedis(t *testing.T) {
	addr := testenv.RequireTCP(t, "Redis", testenv.Env("LEASEHOLD_REDIS_ADDR", "127.0.0.1:6379"), "start Redis on 127.0.0.1:6379")
	handOff(t, fmt.Sprintf("redis://%s/0?prefix=lh-cli-handoff-%d:", addr, rand.Uint64()))
}

func TestHandOffWokenEtcd(t *testing.T) {
	handOff(t, "etcd://"+embeddedEtcd(t)+"/lh-cli-handoff")
}

// TestHandOffWokenMySQL: the standby's Store polls once an hour here, so
// only the store's doorbell (a GET_LOCK the holder's run lets go at its
// release) can wake it within handOffBound. With doorbells=0 it would wait
// for its retry period; the store's TestDoorbellWakesAWaiterOnAnotherStore
// is that control, without the minute.
func TestHandOffWokenMySQL(t *testing.T) {
	handOff(t, mysqlURL(t)+"?create_if_missing=true&watch_interval=1h")
}

func TestHandOffWokenKubernetes(t *testing.T) {
	handOff(t, kubernetesURL(t, kubeServer(t)))
}

// kubeServer starts a kube-apiserver for this test, stopped when it ends;
// without the binaries the test is skipped loudly (failed in CI).
func kubeServer(t *testing.T) *kubetest.Server {
	t.Helper()
	if os.Getenv(kubetest.EnvBin) == "" {
		testenv.Missing(t, "kube-apiserver", "set "+kubetest.EnvBin+" to the directory hack/kube-apiserver/build.sh fills")
	}
	srv, err := kubetest.Start(kubetest.Options{})
	if err != nil {
		t.Fatalf("start kube-apiserver: %v", err)
	}
	t.Cleanup(srv.Stop)
	return srv
}

// kubernetesURL is the store URL of srv's default namespace, as the admin.
func kubernetesURL(t *testing.T, srv *kubetest.Server) string {
	t.Helper()
	kc, err := srv.Kubeconfig("admin", srv.AdminToken, "test", "default")
	if err != nil {
		t.Fatal(err)
	}
	return "kubernetes://default?kubeconfig=" + url.QueryEscape(kc)
}

// embeddedEtcd runs etcd's own server in the test process and returns its
// client address.
func embeddedEtcd(t *testing.T) string {
	t.Helper()
	free := func() int {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return l.Addr().(*net.TCPAddr).Port
	}
	cfg := embed.NewConfig()
	cfg.Name = "handoff"
	cfg.Dir = t.TempDir()
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cfg.UnsafeNoFsync = true
	client := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", free())}
	peer := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", free())}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = cfg.Name + "=" + peer.String()
	cfg.ListenMetricsUrls = nil
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatalf("start etcd: %v", err)
	}
	t.Cleanup(e.Close)
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		t.Fatal("etcd did not become ready")
	}
	return client.Host
}

// lineProc is a `leasehold run` whose output lines the test reads.
type lineProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	mu    sync.Mutex
	lines []string
	seen  chan struct{} // a line arrived (coalesced)
	done  chan struct{} // the process was waited for
}

func startLines(t *testing.T, storeURL, lease string, command ...string) *lineProc {
	t.Helper()
	args := append([]string{"run", "--store", storeURL, "--lease", lease}, handOffArgs...)
	args = append(append(args, "--"), command...)
	return startProc(t, []string{"LEASEHOLD_STORE="}, args...)
}

// startProc starts leasehold with args and extra environment variables, and
// collects its stdout and stderr lines.
func startProc(t *testing.T, env []string, args ...string) *lineProc {
	t.Helper()
	p := &lineProc{cmd: exec.Command(leaseholdBin, args...), seen: make(chan struct{}, 1), done: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), env...)
	var err error
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	errp, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for _, r := range []io.Reader{out, errp} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sc := bufio.NewScanner(r)
			for sc.Scan() {
				p.mu.Lock()
				p.lines = append(p.lines, sc.Text())
				p.mu.Unlock()
				select {
				case p.seen <- struct{}{}:
				default:
				}
			}
		}()
	}
	go func() {
		wg.Wait()
		p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

func (p *lineProc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.lines, "\n")
}

// waitLine waits until a line contains s, and returns when it was seen.
func (p *lineProc) waitLine(t *testing.T, s string, timeout time.Duration) time.Time {
	t.Helper()
	return p.wait(t, s, timeout, strings.Contains)
}

// waitExact waits for a line that is exactly s (a line the command printed,
// not run's log line that quotes the command).
func (p *lineProc) waitExact(t *testing.T, s string, timeout time.Duration) time.Time {
	t.Helper()
	return p.wait(t, s, timeout, func(a, b string) bool { return a == b })
}

func (p *lineProc) wait(t *testing.T, s string, timeout time.Duration, match func(line, s string) bool) time.Time {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		p.mu.Lock()
		for _, l := range p.lines {
			if match(l, s) {
				p.mu.Unlock()
				return time.Now()
			}
		}
		p.mu.Unlock()
		select {
		case <-p.seen:
		case <-p.done:
			// One last look: the line may have come with the end.
			p.mu.Lock()
			lines := p.lines
			all := strings.Join(p.lines, "\n")
			p.mu.Unlock()
			for _, l := range lines {
				if match(l, s) {
					return time.Now()
				}
			}
			t.Fatalf("leasehold exited (%v) without printing %q:\n%s", p.cmd.ProcessState, s, all)
		case <-deadline.C:
			p.mu.Lock()
			all := strings.Join(p.lines, "\n")
			p.mu.Unlock()
			t.Fatalf("no line with %q within %v:\n%s", s, timeout, all)
		}
	}
}

func (p *lineProc) exitCode(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(timeout):
		t.Fatalf("leasehold run did not exit within %v", timeout)
		return -1
	}
}

func handOff(t *testing.T, storeURL string) {
	lease := fmt.Sprintf("handoff-%d", rand.Uint64()%1_000_000)
	holder := startLines(t, storeURL, lease, "sh", "-c", "echo holder-up; read x; echo holder-done")
	holder.waitExact(t, "holder-up", time.Minute)
	standby := startLines(t, storeURL, lease, "sh", "-c", "echo standby-up")
	standby.waitLine(t, "standing by", time.Minute)

	released := time.Now()
	io.WriteString(holder.stdin, "go\n") // the holder's command exits; run releases
	holder.waitExact(t, "holder-done", time.Minute)
	if code := holder.exitCode(t, time.Minute); code != 0 {
		t.Fatalf("holder run exited %d", code)
	}
	started := standby.waitExact(t, "standby-up", 2*time.Minute)
	took := started.Sub(released)
	t.Logf("the standby's command started %v after the holder's command was told to exit (retry period 1m)", took.Round(time.Millisecond))
	if took > handOffBound {
		t.Errorf("the standby's command started %v after the hand-off, not within %v: it polled (retry period 1m) instead of being woken by the store's watch", took, handOffBound)
	}
	if code := standby.exitCode(t, time.Minute); code != 0 {
		t.Fatalf("standby run exited %d", code)
	}

}
