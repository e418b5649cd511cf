package redis

import (
	"context"
	"crypto/x509"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/store"
)

// Schemes are the URL schemes OpenURL accepts.
var Schemes = []string{"redis", "rediss"}

// Open is OpenURL for a URL string. Errors never include the password.
func Open(ctx context.Context, rawURL string) (*Store, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		// url.Parse's error quotes the whole URL, password included.
		return nil, invalidf("the Redis URL does not parse")
	}
	return open(ctx, u)
}

// OpenURL opens a Store on the Redis server named by u, and checks that it
// answers (PING, which also checks the credentials). The URL form is
//
//	redis://[user[:password]@]host[:port][/db][?option=value&...]
//	rediss://...   the same over TLS
//
// for example redis://app:secret@127.0.0.1:6379/0?prefix=myapp:locks:
//
// Options of leasehold:
//
//	prefix=P           key and channel prefix (default "leasehold:"); see Options.Prefix
//	password_file=F    read the password from file F (trailing newline dropped), so
//	                   that it is not on a command line
//	ca_file=F          rediss: trust the PEM certificates in F instead of the system roots
//	tokens=M           how tokens are made: server_time (the default) or counter;
//	                   see Tokens and Options.Tokens
//	token_floor=N      a token every grant must be above, for example the highest
//	                   token the fenced resource has accepted: Options.Floor
//	                   returning N. A decimal integer from 0 to 2^53.
//
// Any other option is go-redis's (redis.ParseURL): dial_timeout, read_timeout,
// write_timeout, pool_size, protocol, client_name, skip_verify (never in
// production), max_retries, and so on. Unless the URL sets max_retries, the
// client makes no retries of its own (leasehold's loop retries, knowing that a
// lost reply is an unknown outcome), and it always honours context deadlines.
//
// The Store owns the client: Close closes it. Errors name the URL with its
// password redacted.
func OpenURL(ctx context.Context, u *url.URL) (store.Store, error) {
	s, err := open(ctx, u)
	if err != nil {
		return nil, err
	}
	return s, nil
}

func open(ctx context.Context, u *url.URL) (*Store, error) {
	opt, sopts, err := parseURL(u)
	if err != nil {
		return nil, err
	}
	c := goredis.NewClient(opt)
	if err := c.Ping(ctx).Err(); err != nil {
		c.Close()
		if strings.Contains(err.Error(), "DB index is out of range") {
			// The URL names a database the server does not have: bad input.
			return nil, invalidf("Redis URL %s: database %d does not exist on this server (%v)", redact(u), opt.DB, err)
		}
		return nil, fmt.Errorf("leasehold/redis: connect to %s: %w", redact(u), err)
	}
	sopts.CloseClient = true
	s, err := New(c, sopts)
	if err != nil {
		c.Close()
		return nil, err
	}
	return s, nil
}

// ParseURL turns a redis:// or rediss:// URL (see OpenURL) into go-redis
// options and the key prefix, without connecting. Errors match
// store.ErrInvalid and never include the password. The store's other
// options (tokens, token_floor) are checked but not returned: ParseOptions
// returns them all.
func ParseURL(u *url.URL) (*goredis.Options, string, error) {
	opt, sopts, err := parseURL(u)
	if err != nil {
		return nil, "", err
	}
	return opt, sopts.Prefix, nil
}

// ParseOptions is ParseURL with all of the store's Options the URL sets
// (Prefix, Tokens, and Floor for token_floor), ready for New.
func ParseOptions(u *url.URL) (*goredis.Options, Options, error) {
	return parseURL(u)
}

// maxTokenFloor is the largest token_floor: the scripts' Lua numbers are
// doubles, exact only up to 2^53.
const maxTokenFloor = 1 << 53

