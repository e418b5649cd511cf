package chaos

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/leasehold/leasehold/store"
)

// storeKind says how the harness reaches a store.
type storeKind int

const (
	storeLocal   storeKind = iota + 1 // a file on this host (SQLite): no proxy
	storeNetwork                      // host:port endpoints in the URL's host, comma-separated
	storeAPI                          // a server the URL does not locate (Kubernetes: the kubeconfig does): no proxy
)

var schemeKinds = map[string]storeKind{
	"sqlite":     storeLocal,
	"postgres":   storeNetwork,
	"postgresql": storeNetwork,
	"redis":      storeNetwork,
	"rediss":     storeNetwork,
	"etcd":       storeNetwork,
	"etcds":      storeNetwork,
	"kubernetes": storeAPI,
}

// SupportedSchemes are the store URL schemes the harness can run against.
func SupportedSchemes() []string {
	return []string{"sqlite", "postgres", "postgresql", "redis", "rediss", "etcd", "etcds", "kubernetes"}
}

// proxied reports whether the harness puts fault proxies in front of a
// store of this kind (and so can inject network faults).
func (k storeKind) proxied() bool { return k == storeNetwork }

// postgresParams are the PostgreSQL store's own URL parameters, which a
// plain PostgreSQL connection (the register's) must not see.
var postgresParams = []string{"table", "schema", "create_if_missing", "watch", "session_host", "session_port"}

// redact hides a URL's secrets, as every output of the command does.
func redact(u *url.URL) string { return store.RedactURL(u) }

// parseStoreURL checks a store URL for the harness and returns its kind and
// its endpoints (host:port) for a network store.
func parseStoreURL(raw string, allowRemote bool) (*url.URL, storeKind, []string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) { // its message repeats the URL, password included
			err = ue.Err
		}
		return nil, 0, nil, fmt.Errorf("%w: store URL does not parse: %v", ErrInvalid, err)
	}
	kind, ok := schemeKinds[u.Scheme]
	if !ok {
		return nil, 0, nil, fmt.Errorf("%w: the chaos harness cannot run against %s:// stores (it must put a fault proxy between each node and the store); supported: %s",
			ErrInvalid, u.Scheme, strings.Join(SupportedSchemes(), ", "))
	}
	if kind == storeLocal {
		return u, kind, nil, nil
	}
	if kind == storeAPI {
		// The API server's address is in the kubeconfig (or the pod), not
		// the URL: the harness cannot see that it is on this host.
		if !allowRemote {
			return nil, 0, nil, fmt.Errorf("%w: the chaos harness cannot run against %s:// stores without --allow-remote: the API server's address comes from the kubeconfig, not the URL, so the harness cannot check that it is on this host; it writes test data (a Lease) there, so point the kubeconfig at a test cluster only", ErrInvalid, u.Scheme)
		}
		return u, kind, nil, nil
	}
	if u.Host == "" {
		return nil, 0, nil, fmt.Errorf("%w: store URL %s names no host:port; the harness proxies TCP connections only (no Unix sockets)", ErrInvalid, redact(u))
	}
	var eps []string
	for _, h := range strings.Split(u.Host, ",") {
		host, port, err := net.SplitHostPort(h)
		if err != nil {
			port = defaultPort(u.Scheme)
			host = h
		}
		if !allowRemote && !isLoopback(host) {
			return nil, 0, nil, fmt.Errorf("%w: store host %q is not a loopback address; the chaos harness injects faults and writes test data, so it only runs against a store on this host (127.0.0.1, ::1, localhost)", ErrInvalid, host)
		}
		eps = append(eps, net.JoinHostPort(host, port))
	}
	if u.Scheme == "postgres" || u.Scheme == "postgresql" {
		q := u.Query()
		if q.Get("session_host") != "" || q.Get("session_port") != "" || q.Get("host") != "" || q.Get("port") != "" {
			return nil, 0, nil, fmt.Errorf("%w: store URL %s sets host, port, session_host or session_port as parameters; the harness proxies only the URL's host:port", ErrInvalid, redact(u))
		}
	}
	return u, kind, eps, nil
}

func defaultPort(scheme string) string {
	switch scheme {
	case "postgres", "postgresql":
		return "5432"
	case "redis", "rediss":
		return "6379"
	case "etcd", "etcds":
		return "2379"
	}
	return ""
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// proxiedURL is u with its endpoints replaced by the proxies' addresses, in
// the same order.
func proxiedURL(u *url.URL, proxies []*Proxy) string {
	c := *u
	hosts := make([]string, len(proxies))
	for i, p := range proxies {
		hosts[i] = p.Addr()
	}
	c.Host = strings.Join(hosts, ",")
	return c.String()
}

// withParam returns u with a query parameter set if it is not set already.
func withDefaultParam(u *url.URL, key, value string) *url.URL {
	c := *u
	q := c.Query()
	if q.Get(key) == "" {
		q.Set(key, value)
		c.RawQuery = q.Encode()
	}
	return &c
}

// plainPostgres is a PostgreSQL store URL without the store's own
// parameters: a connection string pgx accepts as is.
func plainPostgres(u *url.URL) string {
	c := *u
	q := c.Query()
	for _, p := range postgresParams {
		q.Del(p)
	}
	c.RawQuery = q.Encode()
	c.Scheme = "postgres"
	return c.String()
}
