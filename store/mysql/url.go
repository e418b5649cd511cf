package mysql

import (
	"context"
	"crypto/tls"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/storekit"
)

// URL query parameters that OpenURL reads. Any other parameter is refused,
// naming it: a typo is never ignored.
const (
	ParamTable           = "table"             // Options.Table
	ParamCreateIfMissing = "create_if_missing" // Options.CreateIfMissing: true or false
	ParamWatch           = "watch"             // false sets Options.NoWatch
	ParamWatchInterval   = "watch_interval"    // Options.WatchInterval, a Go duration (25ms)
	// ParamDoorbells is Options.Doorbells: how many GET_LOCK doorbells the
	// store keeps at most (default DefaultDoorbells; 0: none, waiters in
	// other processes learn of a release only at their next poll).
	ParamDoorbells = "doorbells"
	// ParamTLS is the TLS mode: true (verify the server against the system
	// roots, or ca_file), false (the default without ca_file: plain TCP),
	// skip-verify (encrypt, verify nothing), preferred (TLS if the server
	// offers it, verify nothing). ca_file, cert_file, key_file and
	// server_name (storekit's one spelling) imply tls=true.
	ParamTLS = "tls"
	// Timeouts of the driver: dial, and each read and write on a connection.
	ParamTimeout      = "timeout"
	ParamReadTimeout  = "read_timeout"
	ParamWriteTimeout = "write_timeout"
	// ParamMaxOpenConns caps the pool (default 10). Each GET_LOCK lock and
	// each waiting Watch poller uses connections from it.
	ParamMaxOpenConns = "max_open_conns"
)

// Params are the store's URL parameters (for the registry's descriptor).
var Params = []string{ParamTable, ParamCreateIfMissing, ParamWatch, ParamWatchInterval, ParamDoorbells, ParamTLS,
	storekit.ParamCAFile, storekit.ParamCertFile, storekit.ParamKeyFile, storekit.ParamServerName,
	ParamTimeout, ParamReadTimeout, ParamWriteTimeout, ParamMaxOpenConns}

// ParseURL reads a store URL of the form
//
//	mysql://user:password@host:3306/db?table=leader_lease&tls=true
//
// into the driver's config and the store's options (see the Param
// constants). Errors match store.ErrInvalid and never show the password.
func ParseURL(u *url.URL) (*mysql.Config, Options, int, error) {
	var opts Options
	p := kit.Params(u)
	if u == nil {
		return nil, opts, 0, p.Err()
	}
	if u.Scheme != "mysql" && u.Scheme != "mariadb" {
		return nil, opts, 0, p.Invalid("scheme %q is not mysql or mariadb", u.Scheme)
	}
	opts.Table = p.String(ParamTable, "")
	opts.CreateIfMissing = p.Bool(ParamCreateIfMissing, false)
	opts.NoWatch = !p.Bool(ParamWatch, true)
	opts.WatchInterval = p.Duration(ParamWatchInterval, 0)
	if n := p.Int(ParamDoorbells, DefaultDoorbells, 0, 1000); n > 0 {
		opts.Doorbells = int(n)
	} else {
		opts.Doorbells = -1
	}
	mode := p.OneOf(ParamTLS, "", "true", "false", "skip-verify", "preferred")
	files := p.TLSFiles()
	cfg := mysql.NewConfig()
	cfg.Timeout = p.Duration(ParamTimeout, 10*time.Second)
	cfg.ReadTimeout = p.Duration(ParamReadTimeout, 0)
	cfg.WriteTimeout = p.Duration(ParamWriteTimeout, 0)
	maxConns := int(p.Int(ParamMaxOpenConns, 10, 1, 10000))
	if err := p.Done(); err != nil {
		return nil, opts, 0, err
	}
	if opts.Table != "" {
		if _, err := tableName(opts.Table); err != nil {
			return nil, opts, 0, err
		}
	}
	if u.Opaque != "" || u.Host == "" {
		return nil, opts, 0, p.Invalid("the URL names no host: want mysql://user:password@host:3306/db")
	}
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil {
		host, port = u.Host, "3306"
	}
	if strings.Contains(host, ",") {
		return nil, opts, 0, p.Invalid("the URL names several hosts; this store connects to one (put a proxy or a router such as MySQL Router in front of a cluster)")
	}
	cfg.Net = "tcp"
	cfg.Addr = net.JoinHostPort(strings.Trim(host, "[]"), port)
	db := strings.TrimPrefix(u.Path, "/")
	if db == "" || strings.Contains(db, "/") {
		return nil, opts, 0, p.Invalid("the URL's path %q is not one database name: want mysql://user@host:3306/db", u.Path)
	}
	cfg.DBName = db
	if u.User != nil {
		cfg.User = u.User.Username()
		cfg.Passwd, _ = u.User.Password()
	}
	switch {
	case files.Given() && (mode == "false" || mode == "skip-verify" || mode == "preferred"):
		return nil, opts, 0, p.Invalid("%s given with tls=%s: a CA, a client certificate or a server name means tls=true", strings.Join(files.Names(), ", "), mode)
	case files.Given() || mode == "true":
		c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: strings.Trim(host, "[]")}
		p.ApplyTLS(files, c)
		if err := p.Err(); err != nil {
			return nil, opts, 0, err
		}
		cfg.TLS = c
	case mode == "skip-verify":
		cfg.TLS = &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: true}
	case mode == "preferred":
		cfg.TLS = &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: true}
		cfg.AllowFallbackToPlaintext = true
	}
	return cfg, opts, maxConns, nil
}

// OpenURL opens a store from a mysql:// (or mariadb://) URL; see ParseURL.
// This is the function the command's store registry calls.
func OpenURL(ctx context.Context, u *url.URL) (store.Store, error) {
	cfg, opts, maxConns, err := ParseURL(u)
	if err != nil {
		return nil, err
	}
	s, err := Open(ctx, cfg, opts)
	if err != nil {
		return nil, err
	}
	s.db.SetMaxOpenConns(maxConns)
	s.db.SetMaxIdleConns(maxConns)
	return s, nil
}
