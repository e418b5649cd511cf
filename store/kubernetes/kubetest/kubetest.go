// Package kubetest starts a real kube-apiserver, with its own etcd, on
// loopback for tests: random free ports, a temporary directory, token
// and client-certificate authentication, RBAC authorization. The binaries are built by
// hack/kube-apiserver/build.sh; BinDir finds them.
package kubetest

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/leasehold/leasehold/internal/freeport"

	"k8s.io/client-go/rest"
)

// EnvBin names the directory holding kube-apiserver and etcd.
const EnvBin = "LEASEHOLD_KUBE_BIN"

// BuildScript is the script that builds and caches the binaries, relative to
// the repository root.
const BuildScript = "hack/kube-apiserver/build.sh"

// ErrNoBinaries is returned by BinDir when the binaries are not there.
var ErrNoBinaries = errors.New("kubetest: kube-apiserver and etcd binaries not found")

// BinDir returns the directory holding kube-apiserver and etcd: $LEASEHOLD_KUBE_BIN
// if set, else the cache directory that hack/kube-apiserver/build.sh uses for
// the current pin (found by running it with --print-dir). The error wraps
// ErrNoBinaries when they are missing.
func BinDir() (string, error) {
	dir := os.Getenv(EnvBin)
	if dir == "" {
		root, err := repoRoot()
		if err != nil {
			return "", fmt.Errorf("%w: %s is unset and %v", ErrNoBinaries, EnvBin, err)
		}
		out, err := exec.Command("bash", filepath.Join(root, BuildScript), "--print-dir").Output()
		if err != nil {
			return "", fmt.Errorf("%w: %s is unset and %s --print-dir failed: %v", ErrNoBinaries, EnvBin, BuildScript, err)
		}
		dir = strings.TrimSpace(string(out))
	}
	for _, b := range []string{"kube-apiserver", "etcd"} {
		if fi, err := os.Stat(filepath.Join(dir, b)); err != nil || fi.IsDir() {
			return "", fmt.Errorf("%w: no %s in %s", ErrNoBinaries, b, dir)
		}
	}
	return dir, nil
}

// repoRoot finds the repository root above the working directory (a test's
// working directory is its package directory).
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, BuildScript)); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("%s not found above the working directory", BuildScript)
		}
		dir = parent
	}
}

// User is a user known to the server by a bearer token.
type User struct {
	Name   string
	Groups []string
}

// Options configure Start.
type Options struct {
	// BinDir holds kube-apiserver and etcd; empty means BinDir().
	BinDir string
	// Users are token users besides the admin (who is in system:masters and
	// so passes every authorization check). Each gets a random token.
	Users []User
	// StartTimeout bounds the wait for /readyz (default 2 minutes).
	StartTimeout time.Duration
}

// Server is a running etcd and kube-apiserver.
type Server struct {
	// Host is the API server's URL, https://127.0.0.1:PORT.
	Host string
	// CAFile is the server's self-signed certificate, the client's CA.
	CAFile string
	// AdminToken authenticates as a member of system:masters.
	AdminToken string
	// Tokens maps each Options.Users name to its token.
	Tokens map[string]string

	dir    string
	procs  []*proc
	caCert *x509.Certificate // signs client certificates (ClientCert)
	caKey  *ecdsa.PrivateKey
}

type proc struct {
	name   string
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has been waited for
	log    string
}

// Start starts etcd and kube-apiserver (authorization mode RBAC, token
// and client-certificate authentication (ClientCert), the
// CoordinatedLeaderElection feature gate and its
// coordination.k8s.io/v1beta1 API on) on free loopback ports and waits until
// /readyz answers.
// Stop the server with Stop.
//
// The ports are free when chosen, but another process may take one before
// etcd or kube-apiserver binds it (tests start servers concurrently): a
// start that fails with "address already in use" is tried again, on new
// ports, up to three times.
func Start(opts Options) (*Server, error) {
	for attempt := 1; ; attempt++ {
		s, err := start(opts)
		if err == nil || attempt == 3 || !strings.Contains(err.Error(), "address already in use") {
			return s, err
		}
	}
}

