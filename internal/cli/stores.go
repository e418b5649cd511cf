package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode"

	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/registry"
	"github.com/leasehold/leasehold/store/sqlite"
)

// The stores, their schemes and examples come from store/registry: a store
// registers there, once, and every command (and verify) knows it.

func schemeNames() []string { return registry.Schemes() }

// StoreEnv is the environment variable that names the store when --store is
// not given.
const StoreEnv = "LEASEHOLD_STORE"

// DefaultStorePath is the SQLite file used when no store is named:
// $XDG_STATE_HOME/leasehold/leases.db, or ~/.local/state/leasehold/leases.db.
func DefaultStorePath(getenv func(string) string) (string, error) {
	dir := getenv("XDG_STATE_HOME")
	if dir == "" || !filepath.IsAbs(dir) { // the XDG spec says to ignore a relative path
		home := getenv("HOME")
		if home == "" {
			h, err := os.UserHomeDir()
			if err != nil {
				return "", fmt.Errorf("no XDG_STATE_HOME and no home directory for the default store: %w", err)
			}
			home = h
		}
		dir = filepath.Join(home, ".local", "state")
	}
	return filepath.Join(dir, "leasehold", "leases.db"), nil
}

// storeFlag is the --store flag every store-using command shares.
type storeFlag struct {
	_ [0]func() // not comparable: spares the binary an equality function

	raw     string
	timeout time.Duration
	fs      *flag.FlagSet
	// readOnly: the command does not set a store up (status, history,
	// doctor, release): it must create nothing, neither a SQLite file nor a
	// table, so that a mistyped path is reported, not silently made.
	readOnly bool
}

func (s *storeFlag) register(fs *flag.FlagSet) {
	s.fs = fs
	fs.StringVar(&s.raw, "store", "", "the lease store `URL`: "+strings.Join(schemeExamples(), ", ")+"\n(default: $"+StoreEnv+", else a SQLite file in your state directory)")
	fs.DurationVar(&s.timeout, "connect-timeout", 10*time.Second, "how long to wait for the store to answer at start")
}

func schemeExamples() []string { return registry.Examples() }

// openedStore is a store and how to name it in messages.
//
// The store is a named field, not an embedded one, on purpose: a struct that
// embeds store.Store is itself a store.Store but none of the optional
// capabilities (store.Watcher, store.BatchRenewer, store.Limiter, ...) of the
// store inside it, so an elector given such a wrapper silently polls. Every
// caller hands the elector and the type assertions o.Store itself.
// TestNoStoreWrapperEmbedsStore guards the whole module against that shape.
type openedStore struct {
	_ [0]func() // not comparable: spares the binary an equality function

	Store store.Store
	// Name is the URL with its secrets redacted (see RedactURL).
	Name string
}

// Close closes the store.
func (o *openedStore) Close() error { return o.Store.Close() }

