package chaos

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/postgres"
	"github.com/leasehold/leasehold/store/registry"
	"github.com/leasehold/leasehold/store/sqlite"
)

// The stores, how each is reached, their default ports and their own URL
// parameters come from store/registry: a store registered there is one the
// harness can run against.

// supportedSchemes are the store URL schemes the harness can run against.
func supportedSchemes() []string { return registry.Schemes() }

// proxied reports whether the harness puts fault proxies in front of a
// store reached this way at these endpoints (and so can inject network
// faults): a network store always, an API store (Kubernetes) when its
// kubeconfig names a server on this host.
func proxied(r store.Reach, eps []string) bool {
	return r == store.ReachNetwork || (r == store.ReachAPI && len(eps) > 0)
}

// redact hides a URL's secrets, as every output of the command does.
func redact(u *url.URL) string { return store.RedactURL(u) }

// parseStoreURL checks a store URL for the harness and returns its store and
// its endpoints (host:port) for a network store.
func parseStoreURL(raw string, allowRemote bool) (*url.URL, *store.Descriptor, []string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) { // its message repeats the URL, password included
			err = ue.Err
		}
		return nil, nil, nil, fmt.Errorf("%w: store URL does not parse: %v", ErrInvalid, err)
	}
	d, ok := registry.Lookup(u.Scheme)
	if !ok {
		return nil, nil, nil, fmt.Errorf("%w: the chaos harness cannot run against %s:// stores (it must put a fault proxy between each node and the store); supported: %s",
			ErrInvalid, u.Scheme, strings.Join(supportedSchemes(), ", "))
	}
	if d.Reach == store.ReachLocal {
		return u, d, nil, nil
	}
	if d.Reach == store.ReachAPI {
		// The API server's address is in the kubeconfig (or the pod), not
		// the URL: the harness cannot see that it is on this host.
		if !allowRemote {
			return nil, nil, nil, fmt.Errorf("%w: the chaos harness cannot run against %s:// stores without --allow-remote: the API server's address comes from the kubeconfig, not the URL, so the harness cannot check that it is on this host; it writes test data (a Lease) there, so point the kubeconfig at a test cluster only", ErrInvalid, u.Scheme)
		}
		// A server on this host is proxied through a kubeconfig of the
		// node's own (kubeproxy.go).
		if ep := kubeEndpoint(u); ep != "" {
			return u, d, []string{ep}, nil
		}
		return u, d, nil, nil
	}
	if u.Host == "" {
		return nil, nil, nil, fmt.Errorf("%w: store URL %s names no host:port; the harness proxies TCP connections only (no Unix sockets)", ErrInvalid, redact(u))
	}
	var eps []string
	for _, h := range strings.Split(u.Host, ",") {
		host, port, err := net.SplitHostPort(h)
		if err != nil {
			port = d.DefaultPort
			host = h
		}
		if !allowRemote && !isLoopback(host) {
			return nil, nil, nil, fmt.Errorf("%w: store host %q is not a loopback address; the chaos harness injects faults and writes test data, so it only runs against a store on this host (127.0.0.1, ::1, localhost)", ErrInvalid, host)
		}
		eps = append(eps, net.JoinHostPort(host, port))
	}
	q := u.Query()
	for _, p := range d.AddrParams {
		if q.Get(p) != "" {
			// Parameters that name another server would bypass the proxies.
			return nil, nil, nil, fmt.Errorf("%w: store URL %s sets %s as parameters; the harness proxies only the URL's host:port", ErrInvalid, redact(u), orList(d.AddrParams))
		}
	}
	return u, d, eps, nil
}

// orList is "a, b or c".
func orList(s []string) string {
	if len(s) < 2 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " or " + s[len(s)-1]
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
func proxiedURL(u *url.URL, proxies []*proxy) string {
	c := *u
	hosts := make([]string, len(proxies))
	for i, p := range proxies {
		hosts[i] = p.Addr()
	}
	c.Host = strings.Join(hosts, ",")
	return c.String()
}

// creatingURL is u adjusted so that opening it creates the store's table
// (a PostgreSQL store's create_if_missing=true, unless the URL says).
func creatingURL(u *url.URL, d *store.Descriptor) (*url.URL, error) {
	c := *u
	if d.Creating != nil {
		if err := d.Creating(&c); err != nil {
			return nil, err
		}
	}
	return &c, nil
}

// defaultRegister is the register that lives beside a store: a table on the
// same PostgreSQL server, a SQLite file of its own; else the harness's HTTP
// register.
func defaultRegister(d *store.Descriptor) string {
	switch d {
	case &postgres.Descriptor:
		return registerPostgres
	case &sqlite.Descriptor:
		return registerSQLite
	}
	return registerHTTP
}

// plainPostgres is a PostgreSQL store URL without the store's own
// parameters: a connection string pgx accepts as is.
func plainPostgres(u *url.URL) string {
	c := *u
	q := c.Query()
	for _, p := range postgres.Descriptor.Params {
		q.Del(p)
	}
	c.RawQuery = q.Encode()
	c.Scheme = "postgres"
	return c.String()
}
