package store

import (
	"net/url"
	"strings"
)

// Secrets in store URLs. A store URL can carry a secret in two places: the
// password of its user info (postgres://app:SECRET@db/app) and a query
// parameter (?password=SECRET, PostgreSQL's ?sslpassword=SECRET, a token).
//
// A query parameter is secret when its name, in lower case, contains one of
// secretParamWords, unless it ends in "file" (password_file=, ca_file= name a
// file, whose path is no secret and helps a user fix a mistake). "key" alone
// is not on the list: every store here uses it for a file path (PostgreSQL's
// sslkey, etcd's key); apikey, api_key, access_key and private_key are.
var secretParamWords = []string{"pass", "pwd", "secret", "token", "credential", "apikey", "api_key", "access_key", "private_key"}

// Redacted replaces a secret in output.
const Redacted = "xxxxx"

// SecretParam reports whether a query parameter's name marks its value as a
// secret.
func SecretParam(name string) bool {
	n := strings.ToLower(name)
	if strings.HasSuffix(n, "file") {
		return false
	}
	for _, w := range secretParamWords {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}

// RedactURL is the one redaction of a store URL for output: u as a string
// with the password of its user info and the value of every secret query
// parameter replaced by xxxxx, and without its fragment. An opaque URL
// (redis:user:pw@host, without the "//") shows nothing before its last '@'. Parameters keep
// their order and spelling.
func RedactURL(u *url.URL) string {
	c := *u
	c.Fragment, c.RawFragment = "", ""
	if i := strings.LastIndexByte(c.Opaque, '@'); i >= 0 {
		// redis:user:pw@host (no "//"): the user info is in the opaque part.
		c.Opaque = Redacted + c.Opaque[i:]
	}
	if c.User != nil {
		if _, ok := c.User.Password(); ok {
			c.User = url.UserPassword(c.User.Username(), Redacted)
		}
	}
	if c.RawQuery != "" {
		parts := strings.Split(c.RawQuery, "&")
		for i, p := range parts {
			k, _, _ := strings.Cut(p, "=")
			name, err := url.QueryUnescape(k)
			if err != nil {
				name = k
			}
			if SecretParam(name) || strings.Contains(p, ";") {
				parts[i] = k + "=" + Redacted
			}
		}
		c.RawQuery = strings.Join(parts, "&")
	}
	return c.String()
}
