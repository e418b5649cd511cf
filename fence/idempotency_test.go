package fence_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/leasehold/leasehold/fence"
)

func TestIdempotencyKeyStableAndDistinct(t *testing.T) {
	term := fence.Term{Name: "billing", Holder: "node-a-4f2c9e1b", Token: 41}
	key := func(tm fence.Term, op string) string {
		t.Helper()
		k, err := fence.IdempotencyKey(tm, op)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	k := key(term, "charge invoice 1234")
	if again := key(term, "charge invoice 1234"); again != k {
		t.Fatalf("a retry of the same operation in the same term: %q then %q", k, again)
	}
	other := map[string]string{
		"another operation": key(term, "charge invoice 1235"),
		"another token":     key(fence.Term{Name: "billing", Holder: term.Holder, Token: 42}, "charge invoice 1234"),
		"another holder":    key(fence.Term{Name: "billing", Holder: "node-b-00000000", Token: 41}, "charge invoice 1234"),
		"another lease":     key(fence.Term{Name: "billing2", Holder: term.Holder, Token: 41}, "charge invoice 1234"),
		// Length-prefixed fields: moving a byte from one field to the next changes the key.
		"shifted fields": key(fence.Term{Name: "billin", Holder: "gnode-a-4f2c9e1b", Token: 41}, "charge invoice 1234"),
	}
	for what, o := range other {
		if o == k {
			t.Errorf("%s: same key %q", what, k)
		}
	}
	if !strings.HasPrefix(k, "lh1-") || len(k) != 36 {
		t.Errorf("key %q: want lh1- and 32 hex digits", k)
	}
	for _, leak := range []string{"node-a", "4f2c9e1b", "invoice", "1234", "billing"} {
		if strings.Contains(k, leak) {
			t.Errorf("key %q shows %q", k, leak)
		}
	}
}

func TestIdempotencyKeyBadInput(t *testing.T) {
	good := fence.Term{Name: "b", Holder: "h", Token: 1}
	for what, c := range map[string]struct {
		term fence.Term
		op   string
	}{
		"empty operation": {good, ""},
		"long operation":  {good, strings.Repeat("x", fence.MaxOperationLen+1)},
		"token 0":         {fence.Term{Holder: "h"}, "op"},
		"empty holder":    {fence.Term{Token: 1}, "op"},
	} {
		if _, err := fence.IdempotencyKey(c.term, c.op); !errors.Is(err, fence.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", what, err)
		}
	}
}

// dedupAPI is an external API that cannot compare a token but honours
// Idempotency-Key: it performs each key once.
type dedupAPI struct {
	mu    sync.Mutex
	seen  map[string]bool
	done  []string
	noKey int
}

func (a *dedupAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	defer a.mu.Unlock()
	key := r.Header.Get(fence.HeaderIdempotencyKey)
	if key == "" {
		a.noKey++
	} else if a.seen[key] {
		w.WriteHeader(http.StatusOK) // the first answer again, nothing done
		return
	}
	a.seen[key] = true
	a.done = append(a.done, r.URL.Path)
}

// Transport sets the key from the request's operation: a stale holder's
// late retry of an operation is deduplicated; its different operation is not
// (weaker than a fence, as documented); a request with no operation gets no
// key; a caller's own key is kept.
func TestTransportIdempotencyKey(t *testing.T) {
	api := &dedupAPI{seen: map[string]bool{}}
	srv := httptest.NewServer(api)
	defer srv.Close()
	client := func(holder string, token int64) *http.Client {
		return &http.Client{Transport: &fence.Transport{Lease: "billing", Source: fence.StaticTerm{Holder: holder, Token: token}}}
	}
	post := func(c *http.Client, path, op string, hdr string) {
		t.Helper()
		ctx := context.Background()
		if op != "" {
			ctx = fence.WithOperation(ctx, op)
		}
		req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+path, strings.NewReader("x"))
		if hdr != "" {
			req.Header.Set(fence.HeaderIdempotencyKey, hdr)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	stale := client("node-a", 1)
	post(stale, "/charge/1", "charge-1", "")
	post(stale, "/charge/1", "charge-1", "")               // the stale holder's late retry: deduplicated
	post(stale, "/charge/2", "charge-2", "")               // its different operation: NOT stopped
	post(client("node-b", 2), "/charge/1", "charge-1", "") // the new term's own charge-1: another key
	post(stale, "/plain", "", "")                          // no operation, no key
	post(stale, "/own", "charge-1", "callers-key")
	post(stale, "/own", "charge-1", "callers-key")
	want := []string{"/charge/1", "/charge/2", "/charge/1", "/plain", "/own"}
	if fmt.Sprint(api.done) != fmt.Sprint(want) || api.noKey != 1 {
		t.Fatalf("done = %v (%d without a key), want %v (1 without)", api.done, api.noKey, want)
	}
	// Negative control: without operations the same retry is performed twice.
	api2 := &dedupAPI{seen: map[string]bool{}}
	srv2 := httptest.NewServer(api2)
	defer srv2.Close()
	for range 2 {
		resp, err := stale.Post(srv2.URL+"/charge/1", "text/plain", strings.NewReader("x"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if len(api2.done) != 2 {
		t.Fatalf("negative control: %v, want the retry performed twice without a key", api2.done)
	}
}

func TestTransportRefusesBadOperation(t *testing.T) {
	calls := 0
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { calls++ }))
	defer srv.Close()
	c := &http.Client{Transport: &fence.Transport{Source: fence.StaticTerm{Holder: "h", Token: 1}}}
	req, _ := http.NewRequestWithContext(fence.WithOperation(context.Background(), ""), "POST", srv.URL, nil)
	if _, err := c.Do(req); !errors.Is(err, fence.ErrInvalid) || calls != 0 {
		t.Fatalf("empty operation: %v, %d calls; want ErrInvalid and nothing sent", err, calls)
	}
}

// A payment API cannot compare a fencing token, but it deduplicates retries
// by Idempotency-Key: the key of an operation is fixed for a term.
func ExampleIdempotencyKey() {
	term := fence.Term{Name: "billing", Holder: "node-a-4f2c9e1b", Token: 41}
	k1, _ := fence.IdempotencyKey(term, "charge invoice 1234")
	retry, _ := fence.IdempotencyKey(term, "charge invoice 1234")
	next, _ := fence.IdempotencyKey(fence.Term{Name: "billing", Holder: "node-b-00c0ffee", Token: 42}, "charge invoice 1234")
	fmt.Println(k1 == retry, k1 == next, len(k1))
	// Output: true false 36
}
