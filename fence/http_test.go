package fence

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/leasehold/leasehold/store"
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
	resp, _ := do(t, c, s.URL, map[string][]string{HeaderLease: {"sweeper"}, HeaderToken: {"2"}, HeaderHolder: {"node-b"}})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("token 2: status %d", resp.StatusCode)
	}
	resp, p := do(t, c, s.URL, map[string][]string{HeaderLease: {"sweeper"}, HeaderToken: {"1"}, HeaderHolder: {"node-a"}})
	if resp.StatusCode != http.StatusConflict {
		t.Fatalf("token 1 after 2: status %d, want 409", resp.StatusCode)
	}
	if p != (problem{Error: "stale fencing token", Resource: "sweeper", Token: 1, Highest: 2}) {
		t.Fatalf("409 body = %+v", p)
	}
	if n := s.calls.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1: the stale request reached it", n)
	}
	resp, _ = do(t, c, s.URL, map[string][]string{HeaderLease: {"sweeper"}, HeaderToken: {"2"}, HeaderHolder: {"node-b"}})
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
		{"no token", map[string][]string{HeaderLease: {"r"}, HeaderHolder: {"h"}}, http.StatusPreconditionRequired},
		{"no lease", map[string][]string{HeaderToken: {"1"}, HeaderHolder: {"h"}}, http.StatusBadRequest},
		{"two leases", map[string][]string{HeaderLease: {"r", "s"}, HeaderToken: {"1"}, HeaderHolder: {"h"}}, http.StatusBadRequest},
		{"word", map[string][]string{HeaderLease: {"r"}, HeaderToken: {"abc"}, HeaderHolder: {"h"}}, http.StatusBadRequest},
		{"zero", map[string][]string{HeaderLease: {"r"}, HeaderToken: {"0"}, HeaderHolder: {"h"}}, http.StatusBadRequest},
		{"negative", map[string][]string{HeaderLease: {"r"}, HeaderToken: {"-1"}, HeaderHolder: {"h"}}, http.StatusBadRequest},
		{"plus", map[string][]string{HeaderLease: {"r"}, HeaderToken: {"+3"}, HeaderHolder: {"h"}}, http.StatusBadRequest},
		{"list", map[string][]string{HeaderLease: {"r"}, HeaderToken: {"1,2"}, HeaderHolder: {"h"}}, http.StatusBadRequest},
		{"two values", map[string][]string{HeaderLease: {"r"}, HeaderToken: {"1", "2"}, HeaderHolder: {"h"}}, http.StatusBadRequest},
		{"overflow", map[string][]string{HeaderLease: {"r"}, HeaderToken: {"9223372036854775808"}, HeaderHolder: {"h"}}, http.StatusBadRequest},
		{"empty", map[string][]string{HeaderLease: {"r"}, HeaderToken: {""}, HeaderHolder: {"h"}}, http.StatusBadRequest},
		{"no holder", map[string][]string{HeaderLease: {"r"}, HeaderToken: {"1"}}, http.StatusPreconditionRequired},
		{"empty holder", map[string][]string{HeaderLease: {"r"}, HeaderToken: {"1"}, HeaderHolder: {""}}, http.StatusBadRequest},
		{"two holders", map[string][]string{HeaderLease: {"r"}, HeaderToken: {"1"}, HeaderHolder: {"a", "b"}}, http.StatusBadRequest},
		{"holder with space", map[string][]string{HeaderLease: {"r"}, HeaderToken: {"1"}, HeaderHolder: {"a b"}}, http.StatusBadRequest},
		{"holder too long", map[string][]string{HeaderLease: {"r"}, HeaderToken: {"1"}, HeaderHolder: {strings.Repeat("h", MaxHolderLen+1)}}, http.StatusBadRequest},
	} {
		resp, p := do(t, c, s.URL, tc.hdr)
		if resp.StatusCode != tc.want || p.Error == "" || strings.Contains(tc.name, "holder") && !strings.Contains(p.Error, HeaderHolder) {
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
	do(t, c, s.URL, map[string][]string{HeaderLease: {"a"}, HeaderToken: {"5"}, HeaderHolder: {"h"}})
	resp, p := do(t, c, s.URL, map[string][]string{HeaderLease: {"b"}, HeaderToken: {"4"}, HeaderHolder: {"h"}})
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
	nodeB := &http.Client{Transport: &Transport{Base: s.Client().Transport, Lease: "sweeper", Source: StaticTerm{Holder: "node-b", Token: 2}}}
	var tokA atomic.Int64
	tokA.Store(1)
	holderA := "node-a"
	nodeA := &http.Client{Transport: &Transport{Base: s.Client().Transport, Lease: "sweeper", Source: TermFunc(func() store.Term {
		return store.Term{Name: "sweeper", Holder: holderA, Token: tokA.Load()}
	})}}

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
	if !errors.As(err, &se) || !errors.Is(err, ErrStale) || se.Highest != 2 || se.Token != 1 || se.Resource != "sweeper" || se.Holder != "node-a" {
		t.Fatalf("node-a: status %d, CheckResponse %v; want StaleError{sweeper 1 2 node-a}", resp.StatusCode, err)
	}
	// A token below 1, or an empty holder, is never sent.
	tokA.Store(0)
	if _, err := nodeA.Post(s.URL, "text/plain", strings.NewReader("a")); !errors.Is(err, ErrInvalid) {
		t.Fatalf("token 0: err = %v, want ErrInvalid", err)
	}
	tokA.Store(3)
	holderA = ""
	if _, err := nodeA.Post(s.URL, "text/plain", strings.NewReader("a")); !errors.Is(err, ErrInvalid) {
		t.Fatalf("empty holder: err = %v, want ErrInvalid", err)
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
	if err != nil || term != (Term{Name: "sweeper", Holder: "node-a-x1", Token: 17}) {
		t.Fatalf("FromEnv = %+v, %v", term, err)
	}
	tr, err := EnvTransport(nil)
	if err != nil || tr.Lease != "sweeper" || tr.Source.Term() != (store.Term{Name: "sweeper", Holder: "node-a-x1", Token: 17}) {
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

// After a lease store loses data, node-a and node-b can both be granted
// token 3. The middleware admits node-a's term, refuses node-b's with 409
// (matching ErrTokenReused on the client), still admits node-a writing
// again, and admits token 4 from either.
func TestMiddlewareRefusesEqualTokenOtherHolder(t *testing.T) {
	s := newFencedServer(t, MiddlewareConfig{})
	client := func(holder string, token int64) *http.Client {
		return &http.Client{Transport: &Transport{Base: s.Client().Transport, Lease: "sweeper", Source: StaticTerm{Holder: holder, Token: token}}}
	}
	post := func(c *http.Client) (int, error) {
		t.Helper()
		resp, err := c.Post(s.URL, "text/plain", strings.NewReader("x"))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		return resp.StatusCode, CheckResponse(resp)
	}
	if code, err := post(client("node-a", 3)); code != http.StatusOK || err != nil {
		t.Fatalf("node-a token 3: %d %v", code, err)
	}
	code, err := post(client("node-b", 3))
	var se *StaleError
	if code != http.StatusConflict || !errors.Is(err, ErrTokenReused) || !errors.As(err, &se) || se.Token != 3 || se.Highest != 3 || se.Holder != "node-b" {
		t.Fatalf("node-b token 3 after node-a token 3: %d %v; want 409 matching ErrTokenReused", code, err)
	}
	if n := s.calls.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1: node-b's request reached it", n)
	}
	if code, err := post(client("node-a", 3)); code != http.StatusOK || err != nil {
		t.Fatalf("node-a token 3 again: %d %v", code, err)
	}
	if code, err := post(client("node-b", 4)); code != http.StatusOK || err != nil {
		t.Fatalf("node-b token 4: %d %v", code, err)
	}
	if code, err := post(client("node-a", 4)); code != http.StatusConflict || !errors.Is(err, ErrTokenReused) {
		t.Fatalf("node-a token 4 after node-b token 4: %d %v; want 409", code, err)
	}
}

// Two children of `leasehold run`, granted the same token after a store lost
// data, read different holders from their environment: the fence admits
// only the first. Without LEASEHOLD_HOLDER the term cannot be told apart, so
// FromEnv refuses to start.
func TestFromEnvRefusesEqualTokenOtherHolder(t *testing.T) {
	s := newFencedServer(t, MiddlewareConfig{})
	child := func(holder string) *http.Client {
		t.Helper()
		t.Setenv(EnvLease, "sweeper")
		t.Setenv(EnvToken, "7")
		t.Setenv(EnvHolder, holder)
		tr, err := EnvTransport(s.Client().Transport)
		if err != nil {
			t.Fatal(err)
		}
		return &http.Client{Transport: tr}
	}
	a, b := child("node-a-x1"), child("node-b-y2")
	for _, step := range []struct {
		name string
		c    *http.Client
		want int
	}{{"node-a", a, http.StatusOK}, {"node-b", b, http.StatusConflict}, {"node-a again", a, http.StatusOK}} {
		resp, err := step.c.Post(s.URL, "text/plain", strings.NewReader("x"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != step.want {
			t.Fatalf("%s with token 7: status %d, want %d", step.name, resp.StatusCode, step.want)
		}
	}
	for _, bad := range []string{"", "a b", "n\u00e9"} {
		t.Setenv(EnvHolder, bad)
		if _, err := FromEnv(); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), EnvHolder) {
			t.Errorf("%s=%q: err = %v, want ErrInvalid naming the variable", EnvHolder, bad, err)
		}
	}
	os.Unsetenv(EnvHolder)
	if _, err := FromEnv(); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), EnvHolder) {
		t.Errorf("%s unset: err = %v, want ErrInvalid naming the variable", EnvHolder, err)
	}
}
