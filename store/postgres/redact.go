package postgres

import (
	"net/url"
	"regexp"
	"sort"
	"strings"
)

// secretParams are connection parameters whose values are never shown.
var secretParams = map[string]bool{"password": true, "sslpassword": true}

// Redact returns a connection string (URL or key=value form) fit for a log
// line or an error message: the password, in the user info or as a
// parameter, is replaced by "xxxxx". Leasehold never prints a connection
// string any other way.
func Redact(dsn string) string {
	if strings.Contains(dsn, "://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return "(unparseable connection URL)"
		}
		return RedactURL(u)
	}
	return kvPassword.ReplaceAllString(dsn, "${1}xxxxx")
}

// kvPassword matches password=value in the key=value form, the value bare or
// single-quoted (with \' escapes).
var kvPassword = regexp.MustCompile(`((?:^|\s)(?:ssl)?password\s*=\s*)(?:'(?:[^'\\]|\\.)*'|\S*)`)

// RedactURL returns u as a string with its password hidden, in the user
// info and in any password or sslpassword query parameter.
func RedactURL(u *url.URL) string {
	c := *u
	if c.User != nil {
		if _, ok := c.User.Password(); ok {
			c.User = url.UserPassword(c.User.Username(), "xxxxx")
		}
	}
	q := c.Query()
	changed := false
	for k := range q {
		if secretParams[strings.ToLower(k)] {
			q.Set(k, "xxxxx")
			changed = true
		}
	}
	if changed {
		c.RawQuery = q.Encode()
	}
	return c.String()
}

var (
	urlUserPassword = regexp.MustCompile(`://[^/?#@]*?:([^/?#@]*)@`)
	urlParamSecret  = regexp.MustCompile(`[?&](?i:ssl)?password=([^&#]*)`)
	kvSecret        = regexp.MustCompile(`(?:^|\s)(?:ssl)?password\s*=\s*('(?:[^'\\]|\\.)*'|\S*)`)
)

// passwordsIn returns every password-like value in a connection string, as
// written and unescaped, longest first, even when the string does not parse.
func passwordsIn(dsn string) []string {
	var out []string
	add := func(v string) {
		if v == "" {
			return
		}
		out = append(out, v)
		if u, err := url.PathUnescape(v); err == nil && u != v {
			out = append(out, u)
		}
		if u, err := url.QueryUnescape(v); err == nil && u != v {
			out = append(out, u)
		}
	}
	if m := urlUserPassword.FindStringSubmatch(dsn); m != nil {
		add(m[1])
	}
	for _, m := range urlParamSecret.FindAllStringSubmatch(dsn, -1) {
		add(m[1])
	}
	for _, m := range kvSecret.FindAllStringSubmatch(dsn, -1) {
		v := m[1]
		if len(v) >= 2 && v[0] == '\'' && v[len(v)-1] == '\'' {
			v = v[1 : len(v)-1]
		}
		add(v)
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}
