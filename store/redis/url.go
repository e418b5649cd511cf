package redis

import (
	"context"
	"net/url"
	"os"
	"strings"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/storekit"
)

// Schemes are the URL schemes OpenURL accepts.
var Schemes = []string{"redis", "rediss"}

// Open is OpenURL for a URL string. Errors never include the password.
func Open(ctx context.Context, rawURL string) (*Store, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		// url.Parse's error quotes the whole URL, password included.
		return nil, kit.Invalid("", "the Redis URL does not parse")
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
//	                   (cacert=F, etcd's spelling, is accepted too)
//	cert_file=F        rediss: a client certificate (PEM), with key_file=F, its key
//	server_name=N      rediss: the name to verify in the server's certificate
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
			return nil, kit.Invalid("URL "+store.RedactURL(u), "database %d does not exist on this server (%v)", opt.DB, err)
		}
		return nil, kit.Wrap("connect to "+store.RedactURL(u), err)
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
		return nil, Options{}, kit.Invalid("", "Redis URL is nil")
	}
	p := kit.Params(u)
	if u.Scheme != "redis" && u.Scheme != "rediss" {
		return nil, Options{}, p.Invalid("scheme %q is not redis or rediss", u.Scheme)
	}
	if u.Opaque != "" || u.Host == "" {
		return nil, Options{}, p.Invalid("no host; the form is redis://[user[:password]@]host[:port][/db]")
	}
	sopts := Options{Prefix: p.String("prefix", DefaultPrefix)}
	if err := validatePrefix(sopts.Prefix); err != nil && p.Err() == nil {
		p.Invalid("%v", err)
	}
	if p.OneOf("tokens", TokensServerTime.String(), TokensServerTime.String(), TokensCounter.String()) == TokensCounter.String() {
		sopts.Tokens = TokensCounter
	}
	if n := p.Int("token_floor", -1, 0, maxTokenFloor); n >= 0 {
		sopts.Floor = func(context.Context, string) (int64, error) { return n, nil }
	}
	passwordFile := p.String("password_file", "")
	tlsFiles := p.TLSFiles()
	if err := p.Err(); err != nil {
		return nil, Options{}, err
	}
	if tlsFiles.Given() && u.Scheme != "rediss" {
		names, verb := tlsFiles.Names(), "needs"
		if len(names) > 1 {
			verb = "need"
		}
		return nil, Options{}, p.Invalid("%s %s the rediss scheme", strings.Join(names, ", "), verb)
	}
	_, hasRetries := p.Rest()["max_retries"]

	// go-redis parses the rest, and rejects options it does not know.
	rest := *u
	rest.RawQuery = p.Rest().Encode()
	opt, err := goredis.ParseURL(rest.String())
	if err != nil {
		// Its errors name an option or the database; make sure of the password.
		return nil, Options{}, p.Invalid("%s", storekit.Scrub(err.Error(), storekit.Secrets(u)))
	}
	if passwordFile != "" {
		if _, set := u.User.Password(); set {
			return nil, Options{}, p.Invalid("both a password and password_file are given")
		}
		b, err := os.ReadFile(passwordFile)
		if err != nil {
			return nil, Options{}, p.Invalid("password_file: %v", err)
		}
		opt.Password = strings.TrimRight(string(b), "\r\n")
	}
	if tlsFiles.Given() {
		p.ApplyTLS(tlsFiles, opt.TLSConfig)
		if err := p.Err(); err != nil {
			return nil, Options{}, err
		}
	}
	if !hasRetries {
		opt.MaxRetries = -1
	}
	opt.ContextTimeoutEnabled = true
	return opt, sopts, nil
}
