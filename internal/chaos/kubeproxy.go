package chaos

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"

	"github.com/leasehold/leasehold/store/kubernetes"
)

// A Kubernetes store's server is named by its kubeconfig, not its URL. When
// that server is on this host, the harness proxies it all the same: it
// reads the kubeconfig (the URL's kubeconfig and context parameters, or the
// default loading rules, as the store does), and gives each node a copy
// whose cluster points at the node's proxy on 127.0.0.1. The server's
// certificate must name 127.0.0.1 (kubetest's does), since the node now
// dials that address.

// kubeEndpoint is the host:port of the API server a kubernetes:// URL's
// kubeconfig names, if it is on a loopback address (else "": the harness
// proxies only a server on this host).
func kubeEndpoint(u *url.URL) string {
	q := u.Query()
	server, _, err := kubernetes.KubeconfigServer(q.Get("kubeconfig"), q.Get("context"))
	if err != nil {
		return ""
	}
	su, err := url.Parse(server)
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
	q := u.Query()
	server, name, err := kubernetes.KubeconfigServer(q.Get("kubeconfig"), q.Get("context"))
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	su, err := url.Parse(server)
	if err != nil {
		return "", fmt.Errorf("%w: kubeconfig server %q: %v", ErrInvalid, server, err)
	}
	su.Host = proxyAddr
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", fmt.Errorf("leasehold/chaos: %w", err)
	}
	if err := kubernetes.WriteKubeconfig(q.Get("kubeconfig"), name, su.String(), path); err != nil {
		return "", fmt.Errorf("leasehold/chaos: %w", err)
	}
	c := *u
	q.Set("kubeconfig", path)
	q.Set("context", name)
	c.RawQuery = q.Encode()
	return c.String(), nil
}
