package etcd

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/etcd/internal/etcdapi"
	"github.com/leasehold/leasehold/store/etcd/internal/etcdwire"
)

// Config says how to reach an etcd cluster.
type Config struct {
	// Endpoints are the client URLs of the cluster's members
	// ("https://10.0.0.1:2379" or "10.0.0.1:2379": https when TLS is set).
	// Give all of them: the client uses one at a time and moves on to the
	// next when it cannot be reached or has no leader.
	Endpoints []string
	// Prefix is the key prefix the store keeps its keys under, used verbatim
	// (see New).
	Prefix string
	// Username and Password authenticate with etcd's own user/password auth.
	// The user needs read and write on Prefix only (see the package doc).
	Username string
	Password string
	// TLS, when set, is used for every connection; set Certificates in it for
	// client certificate authentication (with etcd's --client-cert-auth, the
	// certificate's common name is the etcd user).
	TLS *tls.Config
	// DialTimeout bounds connecting, authenticating, and the first request
	// Open makes to check access to Prefix (as does the deadline of Open's
	// context, if sooner). Zero means 5 s.
	DialTimeout time.Duration
}

// The errors of etcd that callers tell apart, matched with errors.Is by the
// errors of both clients (Open's and etcdv3client's adapter of clientv3).
var (
	ErrPermissionDenied error = etcdapi.ErrPermissionDenied // the user may not read or write the prefix
	ErrAuthFailed       error = etcdapi.ErrAuthFailed       // wrong user or password
	ErrUserEmpty        error = etcdapi.ErrUserEmpty        // auth is on and no user was given
	ErrLeaseNotFound    error = etcdapi.ErrLeaseNotFound    // an etcd lease that has ended
)

// ErrUnreachable is wrapped by Open when no endpoint answered in time.
var ErrUnreachable = errors.New("leasehold/etcd: no etcd member answered")

// Open connects to etcd and checks that the configured user can read the
// store's prefix, so that unreachable endpoints, wrong credentials and a
// missing permission fail here, with an error that says which. The store owns
// the client and closes it on Close. It uses the store's own small etcd
// client (package etcdwire: gRPC over net/http's HTTP/2), not clientv3; to
// use a *clientv3.Client of your own, see package etcdv3client.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	if len(cfg.Endpoints) == 0 {
		return nil, kit.Invalid("open", "no endpoints")
	}
	for _, ep := range cfg.Endpoints {
		if ep == "" || strings.ContainsAny(ep, " \t\n") {
			return nil, kit.Invalid("open", "bad endpoint %q", ep)
		}
	}
	if err := validatePrefix(cfg.Prefix); err != nil {
		return nil, err
	}
	if (cfg.Username == "") != (cfg.Password == "") {
		return nil, kit.Invalid("open", "a username needs a password and a password a username")
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 5 * time.Second
	}
	// DialTimeout bounds connecting and authenticating: keep it within ctx's
	// deadline too.
	if dl, ok := ctx.Deadline(); ok {
		left := time.Until(dl)
		if left <= 0 {
			return nil, fmt.Errorf("leasehold/etcd: open: %w", context.DeadlineExceeded)
		}
		if left < cfg.DialTimeout {
			cfg.DialTimeout = left
		}
	}
	where := strings.Join(cfg.Endpoints, ",")
	// Authenticating and the first request each get DialTimeout, as with
	// clientv3 (whose New authenticates within DialTimeout).
	actx, cancel := context.WithTimeout(ctx, cfg.DialTimeout)
	defer cancel()
	cli, err := etcdwire.New(actx, etcdwire.Config{
		Endpoints:   cfg.Endpoints,
		DialTimeout: cfg.DialTimeout,
		Username:    cfg.Username,
		Password:    cfg.Password,
		TLS:         cfg.TLS,
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("leasehold/etcd: open %s: %w", where, ctx.Err())
		}
		return nil, openError(where, cfg, err)
	}
	s, err := NewOnAPI(cli, cfg.Prefix)
	if err != nil {
		cli.Close()
		return nil, err
	}
	s.own = true
	pctx, cancel := context.WithTimeout(ctx, cfg.DialTimeout)
	defer cancel()
	// A read of the prefix checks the connection, the credentials and the
	// read permission in one request.
	op := etcdapi.GetPrefix(cfg.Prefix + recordDir)
	op.CountOnly = true
	if _, err := cli.Range(pctx, op); err != nil {
		cli.Close()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("leasehold/etcd: open %s: %w", where, ctx.Err())
		}
		return nil, openError(where, cfg, err)
	}
	return s, nil
}

