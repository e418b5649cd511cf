package storekit

import "net/url"

// WithoutParam returns a URL edit that removes the parameter name: a
// store.Descriptor's ReadOnly for a store whose only creating parameter is
// name (create_if_missing).
func WithoutParam(name string) func(*url.URL) error {
	return func(u *url.URL) error {
		q := u.Query()
		q.Del(name)
		u.RawQuery = q.Encode()
		return nil
	}
}

// DefaultParam returns a URL edit that sets the parameter name to value
// unless the URL sets it: a store.Descriptor's Creating.
func DefaultParam(name, value string) func(*url.URL) error {
	return func(u *url.URL) error {
		q := u.Query()
		if q.Get(name) == "" {
			q.Set(name, value)
			u.RawQuery = q.Encode()
		}
		return nil
	}
}
