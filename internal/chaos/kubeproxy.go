package chaos

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// A Kubernetes store's server is named by its kubeconfig, not its URL. When
// that server is on this host, the harness proxies it all the same: it
// reads the kubeconfig (the URL's kubeconfig and context parameters, or the
// default loading rules, as the store does), and gives each node a copy
// whose cluster points at the node's proxy on 127.0.0.1. The server's
// certificate must name 127.0.0.1 (kubetest's does), since the node now
// dials that address.

// kubeConfigOf loads the kubeconfig a kubernetes:// URL names and returns it
// with the name of the context in use.
func kubeConfigOf(u *url.URL) (*clientcmdapi.Config, string, error) {
	q := u.Query()
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if p := q.Get("kubeconfig"); p != "" {
		rules.ExplicitPath = p
	}
	raw, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: q.Get("context")}).RawConfig()
	if err != nil {
		return nil, "", fmt.Errorf("%w: kubeconfig: %v", ErrInvalid, err)
	}
	name := q.Get("context")
	if name == "" {
		name = raw.CurrentContext
	}
	if raw.Contexts[name] == nil {
		return nil, "", fmt.Errorf("%w: kubeconfig has no context %q", ErrInvalid, name)
	}
	if raw.Clusters[raw.Contexts[name].Cluster] == nil {
		return nil, "", fmt.Errorf("%w: kubeconfig context %q names no known cluster", ErrInvalid, name)
	}
	return &raw, name, nil
}

// kubeEndpoint is the host:port of the API server a kubernetes:// URL's
// kubeconfig names, if it is on a loopback address (else "": the harness
// proxies only a server on this host).
func kubeEndpoint(u *url.URL) string {
	raw, name, err := kubeConfigOf(u)
	if err != nil {
		return ""
	}
	su, err := url.Parse(raw.Clusters[raw.Contexts[name].Cluster].Server)
	if err != nil || su.Scheme != "https" || !isLoopback(su.Hostname()) {
		return ""
	}
	port := su.Port()
	if port == "" {
		port = "443"
	}
	return net.JoinHostPort(su.Hostname(), port)
}

// kubeNodeURL writes a kubeconfig for one node, its cluster's server at
// proxyAddr, into path (mode 0600: it holds the credentials of the
// original), and returns the store URL that uses it.
func kubeNodeURL(u *url.URL, proxyAddr, path string) (string, error) {
	raw, name, err := kubeConfigOf(u)
	if err != nil {
		return "", err
	}
	cl := raw.Clusters[raw.Contexts[name].Cluster].DeepCopy()
	su, _ := url.Parse(cl.Server)
	su.Host = proxyAddr
	cl.Server = su.String()
	raw.Clusters[raw.Contexts[name].Cluster] = cl
	raw.CurrentContext = name
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", fmt.Errorf("leasehold/chaos: %w", err)
	}
	if err := clientcmd.WriteToFile(*raw, path); err != nil {
		return "", fmt.Errorf("leasehold/chaos: write kubeconfig: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		return "", fmt.Errorf("leasehold/chaos: %w", err)
	}
	c := *u
	q := c.Query()
	q.Set("kubeconfig", path)
	q.Set("context", name)
	c.RawQuery = q.Encode()
	return c.String(), nil
}
