package cli

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/storekit"
)

// Secrets in store URLs.
//
// A store URL can carry a secret in two places: the password of its user
// info (postgres://app:SECRET@db/app) and a query parameter
// (?password=SECRET, PostgreSQL's ?sslpassword=SECRET, a token). RedactURL is
// the one redaction every output of the command uses for a store URL, and
// every message leasehold itself writes (stdout, stderr, the log, HTTP bodies)
// passes through a scrubber that replaces the secrets of the URL it opened,
// in case a driver's error repeats them.
//
// RedactURL and the rule of which parameters are secret live in package
// store (store.RedactURL), so that the command, `leasehold verify` and the
// chaos harness hide the same secrets.

// RedactURL is store.RedactURL.
func RedactURL(u *url.URL) string { return store.RedactURL(u) }

// redacted replaces a secret in output.
const redacted = store.Redacted

// urlSecrets returns the secret values u carries, each in the forms it may
// appear in a message: storekit.Secrets, the stores' own rule.
func urlSecrets(u *url.URL) []string { return storekit.Secrets(u) }

// secretSet is the secrets of the store URLs a command has seen; the
// scrubbing writers and handlers read it.
type secretSet struct {
	mu   sync.Mutex
	vals []string
}

func (s *secretSet) add(vals ...string) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, v := range vals {
		if v != "" && !containsString(s.vals, v) {
			s.vals = append(s.vals, v)
		}
	}
	// Longest first, so that a secret containing another is replaced whole.
	for i := 1; i < len(s.vals); i++ {
		for j := i; j > 0 && len(s.vals[j]) > len(s.vals[j-1]); j-- {
			s.vals[j], s.vals[j-1] = s.vals[j-1], s.vals[j]
		}
	}
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// scrub replaces every known secret in text.
func (s *secretSet) scrub(text string) string {
	if s == nil {
		return text
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, v := range s.vals {
		text = strings.ReplaceAll(text, v, redacted)
	}
	return text
}

// scrubWriter scrubs what leasehold itself writes. Every message is written
// in one Write (fmt.Fprint*, one slog record), so a secret is never split.
type scrubWriter struct {
	w io.Writer
	s *secretSet
	_ [0]func() // not comparable: spares the binary an equality function
}

func (w *scrubWriter) Write(p []byte) (int, error) {
	if _, err := io.WriteString(w.w, w.s.scrub(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}

// scrubHandler scrubs HTTP response bodies.
func scrubHandler(s *secretSet, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(&scrubResponse{ResponseWriter: w, s: s}, r)
	})
}

type scrubResponse struct {
	http.ResponseWriter
	s *secretSet
	_ [0]func() // not comparable: spares the binary an equality function
}

// Flush sends what was written so far (the status page's event stream
// needs it).
func (w *scrubResponse) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *scrubResponse) Write(p []byte) (int, error) {
	if _, err := io.WriteString(w.ResponseWriter, w.s.scrub(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}

// childStoreEnv is the LEASEHOLD_STORE a supervised command gets: the
// redacted form of the value run was given, so that the command can tell
// which store its lease lives in but never learns a secret from run. A value
// that does not parse as a URL is dropped.
func childStoreEnv(v string) (string, bool) {
	u, err := url.Parse(v)
	if err != nil {
		return "", false
	}
	return RedactURL(u), true
}
