package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientset "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"

	"github.com/leasehold/leasehold/store"
	lhkube "github.com/leasehold/leasehold/store/kubernetes"
	"github.com/leasehold/leasehold/store/kubernetes/kubetest"
)

// The kube-apiserver is started by store/kubernetes/kubetest, the test kit
// the store's own tests use: etcd and kube-apiserver from the binaries that
// hack/kube-apiserver/build.sh caches, on free loopback ports, token
// authentication, stopped by PID.

type kubeEnv struct {
	srv     *kubetest.Server
	cs      *clientset.Clientset
	ns      string
	st      *lhkube.Store
	version string
}

func startKube(ctx context.Context, binDir, runID string) (_ *kubeEnv, err error) {
	klog.SetLogger(logr.Discard())
	srv, err := kubetest.Start(kubetest.Options{BinDir: binDir})
	if err != nil {
		return nil, err
	}
	e := &kubeEnv{srv: srv}
	defer func() {
		if err != nil {
			e.close()
		}
	}()
	cfg := srv.AdminConfig()
	cfg.QPS = -1
	cfg.Timeout = 30 * time.Second
	if e.cs, err = clientset.NewForConfig(cfg); err != nil {
		return nil, err
	}
	if v, err := e.cs.Discovery().ServerVersion(); err == nil {
		e.version = "kube-apiserver " + v.GitVersion + " (with its own etcd, fsync on)"
	}
	e.ns = "lhbench-" + strings.ToLower(runID)
	if _, err := e.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: e.ns}}, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("create namespace: %w", err)
	}
	storeCfg := rest.CopyConfig(cfg)
	storeCfg.Timeout = 0 // a request timeout would end the store's watches
	hc, err := rest.HTTPClientFor(storeCfg)
	if err != nil {
		return nil, err
	}
	e.st, err = lhkube.New(lhkube.Config{Server: cfg.Host, HTTPClient: hc, Namespace: e.ns, QPS: -1})
	if err != nil {
		return nil, err
	}
	return e, nil
}

// close stops the processes this bench started, by their PIDs.
func (e *kubeEnv) close() {
	if e.st != nil {
		e.st.Close()
	}
	e.srv.Stop()
}

// kubeTimings are client-go's defaults (15 s lease, 10 s renew deadline, 2 s
// retry) scaled to a lease of ttl; leasehold's defaults have the same
// proportions.
func kubeTimings(ttl time.Duration) (lease, renewDeadline, retry time.Duration) {
	return ttl, ttl * 2 / 3, ttl * 2 / 15
}

// newStore opens a Store of its own on e's server and namespace; wrap, if
// set, wraps its HTTP client's transport.
func (e *kubeEnv) newStore(wrap func(http.RoundTripper) http.RoundTripper) (*lhkube.Store, error) {
	cfg := rest.CopyConfig(e.srv.AdminConfig())
	cfg.Timeout = 0 // a request timeout would end the store's watches
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	if wrap != nil {
		hc.Transport = wrap(hc.Transport)
	}
	return lhkube.New(lhkube.Config{Server: cfg.Host, HTTPClient: hc, Namespace: e.ns, QPS: -1})
}

// perContender makes each contender of the library mk builds use a Store
// of its own, as separate processes would: a Store remembers the versions
// it has seen (and the store's watch keeps them current), so contenders
// sharing one would each see what the others wrote without a request.
func (e *kubeEnv) perContender(mk func(st store.Store) *lib) *lib {
	return perContender(e.st, func(context.Context) (store.Store, error) { return e.newStore(nil) }, mk)
}

// fairLibs are leasehold's fair Lock and Elector, a Store per contender.
func (e *kubeEnv) fairLibs(ttl time.Duration) []*lib {
	return fairLibsEach("kubernetes", ttl, "Lease watch, queue object watch", e.perContender)
}

func (e *kubeEnv) libs(handoffTTL time.Duration) []*lib {
	_, rd, rp := kubeTimings(handoffTTL)
	return []*lib{
		e.perContender(func(st store.Store) *lib { return lhElectorLib("kubernetes", st, handoffTTL, "Lease watch") }),
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
