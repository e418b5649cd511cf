package storekit

import (
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/leasehold/leasehold/store"
)

// Params reads the query parameters of a store URL: each read takes a
// parameter (by its name or an alias), checks its value, and remembers the
// name as known; Done then refuses whatever was not taken, naming it, so
// that a typo is never silently ignored. A store that hands the remaining
// parameters to a driver (pgx, go-redis) takes its own and passes Rest on.
//
// Errors are recorded, the first one wins, and every read after an error
// returns its default: read everything, then check Err or Done once. Each
// error matches store.ErrInvalid, reads
//
//	leasehold/<store>: URL <the URL, redacted>: invalid argument: ...
//
// and never shows a secret: the URL is redacted with store.RedactURL, and
// the value of a secret parameter (store.SecretParam) is not quoted.
//
// A parameter given twice is refused: which of two values (sslmode=disable
// and sslmode=verify-full) a reader would pick is not something to guess.
type Params struct {
	kit   Kit
	op    string
	q     url.Values
	known []string
	err   error
}

// Params starts reading u's query parameters.
func (k Kit) Params(u *url.URL) *Params {
	p := &Params{kit: k, op: "URL"}
	if u == nil {
		p.err = k.Invalid("URL", "the URL is nil")
		p.q = url.Values{}
		return p
	}
	p.op = "URL " + store.RedactURL(u)
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		// The parse error quotes the bad part, which may hold a secret.
		p.err = k.Invalid(p.op, "the URL query does not parse (look for a ';' or a '%%' not followed by two hex digits)")
	}
	p.q = q
	return p
}

// Invalid records (if it is the first error) and returns a bad-input error
// about the URL: for a rule the store checks itself ("ca_file needs the
// rediss scheme").
func (p *Params) Invalid(format string, args ...any) error {
	err := p.kit.Invalid(p.op, format, args...)
	if p.err == nil {
		p.err = err
	}
	return err
}

// Err is the first error of the reads so far.
func (p *Params) Err() error { return p.err }

// Lookup takes the parameter name, or one of its aliases (older
// spellings), and returns its value and whether it was given. Giving the
// name and an alias together, or one of them twice, is an error.
func (p *Params) Lookup(name string, aliases ...string) (string, bool) {
	p.known = append(p.known, name)
	var val, from string
	for _, n := range append([]string{name}, aliases...) {
		vs, ok := p.q[n]
		if !ok {
			continue
		}
		delete(p.q, n)
		switch {
		case from != "":
			p.Invalid("parameters %s and %s are the same parameter (%s is the older spelling of %s); give one", from, n, n, name)
			return "", false
		case len(vs) > 1:
			p.Invalid("parameter %s is given %d times; give it once", n, len(vs))
			return "", false
		}
		val, from = vs[0], n
	}
	return val, from != "" && p.err == nil
}

// Has reports whether the parameter name (or an alias) is present, without
// taking it.
func (p *Params) Has(name string, aliases ...string) bool {
	for _, n := range append([]string{name}, aliases...) {
		if p.q.Has(n) {
			return true
		}
	}
	return false
}

// shown is how a value is quoted in an error: not at all for a secret.
func shown(name, v string) string {
	if store.SecretParam(name) {
		return "(value not shown)"
	}
	return strconv.Quote(v)
}

// String takes a text parameter; def if it is absent. An empty value is
// refused (name=): a parameter given means something was meant.
func (p *Params) String(name, def string) string {
	v, ok := p.Lookup(name)
	switch {
	case !ok:
		return def
	case v == "":
		p.Invalid("parameter %s is empty", name)
		return def
	}
	return v
}

// Bool takes a parameter that is true or false (strconv.ParseBool:
// 1, t, true, 0, f, false, ...); def if it is absent.
func (p *Params) Bool(name string, def bool) bool {
	v, ok := p.Lookup(name)
	if !ok {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		p.Invalid("parameter %s=%s is not true or false", name, shown(name, v))
		return def
	}
	return b
}

// Duration takes a positive Go duration (5s, 1m30s); def if it is absent.
func (p *Params) Duration(name string, def time.Duration) time.Duration {
	v, ok := p.Lookup(name)
	if !ok {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		p.Invalid("parameter %s=%s is not a positive duration such as 5s", name, shown(name, v))
		return def
	}
	return d
}

// Int takes a decimal integer in [min, max]; def if it is absent.
func (p *Params) Int(name string, def, min, max int64) int64 {
	v, ok := p.Lookup(name)
	if !ok {
		return def
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < min || n > max {
		p.Invalid("parameter %s=%s is not a decimal integer from %d to %d", name, shown(name, v), min, max)
		return def
	}
	return n
}

// OneOf takes a parameter whose value must be one of choices; def if it
// is absent.
func (p *Params) OneOf(name, def string, choices ...string) string {
	v, ok := p.Lookup(name)
	if !ok {
		return def
	}
	if !slices.Contains(choices, v) {
		p.Invalid("parameter %s=%s: want one of %s", name, shown(name, v), strings.Join(choices, ", "))
		return def
	}
	return v
}

// Rest is the parameters not taken, for a driver that parses its own.
func (p *Params) Rest() url.Values { return p.q }

// Done returns the first error, or an error naming every parameter that
// was not taken and the parameters the store knows; nil if all were taken.
func (p *Params) Done() error {
	if p.err != nil || len(p.q) == 0 {
		return p.err
	}
	unknown := make([]string, 0, len(p.q))
	for k := range p.q {
		unknown = append(unknown, strconv.Quote(k))
	}
	slices.Sort(unknown)
	word := "parameter"
	if len(unknown) > 1 {
		word = "parameters"
	}
	known := "none"
	if len(p.known) > 0 {
		known = strings.Join(p.known, ", ")
	}
	return p.Invalid("unknown URL %s %s (known: %s)", word, strings.Join(unknown, ", "), known)
}
