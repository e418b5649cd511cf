package main_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/sqlite"
)

// servedPage is a `leasehold serve` process on a SQLite file, and the same
// file opened by the test to change hands.
type servedPage struct {
	proc *lineProc
	url  string // http://127.0.0.1:PORT
	st   *sqlite.Store
}

var pageURL = regexp.MustCompile(`is on (http://127\.0\.0\.1:[0-9]+)/`)

// startServe creates the lease table, starts `leasehold serve` on a free
// port and returns it once it says where the page is.
func startServe(t *testing.T, extra ...string) *servedPage {
	t.Helper()
	path := filepath.Join(t.TempDir(), "leases.db")
	ctx := context.Background()
	st, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	args := append([]string{"serve", "--http", "127.0.0.1:0", "--store", "sqlite://" + path, "--interval", "200ms"}, extra...)
	p := startProc(t, nil, args...)
	p.waitLine(t, "the status page of", 30*time.Second)
	m := pageURL.FindStringSubmatch(p.output())
	if m == nil {
		t.Fatalf("no page address in:\n%s", p.output())
	}
	return &servedPage{proc: p, url: m[1], st: st}
}

func (s *servedPage) get(t *testing.T, path string) (*http.Response, string) {
	t.Helper()
	resp, err := http.Get(s.url + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

type apiLease struct {
	Name   string  `json:"name"`
	State  string  `json:"state"`
	Holder string  `json:"holder"`
	Token  int64   `json:"token"`
	Left   float64 `json:"remaining_seconds"`
	Meta   string  `json:"metadata"`
}

type apiSnapshot struct {
	Listed bool       `json:"listed"`
	Leases []apiLease `json:"leases"`
	Error  string     `json:"error"`
}

type apiTerm struct {
	Token  int64  `json:"token"`
	Holder string `json:"holder"`
	End    string `json:"end"`
}

// handOver releases t and grants name to holder; it returns the new term.
func (s *servedPage) handOver(t *testing.T, from store.Term, holder string) store.Term {
	t.Helper()
	ctx := context.Background()
	if err := s.st.Release(ctx, from); err != nil {
		t.Fatal(err)
	}
	rec, err := s.st.Acquire(ctx, from.Name, holder, time.Minute, holder+".example:8080")
	if err != nil {
		t.Fatal(err)
	}
	return rec.Term
}

// TestServe: the page, its files and its API, as a lease changes hands.
func TestServe(t *testing.T) {
	s := startServe(t)
	ctx := context.Background()
	rec, err := s.st.Acquire(ctx, "nightly-report", "alpha", time.Minute, "alpha.example:8080")
	if err != nil {
		t.Fatal(err)
	}

	resp, body := s.get(t, "/")
	if resp.StatusCode != 200 || !strings.Contains(body, `<html lang="en">`) || !strings.Contains(body, `aria-live="polite"`) {
		t.Fatalf("GET / = %d:\n%s", resp.StatusCode, body)
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") {
		t.Errorf("GET / has Content-Security-Policy %q, want default-src 'self'", csp)
	}
	if regexp.MustCompile(`(src|href)="(https?:)?//`).MatchString(body) {
		t.Errorf("the page loads something from another origin:\n%s", body)
	}
	for _, f := range []string{"/static/app.js", "/static/app.css"} {
		if resp, body := s.get(t, f); resp.StatusCode != 200 || len(body) < 500 {
			t.Errorf("GET %s = %d, %d bytes", f, resp.StatusCode, len(body))
		}
	}

	// The event stream carries the lease, then its change of hands.
	es, err := http.Get(s.url + "/api/events")
	if err != nil {
		t.Fatal(err)
	}
	defer es.Body.Close()
	if ct := es.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("/api/events Content-Type %q", ct)
	}
	events := make(chan apiSnapshot, 100)
	go func() {
		defer close(events)
		sc := bufio.NewScanner(es.Body)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				var snap apiSnapshot
				if json.Unmarshal([]byte(data), &snap) == nil {
					events <- snap
				}
			}
		}
	}()
	waitEvent := func(holder string) apiLease {
		t.Helper()
		timeout := time.After(30 * time.Second)
		for {
			select {
			case snap, ok := <-events:
				if !ok {
					t.Fatalf("the event stream ended before %s held the lease", holder)
				}
				for _, l := range snap.Leases {
					if l.Name == "nightly-report" && l.Holder == holder && l.State == "held" {
						return l
					}
				}
			case <-timeout:
				t.Fatalf("no event with %s holding the lease within 30s", holder)
			}
		}
	}
	l := waitEvent("alpha")
	if l.Token != rec.Token || l.Meta != "alpha.example:8080" || l.Left <= 0 || l.Left > 60 {
		t.Errorf("lease on the stream: %+v", l)
	}
	beta := s.handOver(t, rec.Term, "beta")
	if l := waitEvent("beta"); l.Token != beta.Token || l.Token <= rec.Token {
		t.Errorf("after the hand-over: %+v, want token %d", l, beta.Token)
	}

	// /api/leases: the same snapshot, every lease (sqlite lists them).
	_, body = s.get(t, "/api/leases")
	var snap apiSnapshot
	if err := json.Unmarshal([]byte(body), &snap); err != nil || !snap.Listed || len(snap.Leases) != 1 {
		t.Fatalf("/api/leases: %v %s", err, body)
	}

	// The timeline: beta holding, alpha's term released.
	resp, body = s.get(t, "/api/history?lease=nightly-report")
	var hist struct {
		History bool      `json:"history"`
		Terms   []apiTerm `json:"terms"`
	}
	if err := json.Unmarshal([]byte(body), &hist); err != nil || resp.StatusCode != 200 {
		t.Fatalf("/api/history = %d %v: %s", resp.StatusCode, err, body)
	}
	want := []apiTerm{{beta.Token, "beta", "holding"}, {rec.Token, "alpha", "released"}}
	if !hist.History || len(hist.Terms) != 2 || hist.Terms[0] != want[0] || hist.Terms[1] != want[1] {
		t.Errorf("/api/history terms %+v, want %+v", hist.Terms, want)
	}

	// Bad input is named.
	if resp, body := s.get(t, "/api/history?lease=no%20spaces"); resp.StatusCode != 400 || !strings.Contains(body, "lease name") {
		t.Errorf("/api/history of a bad name = %d %s", resp.StatusCode, body)
	}
	if resp, _ := s.get(t, "/nothing-here"); resp.StatusCode != 404 {
		t.Errorf("GET /nothing-here = %d", resp.StatusCode)
	}
}

