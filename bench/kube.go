package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientset "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"

	lhkube "github.com/leasehold/leasehold/store/kubernetes"
)

// The kube-apiserver is started the way store/kubernetes's tests start it
// (store/kubernetes/internal/kubetest, which an outside module cannot
// import): etcd and kube-apiserver from the binaries that
// hack/kube-apiserver/build.sh caches, on free loopback ports, token
// authentication. This is the minimum of that start logic, copied.

const envKubeBin = "LEASEHOLD_KUBE_BIN"

// kubeBinDir finds kube-apiserver and etcd: $LEASEHOLD_KUBE_BIN, else the
// cache directory of build.sh for the current pin.
func kubeBinDir(repoRoot string) (string, error) {
	dir := os.Getenv(envKubeBin)
	if dir == "" {
		out, err := exec.Command("bash", filepath.Join(repoRoot, "hack/kube-apiserver/build.sh"), "--print-dir").Output()
		if err != nil {
			return "", fmt.Errorf("%s unset and build.sh --print-dir failed: %v", envKubeBin, err)
		}
		dir = strings.TrimSpace(string(out))
	}
	for _, b := range []string{"kube-apiserver", "etcd"} {
		if fi, err := os.Stat(filepath.Join(dir, b)); err != nil || fi.IsDir() {
			return "", fmt.Errorf("no %s in %s (build them with hack/kube-apiserver/build.sh or set %s)", b, dir, envKubeBin)
		}
	}
	return dir, nil
}

type kubeProc struct {
	name   string
	cmd    *exec.Cmd
	exited chan struct{}
	log    string
}

type kubeEnv struct {
	dir     string
	procs   []*kubeProc
	host    string
	caFile  string
	token   string
	cs      *clientset.Clientset
	ns      string
	st      *lhkube.Store
	version string
}

func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func startKube(ctx context.Context, binDir, runID string) (_ *kubeEnv, err error) {
	klog.SetLogger(logr.Discard())
	dir, err := os.MkdirTemp("", "lhbench-kube-")
	if err != nil {
		return nil, err
	}
	e := &kubeEnv{dir: dir}
	defer func() {
		if err != nil {
			e.close()
		}
	}()
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	clientURL := "http://127.0.0.1:" + strconv.Itoa(ports[0])
	peerURL := "http://127.0.0.1:" + strconv.Itoa(ports[1])
	if err := e.start("etcd", filepath.Join(binDir, "etcd"),
		"--name=default", "--data-dir="+filepath.Join(dir, "etcd"),
		"--listen-client-urls="+clientURL, "--advertise-client-urls="+clientURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=default="+peerURL, "--log-level=warn",
	); err != nil {
		return nil, err
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	keyFile := filepath.Join(dir, "sa.key")
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600); err != nil {
		return nil, err
	}
	var tb [16]byte
	rand.Read(tb[:])
	e.token = hex.EncodeToString(tb[:])
	tokenFile := filepath.Join(dir, "tokens.csv")
	if err := os.WriteFile(tokenFile, []byte(e.token+",admin,admin,\"system:masters\"\n"), 0o600); err != nil {
		return nil, err
	}
	port := strconv.Itoa(ports[2])
	e.host = "https://127.0.0.1:" + port
	certDir := filepath.Join(dir, "certs")
	e.caFile = filepath.Join(certDir, "apiserver.crt")
	if err := e.start("kube-apiserver", filepath.Join(binDir, "kube-apiserver"),
		"--etcd-servers="+clientURL, "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
		"--endpoint-reconciler-type=none", "--secure-port="+port, "--cert-dir="+certDir,
		"--service-cluster-ip-range=10.0.0.0/24", "--service-account-issuer="+e.host,
		"--service-account-key-file="+keyFile, "--service-account-signing-key-file="+keyFile,
		"--token-auth-file="+tokenFile, "--authorization-mode=RBAC",
	); err != nil {
		return nil, err
	}
	if err := e.waitReady(ctx, 2*time.Minute); err != nil {
		return nil, err
	}
	cfg := &rest.Config{Host: e.host, BearerToken: e.token, TLSClientConfig: rest.TLSClientConfig{CAFile: e.caFile}, QPS: -1, Timeout: 30 * time.Second}
	e.cs, err = clientset.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	if v, err := e.cs.Discovery().ServerVersion(); err == nil {
		e.version = "kube-apiserver " + v.GitVersion + " (with its own etcd, fsync on)"
	}
	e.ns = "lhbench-" + strings.ToLower(runID)
	if _, err := e.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: e.ns}}, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("create namespace: %w", err)
	}
	e.st, err = lhkube.New(lhkube.Config{Client: e.cs.CoordinationV1(), Namespace: e.ns})
	if err != nil {
		return nil, err
	}
	return e, nil
}

func (e *kubeEnv) start(name, bin string, args ...string) error {
	logPath := filepath.Join(e.dir, name+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", name, err)
	}
	p := &kubeProc{name: name, cmd: cmd, exited: make(chan struct{}), log: logPath}
	go func() {
		cmd.Wait()
		logf.Close()
		close(p.exited)
	}()
	e.procs = append(e.procs, p)
	return nil
}

