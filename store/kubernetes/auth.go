package kubernetes

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// authTransport adds the credentials to each request: a bearer token
// (static, from a file read again as it rotates, or from an exec plugin),
// or a user name and password; and the impersonation headers.
type authTransport struct {
	next http.RoundTripper
	// bearer returns the token to send; nil sends none.
	bearer func() (string, error)
	// unauthorized is told of a 401 answer, so that the next request reads
	// the token again.
	unauthorized func()
	basic        *url.Userinfo
	impersonate  http.Header
	exec         *execCredential // also gives bearer and unauthorized
}

func (a *authTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	r := req.Clone(req.Context())
	switch {
	case a.bearer != nil:
		tok, err := a.bearer()
		if err != nil {
			if req.Body != nil {
				req.Body.Close()
			}
			return nil, err
		}
		if tok != "" {
			r.Header.Set("Authorization", "Bearer "+tok)
		}
	case a.basic != nil:
		pw, _ := a.basic.Password()
		r.SetBasicAuth(a.basic.Username(), pw)
	}
	for k, vs := range a.impersonate {
		r.Header[k] = vs
	}
	resp, err := a.next.RoundTrip(r)
	if err == nil && resp.StatusCode == http.StatusUnauthorized && a.unauthorized != nil {
		a.unauthorized()
	}
	return resp, err
}

// tokenReread is how long a token read from a file is used before the file
// is read again (client-go's period; a variable for the tests).
var tokenReread = time.Minute

// fileToken is a bearer token kept in a file that something else rotates
// (a pod's projected service account token, a kubeconfig's tokenFile).
type fileToken struct {
	_ [0]func() // not comparable: spares the binary an equality function

	path string

	mu    sync.Mutex
	tok   string
	read  time.Time
	stale bool
}

func (f *fileToken) get() (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.tok != "" && !f.stale && time.Since(f.read) < tokenReread {
		return f.tok, nil
	}
	b, err := os.ReadFile(f.path)
	tok := strings.TrimSpace(string(b))
	if err == nil && tok == "" {
		err = errors.New("it is empty")
	}
	if err != nil {
		if f.tok != "" {
			return f.tok, nil // keep the last good one, as client-go does
		}
		return "", fmt.Errorf("token file %s: %w", f.path, err)
	}
	f.tok, f.read, f.stale = tok, time.Now(), false
	return f.tok, nil
}

// expire makes the next get read the file.
func (f *fileToken) expire() {
	f.mu.Lock()
	f.stale = true
	f.mu.Unlock()
}

