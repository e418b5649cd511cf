package kubernetes

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// connection is how OpenURL reaches an API server.
type connection struct {
	server    string
	client    *http.Client
	namespace string // the default namespace: the pod's, or the context's
}

// inClusterDir is where a pod's service account is mounted (a variable for
// the tests).
var inClusterDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// errNotInCluster: no KUBERNETES_SERVICE_HOST and _PORT, so not in a pod.
var errNotInCluster = errors.New("not running in a pod (KUBERNETES_SERVICE_HOST or KUBERNETES_SERVICE_PORT unset)")

// inCluster connects as the pod's service account, as client-go's
// rest.InClusterConfig does: the server from KUBERNETES_SERVICE_HOST and
// KUBERNETES_SERVICE_PORT, the CA and the token from the service account's
// mount. The token is read again every minute, and at once after a 401, so a
// rotated token is picked up.
func inCluster() (connection, error) {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return connection{}, errNotInCluster
	}
	tok := &fileToken{path: filepath.Join(inClusterDir, "token")}
	if _, err := tok.get(); err != nil {
		return connection{}, err
	}
	tc, err := tlsConfig(filepath.Join(inClusterDir, "ca.crt"), nil, "", false)
	if err != nil {
		return connection{}, err
	}
	ns := os.Getenv("POD_NAMESPACE")
	if ns == "" {
		if b, err := os.ReadFile(filepath.Join(inClusterDir, "namespace")); err == nil {
			ns = strings.TrimSpace(string(b))
		}
	}
	hc, err := httpClient(tc, "", &authTransport{bearer: tok.get, unauthorized: tok.expire})
	if err != nil {
		return connection{}, err
	}
	return connection{server: "https://" + net.JoinHostPort(host, port), client: hc, namespace: ns}, nil
}

// tlsConfig builds the TLS settings for a server: its CA (a file, or PEM
// data; none means the system's roots), the name to check in its
// certificate, and insecure (no check at all).
func tlsConfig(caFile string, caData []byte, serverName string, insecure bool) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName, InsecureSkipVerify: insecure}
	if caFile != "" && caData == nil {
		b, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("certificate authority: %w", err)
		}
		caData = b
	}
	if caData != nil {
		if insecure {
			return nil, errors.New("a certificate authority and insecure-skip-tls-verify together: choose one")
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(caData) {
			what := "certificate-authority-data"
			if caFile != "" {
				what = caFile
			}
			return nil, fmt.Errorf("certificate authority %s holds no PEM certificate", what)
		}
		tc.RootCAs = pool
	}
	return tc, nil
}

// httpClient returns a client for one API server: HTTP/2 where the server
// offers it, with a ping when a connection has been silent for 30 s (so a
// watch on a dead connection ends instead of hanging), the proxy (a URL, or
// "" for $HTTPS_PROXY and the like), credentials added by auth, and no
// redirects followed (they would carry the credentials elsewhere).
func httpClient(tc *tls.Config, proxy string, auth *authTransport) (*http.Client, error) {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.TLSClientConfig = tc
	t.ForceAttemptHTTP2 = true
	t.HTTP2 = &http.HTTP2Config{SendPingTimeout: 30 * time.Second, PingTimeout: 15 * time.Second}
	if proxy != "" {
		u, err := url.Parse(proxy)
		if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https" && u.Scheme != "socks5") {
			return nil, fmt.Errorf("proxy-url is not an http, https or socks5 URL")
		}
		t.Proxy = http.ProxyURL(u)
	}
	auth.next = t
	if auth.exec != nil {
		auth.exec.transport = t
		tc.GetClientCertificate = auth.exec.clientCertificate
	}
	return &http.Client{
		Transport:     auth,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}, nil
}

// The kubeconfig file, the fields leasehold reads (client-go's clientcmd v1
// Config). Byte fields are base64 in the file.
type kubeconfigFile struct {
	CurrentContext string `json:"current-context"`
	Clusters       []struct {
		Name    string    `json:"name"`
		Cluster kcCluster `json:"cluster"`
	} `json:"clusters"`
	Users []struct {
		Name string `json:"name"`
		User kcUser `json:"user"`
	} `json:"users"`
	Contexts []struct {
		Name    string    `json:"name"`
		Context kcContext `json:"context"`
	} `json:"contexts"`
}

type kcCluster struct {
	Server                   string `json:"server"`
	TLSServerName            string `json:"tls-server-name,omitempty"`
	InsecureSkipTLSVerify    bool   `json:"insecure-skip-tls-verify,omitempty"`
	CertificateAuthority     string `json:"certificate-authority,omitempty"`
	CertificateAuthorityData []byte `json:"certificate-authority-data,omitempty"`
	ProxyURL                 string `json:"proxy-url,omitempty"`
}