func (e *kubeEnv) waitReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	last := ""
	for {
		for _, p := range e.procs {
			select {
			case <-p.exited:
				return fmt.Errorf("%s exited during start-up; log tail:\n%s", p.name, tail(p.log))
			default:
			}
		}
		ok, why := e.ready()
		if ok {
			return nil
		}
		last = why
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("kube-apiserver not ready after %v (%s)", timeout, last)
		}
		t := time.NewTimer(100 * time.Millisecond)
		select {
		case <-t.C:
		case <-ctx.Done():
		}
	}
}

func (e *kubeEnv) ready() (bool, string) {
	ca, err := os.ReadFile(e.caFile)
	if err != nil {
		return false, "no certificate yet"
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return false, "certificate not readable yet"
	}
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	defer c.CloseIdleConnections()
	req, _ := http.NewRequest("GET", e.host+"/readyz", nil)
	req.Header.Set("Authorization", "Bearer "+e.token)
	resp, err := c.Do(req)
	if err != nil {
		return false, err.Error()
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false, resp.Status
	}
	return true, ""
}

func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	if len(b) > 3000 {
		b = b[len(b)-3000:]
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return string(b)
}

// close stops the processes this bench started, by their PIDs.
func (e *kubeEnv) close() {
	if e.st != nil {
		e.st.Close()
	}
	for i := len(e.procs) - 1; i >= 0; i-- {
		p := e.procs[i]
		p.cmd.Process.Signal(syscall.SIGTERM)
		t := time.NewTimer(10 * time.Second)
		select {
		case <-p.exited:
		case <-t.C:
			p.cmd.Process.Kill()
			<-p.exited
		}
		t.Stop()
	}
	os.RemoveAll(e.dir)
}

// kubeTimings are client-go's defaults (15 s lease, 10 s renew deadline, 2 s
// retry) scaled to a lease of ttl; leasehold's defaults have the same
// proportions.
func kubeTimings(ttl time.Duration) (lease, renewDeadline, retry time.Duration) {
	return ttl, ttl * 2 / 3, ttl * 2 / 15
}

func (e *kubeEnv) libs(handoffTTL time.Duration) []*lib {
	_, rd, rp := kubeTimings(handoffTTL)
	return []*lib{
		lhElectorLib("kubernetes", e.st, handoffTTL, "Lease watch"),
		{
			name: "client-go", store: "kubernetes", peer: true, kind: "elector",
			config: fmt.Sprintf("client-go v0.37.2 LeaderElector on a LeaseLock, %v lease, %v renew deadline, %v retry period (defaults scaled), ReleaseOnCancel", handoffTTL, rd, rp),
			newContender: func(ctx context.Context, lockName string, s setup) (contender, error) {
				if s.ttl == 0 {
					s.ttl = handoffTTL
				}
				return &clientGoC{e: e, name: "clientgo-" + strings.ReplaceAll(lockName, "/", "-"), s: s}, nil
			},
		},
	}
}

type clientGoC struct {
	e    *kubeEnv
	name string
	s    setup
}

// recLock wraps client-go's LeaseLock: it records when each successful
// Update (a renewal, or the acquiring write) answered, and after crash it
// fails every call without sending it, as a dead process would.
type recLock struct {
	resourcelock.Interface
	mu      sync.RWMutex
	crashed bool
	clock   renewClock
}

var errCrashed = errors.New("crashed")

func (r *recLock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.crashed {
		return nil, nil, errCrashed
	}
	return r.Interface.Get(ctx)
}

func (r *recLock) Create(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.crashed {
		return errCrashed
	}
	err := r.Interface.Create(ctx, ler)
	if err == nil {
		r.clock.mark()
	}
	return err
}

func (r *recLock) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.crashed {
		return errCrashed
	}
	err := r.Interface.Update(ctx, ler)
	if err == nil {
		r.clock.mark()
	}
	return err
}

func (r *recLock) crash() {
	r.mu.Lock() // waits for a call in flight
	r.crashed = true
	r.mu.Unlock()
}

func (c *clientGoC) acquire(ctx context.Context) (held, error) {
	lease, rd, rp := kubeTimings(c.s.ttl)
	lk := &recLock{Interface: &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Name: c.name, Namespace: c.e.ns},
		Client:     c.e.cs.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: c.s.identity + "-" + randHex(4)},
	}}
	leading := make(chan struct{})
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: lk, LeaseDuration: lease, RenewDeadline: rd, RetryPeriod: rp,
		ReleaseOnCancel: true, Name: c.name,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(context.Context) { close(leading) },
			OnStoppedLeading: func() {},
		},
	})
	if err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		le.Run(runCtx)
	}()
	select {
	case <-leading:
		return &clientGoHeld{lk: lk, cancel: cancel, done: done}, nil
	case <-ctx.Done():
		cancel()
		<-done
		return nil, ctx.Err()
	}
}

func (c *clientGoC) close() {}

type clientGoHeld struct {
	lk     *recLock
	cancel context.CancelFunc
	done   chan struct{}
}

// release cancels Run: with ReleaseOnCancel it writes the Lease free and
// returns.
func (h *clientGoHeld) release(ctx context.Context) error {
	h.cancel()
	select {
	case <-h.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (h *clientGoHeld) crash() {
	h.lk.crash()
	h.cancel() // its release fails too: the lock is crashed
}

func (h *clientGoHeld) lastRenewal() time.Time { return h.lk.clock.get() }