// userAuth builds the credentials of a kubeconfig user. Client certificates
// go into tc.
func userAuth(u kcUser, tc *tls.Config, cl kcCluster) (*authTransport, error) {
	a := &authTransport{}
	if u.AuthProvider != nil {
		return nil, fmt.Errorf("auth-provider %q is not supported (client-go dropped its built-in providers); use an exec credential plugin", u.AuthProvider.Name)
	}
	if (u.ClientCertificate != "" || u.ClientCertificateData != nil) != (u.ClientKey != "" || u.ClientKeyData != nil) {
		return nil, errors.New("a client certificate needs both the certificate and its key")
	}
	if u.ClientCertificate != "" || u.ClientCertificateData != nil {
		certPEM, keyPEM := u.ClientCertificateData, u.ClientKeyData
		var err error
		if certPEM == nil {
			if certPEM, err = os.ReadFile(u.ClientCertificate); err != nil {
				return nil, fmt.Errorf("client certificate: %w", err)
			}
		}
		if keyPEM == nil {
			if keyPEM, err = os.ReadFile(u.ClientKey); err != nil {
				return nil, fmt.Errorf("client key: %w", err)
			}
		}
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, fmt.Errorf("client certificate and key: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	hasToken := u.Token != "" || u.TokenFile != ""
	if hasToken && (u.Username != "" || u.Password != "") {
		return nil, errors.New("a token and a user name and password together: choose one")
	}
	switch {
	case u.Token != "":
		tok := u.Token
		a.bearer = func() (string, error) { return tok, nil }
	case u.TokenFile != "":
		f := &fileToken{path: u.TokenFile}
		if _, err := f.get(); err != nil {
			return nil, err
		}
		a.bearer, a.unauthorized = f.get, f.expire
	case u.Username != "" || u.Password != "":
		a.basic = url.UserPassword(u.Username, u.Password)
	case u.Exec != nil:
		e, err := newExecCredential(*u.Exec, cl)
		if err != nil {
			return nil, err
		}
		a.exec = e
		a.bearer, a.unauthorized = e.token, e.expire
	}
	if u.As != "" || u.AsUID != "" || len(u.AsGroups) > 0 || len(u.AsUserExtra) > 0 {
		if u.As == "" {
			return nil, errors.New("impersonating groups, a uid or extra fields needs a user too (as)")
		}
		h := http.Header{}
		h.Set("Impersonate-User", u.As)
		if u.AsUID != "" {
			h.Set("Impersonate-Uid", u.AsUID)
		}
		for _, g := range u.AsGroups {
			h.Add("Impersonate-Group", g)
		}
		for k, vs := range u.AsUserExtra {
			for _, v := range vs {
				h.Add("Impersonate-Extra-"+url.PathEscape(k), v)
			}
		}
		a.impersonate = h
	}
	return a, nil
}

// execConfig is a kubeconfig user's exec credential plugin (EKS's aws, GKE's
// gke-gcloud-auth-plugin, AKS's kubelogin...).
type execConfig struct {
	Command string   `json:"command"`
	Args    []string `json:"args"`
	Env     []struct {
		Name  string `json:"name"`
		Value string `json:"value"`
	} `json:"env"`
	APIVersion         string `json:"apiVersion"`
	InstallHint        string `json:"installHint"`
	ProvideClusterInfo bool   `json:"provideClusterInfo"`
	InteractiveMode    string `json:"interactiveMode"`
}

// execCredential runs an exec plugin for a token or a client certificate,
// and runs it again when the credential expires or the server answers 401.
type execCredential struct {
	cfg       execConfig
	info      []byte          // $KUBERNETES_EXEC_INFO
	transport *http.Transport // its connections are closed when the certificate changes

	mu      sync.Mutex
	have    bool
	tok     string
	cert    *tls.Certificate
	expires time.Time // zero: never
}

func newExecCredential(cfg execConfig, cl kcCluster) (*execCredential, error) {
	switch cfg.APIVersion {
	case "client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1":
	default:
		return nil, fmt.Errorf("exec plugin %s: apiVersion %q, want client.authentication.k8s.io/v1 or v1beta1", cfg.Command, cfg.APIVersion)
	}
	if cfg.Command == "" {
		return nil, errors.New("exec plugin without a command")
	}
	if cfg.InteractiveMode == "Always" {
		return nil, fmt.Errorf("exec plugin %s wants a terminal (interactiveMode Always), and leasehold runs without one", cfg.Command)
	}
	spec := map[string]any{"interactive": false}
	if cfg.ProvideClusterInfo {
		spec["cluster"] = cl
	}
	info, err := json.Marshal(map[string]any{"apiVersion": cfg.APIVersion, "kind": "ExecCredential", "spec": spec})
	if err != nil {
		return nil, err
	}
	return &execCredential{cfg: cfg, info: info}, nil
}

// get returns the current credential, running the plugin if there is none
// or it has expired.
func (e *execCredential) get() (string, *tls.Certificate, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.have && (e.expires.IsZero() || time.Now().Before(e.expires)) {
		return e.tok, e.cert, nil
	}
	old := e.cert
	if err := e.run(); err != nil {
		return "", nil, err
	}
	if old != nil && e.transport != nil {
		// Connections made with the old certificate keep it; close the
		// idle ones so the next request shows the new one.
		e.transport.CloseIdleConnections()
	}
	return e.tok, e.cert, nil
}

func (e *execCredential) token() (string, error) {
	tok, _, err := e.get()
	return tok, err
}

func (e *execCredential) clientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	_, cert, err := e.get()
	if err != nil {
		return nil, err
	}
	if cert == nil {
		return &tls.Certificate{}, nil // none: the token authenticates
	}
	return cert, nil
}

func (e *execCredential) expire() {
	e.mu.Lock()
	e.have = false
	e.mu.Unlock()
}

// execTimeout bounds one run of a plugin: one that hangs must not hang the
// store for ever.
const execTimeout = 2 * time.Minute

func (e *execCredential) run() error {
	ctx, cancel := context.WithTimeout(context.Background(), execTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, e.cfg.Command, e.cfg.Args...)
	cmd.Env = os.Environ()
	for _, v := range e.cfg.Env {
		cmd.Env = append(cmd.Env, v.Name+"="+v.Value)
	}
	cmd.Env = append(cmd.Env, "KUBERNETES_EXEC_INFO="+string(e.info))
	cmd.Stderr = os.Stderr // the plugin's own messages, as kubectl shows them
	out, err := cmd.Output()
	if err != nil {
		if errors.Is(err, exec.ErrNotFound) && e.cfg.InstallHint != "" {
			return fmt.Errorf("exec plugin %s: %w\n%s", e.cfg.Command, err, e.cfg.InstallHint)
		}
		return fmt.Errorf("exec plugin %s: %w", e.cfg.Command, err)
	}
	var cred struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Status     *struct {
			ExpirationTimestamp   *time.Time `json:"expirationTimestamp"`
			Token                 string     `json:"token"`
			ClientCertificateData string     `json:"clientCertificateData"`
			ClientKeyData         string     `json:"clientKeyData"`
		} `json:"status"`
	}
	if err := json.Unmarshal(out, &cred); err != nil {
		return fmt.Errorf("exec plugin %s: its output is not an ExecCredential: %w", e.cfg.Command, err)
	}
	if cred.Kind != "ExecCredential" || cred.APIVersion != e.cfg.APIVersion || cred.Status == nil {
		return fmt.Errorf("exec plugin %s: its output is not an ExecCredential %s with a status (kind %q, apiVersion %q)", e.cfg.Command, e.cfg.APIVersion, cred.Kind, cred.APIVersion)
	}
	st := cred.Status
	var cert *tls.Certificate
	switch {
	case st.ClientCertificateData != "" || st.ClientKeyData != "":
		c, err := tls.X509KeyPair([]byte(st.ClientCertificateData), []byte(st.ClientKeyData))
		if err != nil {
			return fmt.Errorf("exec plugin %s: client certificate: %w", e.cfg.Command, err)
		}
		cert = &c
	case st.Token == "":
		return fmt.Errorf("exec plugin %s gave neither a token nor a client certificate", e.cfg.Command)
	}
	e.have, e.tok, e.cert = true, st.Token, cert
	e.expires = time.Time{}
	if st.ExpirationTimestamp != nil {
		e.expires = *st.ExpirationTimestamp
	}
	return nil
}