type kcUser struct {
	ClientCertificate     string              `json:"client-certificate"`
	ClientCertificateData []byte              `json:"client-certificate-data"`
	ClientKey             string              `json:"client-key"`
	ClientKeyData         []byte              `json:"client-key-data"`
	Token                 string              `json:"token"`
	TokenFile             string              `json:"tokenFile"`
	As                    string              `json:"as"`
	AsUID                 string              `json:"as-uid"`
	AsGroups              []string            `json:"as-groups"`
	AsUserExtra           map[string][]string `json:"as-user-extra"`
	Username              string              `json:"username"`
	Password              string              `json:"password"`
	AuthProvider          *struct {
		Name string `json:"name"`
	} `json:"auth-provider"`
	Exec *execConfig `json:"exec"`
}

type kcContext struct {
	_ [0]func() // not comparable: spares the binary an equality function

	Cluster   string `json:"cluster"`
	User      string `json:"user"`
	Namespace string `json:"namespace"`
}

// kubeconfig is one or more kubeconfig files merged as kubectl merges them:
// the first file to name a cluster, user or context wins, and the first
// current-context set wins.
type kubeconfig struct {
	currentContext string
	clusters       map[string]kcCluster
	users          map[string]kcUser
	contexts       map[string]kcContext
	files          []string // the files read
}

// kubeconfigPaths is where the kubeconfig is looked for: the explicit path
// (which must exist), else $KUBECONFIG (a list; files that do not exist are
// skipped), else ~/.kube/config.
func kubeconfigPaths(explicit string) (paths []string, mustExist bool) {
	if explicit != "" {
		return []string{explicit}, true
	}
	if env := os.Getenv("KUBECONFIG"); env != "" {
		for _, p := range filepath.SplitList(env) {
			if p != "" {
				paths = append(paths, p)
			}
		}
		return paths, false
	}
	if home, err := os.UserHomeDir(); err == nil {
		return []string{filepath.Join(home, ".kube", "config")}, false
	}
	return nil, false
}

func loadKubeconfig(explicit string) (*kubeconfig, error) {
	kc := &kubeconfig{clusters: map[string]kcCluster{}, users: map[string]kcUser{}, contexts: map[string]kcContext{}}
	paths, mustExist := kubeconfigPaths(explicit)
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if errors.Is(err, os.ErrNotExist) && !mustExist {
			continue
		}
		if err != nil {
			return nil, err
		}
		if err := kc.merge(p, b); err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
	}
	if len(kc.files) == 0 {
		return nil, fmt.Errorf("no kubeconfig found (looked in %s); name one with ?kubeconfig=PATH", strings.Join(paths, ", "))
	}
	return kc, nil
}

// merge adds one file's entries, paths in it made relative to its directory.
func (kc *kubeconfig) merge(path string, b []byte) error {
	j, err := yaml.YAMLToJSON(b)
	if err != nil {
		return err
	}
	var f kubeconfigFile
	if err := json.Unmarshal(j, &f); err != nil {
		return err
	}
	kc.files = append(kc.files, path)
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	dir := filepath.Dir(abs)
	resolve := func(p *string) {
		if *p != "" && !filepath.IsAbs(*p) {
			*p = filepath.Join(dir, *p)
		}
	}
	if kc.currentContext == "" {
		kc.currentContext = f.CurrentContext
	}
	for _, c := range f.Clusters {
		if _, ok := kc.clusters[c.Name]; !ok {
			resolve(&c.Cluster.CertificateAuthority)
			kc.clusters[c.Name] = c.Cluster
		}
	}
	for _, u := range f.Users {
		if _, ok := kc.users[u.Name]; !ok {
			resolve(&u.User.ClientCertificate)
			resolve(&u.User.ClientKey)
			resolve(&u.User.TokenFile)
			if u.User.Exec != nil && strings.ContainsRune(u.User.Exec.Command, filepath.Separator) {
				resolve(&u.User.Exec.Command) // a bare command name is looked up in $PATH
			}
			kc.users[u.Name] = u.User
		}
	}
	for _, c := range f.Contexts {
		if _, ok := kc.contexts[c.Name]; !ok {
			kc.contexts[c.Name] = c.Context
		}
	}
	return nil
}

// fromKubeconfig connects with the kubeconfig (see kubeconfigPaths), its
// current context or contextName.
func fromKubeconfig(path, contextName string) (connection, error) {
	kc, name, cl, err := kubeconfigContext(path, contextName)
	if err != nil {
		return connection{}, err
	}
	ctx := kc.contexts[name]
	var ok bool
	var u kcUser
	if ctx.User != "" {
		if u, ok = kc.users[ctx.User]; !ok {
			return connection{}, fmt.Errorf("context %q names user %q, which is not in the kubeconfig", name, ctx.User)
		}
	}
	tc, err := tlsConfig(cl.CertificateAuthority, cl.CertificateAuthorityData, cl.TLSServerName, cl.InsecureSkipTLSVerify)
	if err != nil {
		return connection{}, fmt.Errorf("cluster %q: %w", ctx.Cluster, err)
	}
	auth, err := userAuth(u, tc, cl)
	if err != nil {
		return connection{}, fmt.Errorf("user %q: %w", ctx.User, err)
	}
	hc, err := httpClient(tc, cl.ProxyURL, auth)
	if err != nil {
		return connection{}, fmt.Errorf("cluster %q: %w", ctx.Cluster, err)
	}
	return connection{server: cl.Server, client: hc, namespace: ctx.Namespace}, nil
}
