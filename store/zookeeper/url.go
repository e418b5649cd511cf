package zookeeper

import (
	"context"
	"net"
	"net/url"
	"strings"

	"github.com/go-zookeeper/zk"

	"github.com/leasehold/leasehold/store"
)

// Schemes are the URL schemes OpenURL accepts.
var Schemes = []string{"zookeeper"}

// OpenURL opens a store named by a URL:
//
//	zookeeper://[user:password@]host:2181,host:2182/root?acl=creator&dial_timeout=5s
//
// The hosts are the ensemble's members (port 2181 when none is given); the
// path is the root under which lease names live (Config.Root; none means
// DefaultRoot, "/" the top of the tree). A user and password are ZooKeeper
// digest credentials. Parameters:
//
//   - acl: the ACL of the nodes the store creates: "creator" (all
//     permissions for the credentials' user only; the default with
//     credentials, which it needs) or "open" (all permissions for anyone,
//     ZooKeeper's OPEN_ACL_UNSAFE; the default without).
//   - dial_timeout: Config.DialTimeout.
func OpenURL(ctx context.Context, u *url.URL) (store.Store, error) {
	cfg, err := ConfigFromURL(u)
	if err != nil {
		return nil, err
	}
	return Open(ctx, cfg)
}

// ConfigFromURL parses the URL form of OpenURL.
func ConfigFromURL(u *url.URL) (Config, error) {
	p := kit.Params(u)
	if err := p.Err(); err != nil {
		return Config{}, err
	}
	if u.Scheme != "zookeeper" {
		return Config{}, p.Invalid("scheme %q is not zookeeper", u.Scheme)
	}
	if u.Opaque != "" || u.Host == "" {
		return Config{}, p.Invalid("want zookeeper://host:2181,host:2182/root")
	}
	var cfg Config
	for _, h := range strings.Split(u.Host, ",") {
		host, port, err := net.SplitHostPort(h)
		if err != nil {
			host, port = h, "2181"
		}
		if host == "" || port == "" || strings.ContainsAny(host, "[]") && !strings.HasPrefix(h, "[") {
			return Config{}, p.Invalid("server %q is not host:port", h)
		}
		cfg.Servers = append(cfg.Servers, net.JoinHostPort(host, port))
	}
	if u.User != nil {
		cfg.Username = u.User.Username()
		cfg.Password, _ = u.User.Password()
		if cfg.Username == "" || cfg.Password == "" {
			return Config{}, p.Invalid("the user info needs both a user and a password (ZooKeeper digest credentials)")
		}
	}
	cfg.Root = u.Path
	acl := p.OneOf("acl", "", "creator", "open")
	cfg.DialTimeout = p.Duration("dial_timeout", 0)
	if err := p.Done(); err != nil {
		return Config{}, err
	}
	switch acl {
	case "creator":
		if cfg.Username == "" {
			return Config{}, p.Invalid("acl=creator needs credentials in the URL (user:password@): the creator is the authenticated user")
		}
		cfg.ACL = zk.AuthACL(zk.PermAll)
	case "open":
		cfg.ACL = zk.WorldACL(zk.PermAll)
	}
	return cfg, nil
}
