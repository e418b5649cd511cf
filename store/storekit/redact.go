package storekit

import (
	"net/url"
	"slices"
	"strings"

	"github.com/leasehold/leasehold/store"
)

// Redaction. store.RedactURL is the one way a store URL is shown (the
// password and every secret parameter, store.SecretParam, replaced by
// store.Redacted); a store's errors name a URL only through it. Secrets and
// Scrub cover the other case: a driver's error that repeats a secret of the
// URL it was given.

// Secrets returns the secret values u carries (the password of its user
// info and the values of its secret parameters), each in every form it may
// take in a message: as given, unescaped, and escaped as in a URL's query,
// path and user info.
func Secrets(u *url.URL) []string {
	if u == nil {
		return nil
	}
	var vals []string
	if u.User != nil {
		if pw, ok := u.User.Password(); ok {
			vals = append(vals, pw)
		}
	}
	for _, part := range strings.Split(u.RawQuery, "&") {
		k, v, ok := strings.Cut(part, "=")
		if !ok || v == "" {
			continue
		}
		name, err := url.QueryUnescape(k)
		if err != nil {
			name = k
		}
		if !store.SecretParam(name) {
			continue
		}
		vals = append(vals, v)
		if uv, err := url.QueryUnescape(v); err == nil {
			vals = append(vals, uv)
		}
	}
	var out []string
	for _, v := range vals {
		if v == "" || v == store.Redacted {
			continue
		}
		for _, form := range []string{v, url.QueryEscape(v), url.PathEscape(v), url.UserPassword("", v).String()[1:]} {
			if !slices.Contains(out, form) {
				out = append(out, form)
			}
		}
	}
	return out
}

// Scrub replaces every secret in text with store.Redacted, the longest
// secrets first (so a secret that contains another is replaced whole).
func Scrub(text string, secrets []string) string {
	s := slices.Clone(secrets)
	slices.SortFunc(s, func(a, b string) int { return len(b) - len(a) })
	for _, v := range s {
		if v != "" {
			text = strings.ReplaceAll(text, v, store.Redacted)
		}
	}
	return text
}