// TestServeNamedLeases: with --lease, only those leases, a never-granted one
// shown as free.
func TestServeNamedLeases(t *testing.T) {
	s := startServe(t, "--lease", "wanted,never-granted")
	ctx := context.Background()
	for _, n := range []string{"wanted", "other"} {
		if _, err := s.st.Acquire(ctx, n, "alpha", time.Minute, ""); err != nil {
			t.Fatal(err)
		}
	}
	var snap apiSnapshot
	waitUntil(t, 30*time.Second, "the named lease held", func() bool {
		_, body := s.get(t, "/api/leases")
		snap = apiSnapshot{}
		json.Unmarshal([]byte(body), &snap)
		return len(snap.Leases) == 2 && snap.Leases[1].Holder == "alpha"
	})
	if snap.Listed || snap.Leases[0].Name != "never-granted" || snap.Leases[0].Token != 0 || snap.Leases[1].Name != "wanted" {
		t.Errorf("snapshot %+v, want never-granted (free) and wanted only", snap)
	}
}

func TestServeBadFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"serve"}, "--http is required"},
		{[]string{"serve", "--http", "127.0.0.1:0", "--history", "0"}, "--history 0"},
		{[]string{"serve", "--http", "127.0.0.1:0", "--interval", "0s"}, "--interval 0s"},
		{[]string{"serve", "--http", "127.0.0.1:0", "--lease", "no spaces"}, "lease name"},
		{[]string{"serve", "--http", "127.0.0.1:0", "extra"}, `unexpected argument "extra"`},
	} {
		code, _, stderr := leasehold(t, nil, append(c.args, "--store", "sqlite://"+filepath.Join(t.TempDir(), "x.db"))...)
		if code != 2 || !strings.Contains(stderr, c.want) {
			t.Errorf("leasehold %v: exit %d, stderr %q; want exit 2 naming %q", c.args, code, stderr, c.want)
		}
	}
	// An address that cannot be listened on is named too.
	path := filepath.Join(t.TempDir(), "y.db")
	st, err := sqlite.Open(context.Background(), path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	code, _, stderr := leasehold(t, nil, "serve", "--http", "256.0.0.1:1", "--store", "sqlite://"+path)
	if code != 2 || !strings.Contains(stderr, "--http 256.0.0.1:1") {
		t.Errorf("unlistenable address: exit %d, %q", code, stderr)
	}
}