// open opens the store named by --store, $LEASEHOLD_STORE or the default,
// and tells stderr which one when it is the default. A URL that cannot be
// parsed or has an unknown scheme is a UsageError; a store that cannot be
// opened is a StoreError (exit 69).
func (s *storeFlag) open(ctx context.Context, env *Env) (*openedStore, error) {
	if s.timeout == 0 && s.fs == nil {
		s.timeout = 10 * time.Second // a storeFlag built without flags
	}
	if s.timeout <= 0 {
		return nil, usagef("--connect-timeout %v must be positive", s.timeout)
	}
	if s.timeout > maxFlagDuration {
		return nil, usagef("--connect-timeout %v is longer than %v", s.timeout, maxFlagDuration)
	}
	raw, from := s.raw, "--store"
	if raw == "" && s.fs != nil && flagSet(s.fs, "store") {
		return nil, usagef("--store is empty: give a store URL (%s), or leave --store out to use $%s or the default store", strings.Join(schemeExamples(), ", "), StoreEnv)
	}
	if raw == "" {
		raw, from = env.Getenv(StoreEnv), "$"+StoreEnv
	}
	if raw == "" {
		path, err := DefaultStorePath(env.Getenv)
		if err != nil {
			return nil, err
		}
		if s.readOnly {
			if _, err := os.Stat(path); err != nil {
				return nil, &StoreError{URL: "sqlite://" + path, Err: fmt.Errorf("no default store yet (%v); this command creates no store: name one with --store or $%s", err, StoreEnv)}
			}
		} else if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return nil, &StoreError{URL: "sqlite://" + path, Err: err}
		}
		raw = (&url.URL{Scheme: "sqlite", Path: path}).String()
		fmt.Fprintf(env.Stderr, "leasehold: using the default store %s (set --store or $%s to choose another)\n", raw, StoreEnv)
		from = "default"
	}
	u, err := url.Parse(raw)
	if err != nil {
		// url.Parse's error repeats the input, password included: keep only its reason.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, usagef("%s: not a valid URL: %v", from, err)
	}
	name := RedactURL(u)
	env.secrets.add(urlSecrets(u)...)
	if strings.Contains(u.RawQuery, ";") {
		// Go's URL parser drops a parameter that holds a ';' without a word
		// (sslmode=verify-full;x would connect without checking the
		// certificate): refuse the URL instead.
		return nil, usagef("%s %s: the query holds a ';', which would silently drop a parameter; separate parameters with '&' and escape a literal ';' as %%3B", from, name)
	}
	desc, ok := registry.Lookup(u.Scheme)
	if !ok {
		return nil, usagef("%s: unknown store scheme %q in %s; known: %s", from, u.Scheme, name, strings.Join(schemeNames(), ", "))
	}
	if s.readOnly && desc.ReadOnly != nil {
		// Opening must create nothing: no SQLite file, no table.
		if err := desc.ReadOnly(u); err != nil {
			if errors.Is(err, store.ErrInvalid) {
				return nil, usagef("%s %s: %v", from, name, scrub(env.secrets, err))
			}
			return nil, &StoreError{URL: name, Err: scrub(env.secrets, err)}
		}
	}
	octx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	st, err := desc.Open(octx, u)
	if err != nil {
		err = scrub(env.secrets, err)
		if errors.Is(err, store.ErrInvalid) {
			return nil, usagef("%s %s: %v", from, name, err)
		}
		return nil, &StoreError{URL: name, Err: err}
	}
	if sq, ok := st.(*sqlite.Store); ok && sq.Created() {
		fmt.Fprintf(env.Stderr, "leasehold: created a new lease store at %s\n", sq.Path())
	}
	return &openedStore{Store: st, Name: name}, nil
}

// flagSet reports whether the flag name was given on the command line.
func flagSet(fs *flag.FlagSet, name string) bool {
	found := false
	fs.Visit(func(f *flag.Flag) {
		if f.Name == name {
			found = true
		}
	})
	return found
}

// probe checks that the store answers a read: a definite answer (found or
// not found) is fine, anything else is a StoreError.
func (o *openedStore) probe(ctx context.Context, name string, timeout time.Duration) error {
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	_, err := o.Store.Get(pctx, name)
	if err == nil || errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if errors.Is(err, store.ErrInvalid) {
		return usagef("%v", err)
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return &StoreError{URL: o.Name, Err: err}
}

// scrub removes the secrets of the store URL from an error message, in case
// a driver put them there. (The writers scrub again, as a second line.)
func scrub(s *secretSet, err error) error {
	msg := s.scrub(err.Error())
	if msg == err.Error() {
		return err
	}
	return &scrubbedError{msg: msg, err: err}
}

type scrubbedError struct {
	_ [0]func() // not comparable: spares the binary an equality function

	msg string
	err error
}

func (e *scrubbedError) Error() string { return e.msg }
func (e *scrubbedError) Unwrap() error { return e.err }

// closeStore closes a store, ignoring the error (nothing is lost by it).
func closeStore(c io.Closer) { c.Close() }

// validateLeaseName is store.ValidateName, with a message that shows a
// non-ASCII character whole (store.ValidateName names the offending byte,
// which prints half a UTF-8 character as a garbled escape).
func validateLeaseName(name string) error {
	for i, r := range name {
		if r > unicode.MaxASCII {
			return fmt.Errorf("%w: lease name %q has %q (U+%04X) at byte %d; allowed are ASCII letters, digits, '-', '_', '.', '/'", store.ErrInvalid, name, string(r), r, i)
		}
	}
	return store.ValidateName(name)
}