func parseURL(u *url.URL) (*goredis.Options, Options, error) {
	if u == nil {
		return nil, Options{}, invalidf("Redis URL is nil")
	}
	bad := func(format string, args ...any) error {
		return invalidf("Redis URL %s: %s", redact(u), fmt.Sprintf(format, args...))
	}
	if u.Scheme != "redis" && u.Scheme != "rediss" {
		return nil, Options{}, bad("scheme %q is not redis or rediss", u.Scheme)
	}
	if u.Opaque != "" || u.Host == "" {
		return nil, Options{}, bad("no host; the form is redis://[user[:password]@]host[:port][/db]")
	}
	q := u.Query()
	take := func(key string) (string, bool) {
		vs, ok := q[key]
		delete(q, key)
		if !ok {
			return "", false
		}
		return vs[len(vs)-1], true
	}
	prefix, hasPrefix := take("prefix")
	if hasPrefix && prefix == "" {
		return nil, Options{}, bad("prefix is empty")
	}
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if err := validatePrefix(prefix); err != nil {
		return nil, Options{}, bad("%s", err.(*invalidError).msg)
	}
	var sopts Options
	if v, ok := take("tokens"); ok {
		switch v {
		case TokensServerTime.String():
			sopts.Tokens = TokensServerTime
		case TokensCounter.String():
			sopts.Tokens = TokensCounter
		default:
			return nil, Options{}, bad("tokens=%q: want server_time or counter", v)
		}
	}
	if v, ok := take("token_floor"); ok {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 || n > maxTokenFloor {
			return nil, Options{}, bad("token_floor=%q: want a decimal integer from 0 to %d", v, int64(maxTokenFloor))
		}
		sopts.Floor = func(context.Context, string) (int64, error) { return n, nil }
	}
	passwordFile, hasPasswordFile := take("password_file")
	caFile, hasCAFile := take("ca_file")
	if hasCAFile && u.Scheme != "rediss" {
		return nil, Options{}, bad("ca_file needs the rediss scheme")
	}
	_, hasRetries := q["max_retries"]

	// go-redis parses the rest, and rejects options it does not know.
	rest := *u
	rest.RawQuery = q.Encode()
	opt, err := goredis.ParseURL(rest.String())
	if err != nil {
		// Its errors name an option or the database; make sure of the password.
		msg := err.Error()
		if pw, set := u.User.Password(); set && pw != "" {
			msg = strings.ReplaceAll(msg, pw, "xxxxx")
		}
		return nil, Options{}, bad("%s", msg)
	}
	if hasPasswordFile {
		if _, set := u.User.Password(); set {
			return nil, Options{}, bad("both a password and password_file are given")
		}
		b, err := os.ReadFile(passwordFile)
		if err != nil {
			return nil, Options{}, bad("password_file: %v", err)
		}
		opt.Password = strings.TrimRight(string(b), "\r\n")
	}
	if hasCAFile {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, Options{}, bad("ca_file: %v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, Options{}, bad("ca_file %s holds no PEM certificate", caFile)
		}
		opt.TLSConfig.RootCAs = pool
	}
	if !hasRetries {
		opt.MaxRetries = -1
	}
	opt.ContextTimeoutEnabled = true
	sopts.Prefix = prefix
	return opt, sopts, nil
}

// redact returns u for an error message, without its password. An opaque
// URL (redis:user:pw@host, a missing "//") is not shown at all.
func redact(u *url.URL) string {
	if u.Opaque != "" {
		return u.Scheme + ":(opaque URL not shown)"
	}
	return u.Redacted()
}

// invalidError is a bad argument: it matches store.ErrInvalid and reads
// "leasehold/redis: invalid argument: ...".
type invalidError struct{ msg string }

func invalidf(format string, args ...any) error {
	return &invalidError{msg: fmt.Sprintf(format, args...)}
}

func (e *invalidError) Error() string        { return "leasehold/redis: invalid argument: " + e.msg }
func (e *invalidError) Is(target error) bool { return target == store.ErrInvalid }