func start(opts Options) (_ *Server, err error) {
	if opts.BinDir == "" {
		if opts.BinDir, err = BinDir(); err != nil {
			return nil, err
		}
	}
	if opts.StartTimeout == 0 {
		opts.StartTimeout = 2 * time.Minute
	}
	dir, err := os.MkdirTemp("", "leasehold-kube-")
	if err != nil {
		return nil, err
	}
	s := &Server{dir: dir, Tokens: map[string]string{}}
	defer func() {
		if err != nil {
			s.Stop()
		}
	}()

	// etcd
	ports, err := freeport.Pick(3)
	if err != nil {
		return nil, err
	}
	clientURL := "http://127.0.0.1:" + strconv.Itoa(ports[0])
	peerURL := "http://127.0.0.1:" + strconv.Itoa(ports[1])
	if err := s.start("etcd", filepath.Join(opts.BinDir, "etcd"),
		"--name=default",
		"--data-dir="+filepath.Join(dir, "etcd"),
		"--listen-client-urls="+clientURL,
		"--advertise-client-urls="+clientURL,
		"--listen-peer-urls="+peerURL,
		"--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=default="+peerURL,
		"--unsafe-no-fsync", // test data: nothing to keep across a crash
		"--log-level=warn",
	); err != nil {
		return nil, err
	}

	// kube-apiserver
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	keyFile := filepath.Join(dir, "sa.key")
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		return nil, err
	}
	s.AdminToken = randomToken()
	tokens := fmt.Sprintf("%s,admin,admin,\"system:masters\"\n", s.AdminToken)
	for i, u := range opts.Users {
		tok := randomToken()
		s.Tokens[u.Name] = tok
		tokens += fmt.Sprintf("%s,%s,uid-%d,%q\n", tok, u.Name, i, strings.Join(u.Groups, ","))
	}
	clientCAFile, err := s.makeClientCA()
	if err != nil {
		return nil, err
	}
	tokenFile := filepath.Join(dir, "tokens.csv")
	if err := os.WriteFile(tokenFile, []byte(tokens), 0o600); err != nil {
		return nil, err
	}
	certDir := filepath.Join(dir, "certs")
	port := strconv.Itoa(ports[2])
	s.Host = "https://127.0.0.1:" + port
	s.CAFile = filepath.Join(certDir, "apiserver.crt")
	if err := s.start("kube-apiserver", filepath.Join(opts.BinDir, "kube-apiserver"),
		"--etcd-servers="+clientURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--endpoint-reconciler-type=none",
		"--secure-port="+port,
		"--cert-dir="+certDir,
		"--service-cluster-ip-range=10.0.0.0/24",
		"--service-account-issuer="+s.Host,
		"--service-account-key-file="+keyFile,
		"--service-account-signing-key-file="+keyFile,
		"--token-auth-file="+tokenFile,
		"--client-ca-file="+clientCAFile,
		"--authorization-mode=RBAC",
		// Lease.spec.strategy and .preferredHolder are kept only with the
		// gate on (beta, off by default); without it the server drops them
		// from every write, and a test that they survive proves nothing.
		"--feature-gates=CoordinatedLeaderElection=true",
		"--runtime-config=coordination.k8s.io/v1beta1=true",
	); err != nil {
		return nil, err
	}
	if err := s.waitReady(opts.StartTimeout); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Server) start(name, bin string, args ...string) error {
	logPath := filepath.Join(s.dir, name+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("kubetest: start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, exited: make(chan struct{}), log: logPath}
	go func() {
		cmd.Wait()
		logf.Close()
		close(p.exited)
	}()
	s.procs = append(s.procs, p)
	return nil
}

// waitReady polls /readyz with the admin token until it answers 200, a
// process exits, or timeout passes.
func (s *Server) waitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last string
	for {
		for _, p := range s.procs {
			select {
			case <-p.exited:
				return fmt.Errorf("kubetest: %s exited during start-up (%v); log tail:\n%s", p.name, p.cmd.ProcessState, tail(p.log))
			default:
			}
		}
		if ok, why := s.ready(); ok {
			return nil
		} else {
			last = why
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kubetest: kube-apiserver not ready after %v (%s); log tail:\n%s", timeout, last, tail(s.procs[len(s.procs)-1].log))
		}
		timer := time.NewTimer(100 * time.Millisecond)
		<-timer.C
	}
}

func (s *Server) ready() (bool, string) {
	ca, err := os.ReadFile(s.CAFile)
	if err != nil {
		return false, "no certificate yet"
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return false, "certificate not readable yet"
	}
	c := &http.Client{
		Timeout:   5 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}},
	}
	defer c.CloseIdleConnections()
	req, _ := http.NewRequestWithContext(context.Background(), "GET", s.Host+"/readyz", nil)
	req.Header.Set("Authorization", "Bearer "+s.AdminToken)
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

