package fence

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

type fencedServer struct {
	*httptest.Server
	calls atomic.Int64
	last  atomic.Int64 // token of the last request the handler saw
}

func newFencedServer(t *testing.T, cfg MiddlewareConfig) *fencedServer {
	t.Helper()
	s := &fencedServer{}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.calls.Add(1)
		tok, _ := ParseToken(r.Header.Values(HeaderToken))
		s.last.Store(tok)
		io.WriteString(w, "ok")
	})
	s.Server = httptest.NewServer(Middleware(NewGuard(nil), cfg)(h))
	t.Cleanup(s.Close)
	return s
}

func do(t *testing.T, c *http.Client, url string, hdr map[string][]string) (*http.Response, problem) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader("x"))
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("request: %v", err)
	}
	defer resp.Body.Close()
	var p problem
	if resp.StatusCode != http.StatusOK {
		if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("status %d: Content-Type %q, want application/json", resp.StatusCode, ct)
		}
		if err := json.NewDecoder(resp.Body).Decode(&p); err != nil {
			t.Errorf("status %d: body is not JSON: %v", resp.StatusCode, err)
		}
	}
	return resp, p
}

func TestMiddlewareRefusesStaleToken_FailsWithoutCheck(t *testing.T) {
	s := newFencedServer(t, MiddlewareConfig{})
	c := s.Client()
	resp, _ := do(t, c, s.URL, map[string][]string{HeaderLease: {"sweeper"}, HeaderToken: {"2"}})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("token 2: status %d", resp.StatusCode)
	}
	resp, p := do(t, c, s.URL, map[string][]string{HeaderLease: {"sweeper"}, HeaderToken: {"1"}})
	if resp.StatusCode != http.StatusConflict {
		t.Fatalf("token 1 after 2: status %d, want 409", resp.StatusCode)
	}
	if p != (problem{Error: "stale fencing token", Resource: "sweeper", Token: 1, Highest: 2}) {
		t.Fatalf("409 body = %+v", p)
	}
	if n := s.calls.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1: the stale request reached it", n)
	}
	resp, _ = do(t, c, s.URL, map[string][]string{HeaderLease: {"sweeper"}, HeaderToken: {"2"}})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("token 2 again: status %d", resp.StatusCode)
	}
}

func TestMiddlewareBadRequests(t *testing.T) {
	s := newFencedServer(t, MiddlewareConfig{})
	c := s.Client()
	for _, tc := range []struct {
		name string
		hdr  map[string][]string
		want int
	}{
		{"no token", map[string][]string{HeaderLease: {"r"}}, http.StatusPreconditionRequired},
		{"no lease", map[string][]string{HeaderToken: {"1"}}, http.StatusBadRequest},
		{"two leases", map[string][]string{HeaderLease: {"r", "s"}, HeaderToken: {"1"}}, http.StatusBadRequest},
		{"word", map[string][]string{HeaderLease: {"r"}, HeaderToken: {"abc"}}, http.StatusBadRequest},
		{"zero", map[string][]string{HeaderLease: {"r"}, HeaderToken: {"0"}}, http.StatusBadRequest},
		{"negative", map[string][]string{HeaderLease: {"r"}, HeaderToken: {"-1"}}, http.StatusBadRequest},
		{"plus", map[string][]string{HeaderLease: {"r"}, HeaderToken: {"+3"}}, http.StatusBadRequest},
		{"list", map[string][]string{HeaderLease: {"r"}, HeaderToken: {"1,2"}}, http.StatusBadRequest},
		{"two values", map[string][]string{HeaderLease: {"r"}, HeaderToken: {"1", "2"}}, http.StatusBadRequest},
		{"overflow", map[string][]string{HeaderLease: {"r"}, HeaderToken: {"9223372036854775808"}}, http.StatusBadRequest},
		{"empty", map[string][]string{HeaderLease: {"r"}, HeaderToken: {""}}, http.StatusBadRequest},
	} {
		resp, p := do(t, c, s.URL, tc.hdr)
		if resp.StatusCode != tc.want || p.Error == "" {
			t.Errorf("%s: status %d, body %+v; want %d with an error", tc.name, resp.StatusCode, p, tc.want)
		}
	}
	if n := s.calls.Load(); n != 0 {
		t.Fatalf("handler ran %d times for bad requests", n)
	}
}

