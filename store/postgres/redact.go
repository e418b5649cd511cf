package postgres

import (
	"net/url"
	"regexp"
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