// makeClientCA makes the CA whose certificates the server accepts as
// client certificates, and returns the file holding its certificate.
func (s *Server) makeClientCA() (string, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "kubetest client CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return "", err
	}
	if s.caCert, err = x509.ParseCertificate(der); err != nil {
		return "", err
	}
	s.caKey = key
	path := filepath.Join(s.dir, "client-ca.crt")
	return path, os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
}

// ClientCert returns a client certificate and its key (PEM) that the server
// takes for user, a member of groups (system:masters passes every
// authorization check).
func (s *Server) ClientCert(user string, groups ...string) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: user, Organization: groups},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, s.caCert, &key.PublicKey, s.caKey)
	if err != nil {
		return nil, nil, err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), nil
}

// Config returns a client config that authenticates with token (the
// admin's, or one of Tokens), without client-side rate limiting.
func (s *Server) Config(token string) *rest.Config {
	return &rest.Config{
		Host:            s.Host,
		BearerToken:     token,
		TLSClientConfig: rest.TLSClientConfig{CAFile: s.CAFile},
		QPS:             -1, // no client-side rate limit: tests make many quick calls
		Timeout:         30 * time.Second,
	}
}

// AdminConfig is Config(s.AdminToken).
func (s *Server) AdminConfig() *rest.Config { return s.Config(s.AdminToken) }

// Kubeconfig writes a kubeconfig file for token in the server's directory,
// with one context named contextName whose namespace is namespace, and
// returns its path.
func (s *Server) Kubeconfig(name, token, contextName, namespace string) (string, error) {
	text := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: test
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: user
  user:
    token: %s
contexts:
- name: %s
  context:
    cluster: test
    user: user
    namespace: %s
current-context: %s
`, s.Host, s.CAFile, token, contextName, namespace, contextName)
	path := filepath.Join(s.dir, name)
	return path, os.WriteFile(path, []byte(text), 0o600)
}

// Stop stops the processes this server started, by their PIDs: SIGTERM,
// then SIGKILL after 10 s; then removes its directory.
func (s *Server) Stop() {
	if s == nil {
		return
	}
	for i := len(s.procs) - 1; i >= 0; i-- {
		p := s.procs[i]
		p.cmd.Process.Signal(syscall.SIGTERM)
		timer := time.NewTimer(10 * time.Second)
		select {
		case <-p.exited:
		case <-timer.C:
			p.cmd.Process.Kill()
			<-p.exited
		}
		timer.Stop()
	}
	s.procs = nil
	os.RemoveAll(s.dir)
}

func randomToken() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// tail returns the last lines of a log file.
func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	const max = 4000
	if len(b) > max {
		b = b[len(b)-max:]
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return string(b)
}