// The server maps requests to a resource itself; Skip lets reads through.
func TestMiddlewareServerSideResourceAndSkip(t *testing.T) {
	s := newFencedServer(t, MiddlewareConfig{
		Resource: func(r *http.Request) (string, error) { return "invoices", nil },
		Skip:     func(r *http.Request) bool { return r.Method == http.MethodGet },
	})
	c := s.Client()
	// The client names another lease: the server's mapping wins.
	do(t, c, s.URL, map[string][]string{HeaderLease: {"a"}, HeaderToken: {"5"}})
	resp, p := do(t, c, s.URL, map[string][]string{HeaderLease: {"b"}, HeaderToken: {"4"}})
	if resp.StatusCode != http.StatusConflict || p.Resource != "invoices" || p.Highest != 5 {
		t.Fatalf("token 4 after 5 on another lease name: status %d, body %+v", resp.StatusCode, p)
	}
	r, err := c.Get(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if r.StatusCode != http.StatusOK {
		t.Fatalf("skipped GET: status %d", r.StatusCode)
	}
}

func TestTransportStampsHeadersAndClientSeesStale(t *testing.T) {
	s := newFencedServer(t, MiddlewareConfig{})
	nodeB := &http.Client{Transport: &Transport{Base: s.Client().Transport, Lease: "sweeper", Source: StaticToken(2)}}
	var tokA atomic.Int64
	tokA.Store(1)
	nodeA := &http.Client{Transport: &Transport{Base: s.Client().Transport, Lease: "sweeper", Source: TokenFunc(tokA.Load)}}

	resp, err := nodeB.Post(s.URL, "text/plain", strings.NewReader("b"))
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckResponse(resp); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("node-b: status %d, CheckResponse %v", resp.StatusCode, err)
	}
	if body, _ := io.ReadAll(resp.Body); string(body) != "ok" {
		t.Fatalf("node-b body %q: CheckResponse must leave a good body alone", body)
	}
	resp.Body.Close()
	if s.last.Load() != 2 {
		t.Fatalf("handler saw token %d, want 2", s.last.Load())
	}
	resp, err = nodeA.Post(s.URL, "text/plain", strings.NewReader("a"))
	if err != nil {
		t.Fatal(err)
	}
	err = CheckResponse(resp)
	var se *StaleError
	if !errors.As(err, &se) || !errors.Is(err, ErrStale) || se.Highest != 2 || se.Token != 1 || se.Resource != "sweeper" {
		t.Fatalf("node-a: status %d, CheckResponse %v; want StaleError{sweeper 1 2}", resp.StatusCode, err)
	}
	// A token below 1 is never sent.
	tokA.Store(0)
	if _, err := nodeA.Post(s.URL, "text/plain", strings.NewReader("a")); !errors.Is(err, ErrInvalid) {
		t.Fatalf("token 0: err = %v, want ErrInvalid", err)
	}
	if n := s.calls.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
}

func TestCheckResponseLeavesOther409Alone(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusConflict)
		io.WriteString(w, `{"error":"version mismatch"}`)
	}))
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := CheckResponse(resp); err != nil {
		t.Fatalf("CheckResponse of an unrelated 409: %v", err)
	}
	if b, _ := io.ReadAll(resp.Body); string(b) != `{"error":"version mismatch"}` {
		t.Fatalf("body after CheckResponse: %q", b)
	}
}

func TestFromEnv(t *testing.T) {
	t.Setenv(EnvLease, "sweeper")
	t.Setenv(EnvToken, "17")
	t.Setenv(EnvHolder, "node-a-x1")
	term, err := FromEnv()
	if err != nil || term != (Term{Lease: "sweeper", Holder: "node-a-x1", Token: 17}) {
		t.Fatalf("FromEnv = %+v, %v", term, err)
	}
	tr, err := EnvTransport(nil)
	if err != nil || tr.Lease != "sweeper" || tr.Source.Token() != 17 {
		t.Fatalf("EnvTransport = %+v, %v", tr, err)
	}
	for _, bad := range []string{"", "0", "x", "-3"} {
		t.Setenv(EnvToken, bad)
		if _, err := FromEnv(); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), EnvToken) {
			t.Errorf("%s=%q: err = %v, want ErrInvalid naming the variable", EnvToken, bad, err)
		}
	}
	t.Setenv(EnvToken, "3")
	t.Setenv(EnvLease, "")
	if _, err := FromEnv(); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), EnvLease) {
		t.Errorf("no lease: err = %v", err)
	}
}