func openError(where string, cfg Config, err error) error {
	user := ""
	if cfg.Username != "" {
		user = fmt.Sprintf(" as user %q", cfg.Username)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w at %s within %v%s (%w)", ErrUnreachable, where, cfg.DialTimeout.Round(time.Millisecond), user, err)
	}
	return fmt.Errorf("leasehold/etcd: open %s%s: %w", where, user, err)
}

// Schemes are the URL schemes OpenURL accepts.
var Schemes = []string{"etcd", "etcds"}

// OpenURL opens a store from a URL:
//
//	etcd://[user:password@]host:port[,host:port...]/[prefix][?options]
//	etcds://...   (the same over TLS)
//
// The hosts are the client endpoints of the cluster's members (IPv6 literals
// are not accepted in a list: use host names). The path, without its leading
// "/", is the key prefix, with a "/" added if it lacks one: etcd://h:2379/locks
// keeps name N under "locks/N/", where `etcdctl lock locks/N` contends for it.
// No path means the root of the keyspace. Options:
//
//	prefix=P        the key prefix verbatim, instead of the path (for "/app/" style prefixes)
//	cacert=FILE     CA bundle to verify the servers (implies TLS)
//	cert=FILE       client certificate, with key=FILE (implies TLS)
//	key=FILE        the client certificate's private key
//	server_name=N   the name to verify in the servers' certificates
//	dial_timeout=D  a Go duration (default 5s)
//
// The user and password are etcd's own user/password auth. Error messages
// never contain the password.
func OpenURL(ctx context.Context, u *url.URL) (store.Store, error) {
	cfg, err := ConfigFromURL(u)
	if err != nil {
		return nil, err
	}
	return Open(ctx, cfg)
}

// ConfigFromURL parses the URL form of OpenURL.
func ConfigFromURL(u *url.URL) (Config, error) {
	bad := func(format string, args ...any) (Config, error) {
		return Config{}, kit.Invalid("url "+u.Redacted(), format, args...)
	}
	var useTLS bool
	switch u.Scheme {
	case "etcd":
	case "etcds":
		useTLS = true
	default:
		return bad("scheme %q is not etcd or etcds", u.Scheme)
	}
	if u.Opaque != "" {
		return bad("want etcd://host:port/prefix")
	}
	var cfg Config
	for _, h := range strings.Split(u.Host, ",") {
		host, port, err := net.SplitHostPort(h)
		if err != nil || host == "" || port == "" {
			return bad("endpoint %q is not host:port", h)
		}
		cfg.Endpoints = append(cfg.Endpoints, h)
	}
	if u.User != nil {
		cfg.Username = u.User.Username()
		cfg.Password, _ = u.User.Password()
		if cfg.Username == "" || cfg.Password == "" {
			return bad("user info needs both a user and a password")
		}
	}
	cfg.Prefix = strings.TrimPrefix(u.Path, "/")
	if cfg.Prefix != "" && !strings.HasSuffix(cfg.Prefix, "/") {
		cfg.Prefix += "/"
	}
	q := u.Query()
	for k := range q {
		switch k {
		case "prefix", "cacert", "cert", "key", "server_name", "dial_timeout":
		default:
			return bad("unknown option %q", k)
		}
	}
	if q.Has("prefix") {
		cfg.Prefix = q.Get("prefix")
	}
	if d := q.Get("dial_timeout"); d != "" {
		v, err := time.ParseDuration(d)
		if err != nil || v <= 0 {
			return bad("dial_timeout %q is not a positive duration", d)
		}
		cfg.DialTimeout = v
	}
	cacert, cert, key := q.Get("cacert"), q.Get("cert"), q.Get("key")
	if (cert == "") != (key == "") {
		return bad("cert and key go together")
	}
	if useTLS || cacert != "" || cert != "" {
		tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: q.Get("server_name")}
		if cacert != "" {
			pem, err := os.ReadFile(cacert)
			if err != nil {
				return bad("cacert: %v", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return bad("cacert %s holds no PEM certificate", cacert)
			}
			tc.RootCAs = pool
		}
		if cert != "" {
			c, err := tls.LoadX509KeyPair(cert, key)
			if err != nil {
				return bad("client certificate: %v", err)
			}
			tc.Certificates = []tls.Certificate{c}
		}
		cfg.TLS = tc
		for i, ep := range cfg.Endpoints {
			cfg.Endpoints[i] = "https://" + ep
		}
	} else {
		for i, ep := range cfg.Endpoints {
			cfg.Endpoints[i] = "http://" + ep
		}
	}
	return cfg, nil
}
