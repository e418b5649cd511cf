package fence

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// The HTTP headers of a fenced request.
//
//	Leasehold-Fencing-Token: 42
//	Leasehold-Holder: node-a-4f2c9e1b
//	Leasehold-Lease: billing-sweeper
//
// HeaderToken carries the fencing token in decimal (1 to 2^63-1, no sign, no
// spaces, one value). HeaderHolder carries the holder identity of the term
// (one value, printable ASCII without spaces): with the token it identifies
// the term, so that a token value granted to two terms (after a lease store
// lost data) is not admitted for both. HeaderLease names the lease the token
// belongs to; the Middleware uses it as the resource name unless its config
// maps the request to a resource itself.
const (
	HeaderToken  = "Leasehold-Fencing-Token"
	HeaderHolder = "Leasehold-Holder"
	HeaderLease  = "Leasehold-Lease"
)

// MiddlewareConfig configures Middleware.
type MiddlewareConfig struct {
	// Resource maps a request to the resource it writes. Nil means the value
	// of the Leasehold-Lease header (then required). Mapping on the server
	// (one fixed name, or a path prefix) is the stronger choice: a client
	// cannot then pick a resource whose fence it has not met.
	Resource func(r *http.Request) (string, error)
	// Skip, if set, lets requests for which it returns true pass unfenced,
	// such as reads (GET, HEAD). By default every request is fenced.
	Skip func(r *http.Request) bool
}

// Middleware returns HTTP middleware that fences next with g. For each
// request that is not skipped it reads the Leasehold-Fencing-Token and
// Leasehold-Holder headers and the resource, and calls next inside g.Do, so
// requests of one resource are served one at a time and a request of a stale
// term never reaches next. Its answers, each with a JSON body {"error",
// "resource", "token", "highest"} (fields as known):
//
//	409 Conflict              the token is lower than the highest admitted,
//	                          or equal to it but admitted for another holder
//	                          (then "token" equals "highest")
//	428 Precondition Required the token or holder header is missing
//	400 Bad Request           the token header is malformed (not one decimal
//	                          integer >= 1), the holder header is malformed
//	                          (not one holder identity), or the resource is
//	                          missing or bad
//	503 Service Unavailable   the Guard could not record the token (retry)
//
// A handler holds its resource for as long as it runs: keep fenced handlers
// short, and do not stream long responses from them.
func Middleware(g *Guard, cfg MiddlewareConfig) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if cfg.Skip != nil && cfg.Skip(r) {
				next.ServeHTTP(w, r)
				return
			}
			resource, err := requestResource(r, cfg)
			if err != nil {
				writeProblem(w, http.StatusBadRequest, problem{Error: err.Error()})
				return
			}
			vals := r.Header.Values(HeaderToken)
			if len(vals) == 0 {
				writeProblem(w, http.StatusPreconditionRequired, problem{
					Error: "missing " + HeaderToken + " header: this resource accepts only fenced writes", Resource: resource})
				return
			}
			token, err := ParseToken(vals)
			if err != nil {
				writeProblem(w, http.StatusBadRequest, problem{Error: err.Error(), Resource: resource})
				return
			}
			hvals := r.Header.Values(HeaderHolder)
			if len(hvals) == 0 {
				writeProblem(w, http.StatusPreconditionRequired, problem{
					Error: "missing " + HeaderHolder + " header: the fence tells terms apart by token and holder", Resource: resource, Token: token})
				return
			}
			holder, err := ParseHolder(hvals)
			if err != nil {
				writeProblem(w, http.StatusBadRequest, problem{Error: err.Error(), Resource: resource, Token: token})
				return
			}
			served := false
			err = g.Do(r.Context(), resource, holder, token, func(context.Context) error {
				served = true
				next.ServeHTTP(w, r)
				return nil
			})
			if served || err == nil {
				return
			}
			var se *StaleError
			switch {
			case errors.As(err, &se):
				writeProblem(w, http.StatusConflict, problem{Error: "stale fencing token", Resource: resource, Token: token, Highest: se.Highest})
			case errors.Is(err, ErrInvalid):
				writeProblem(w, http.StatusBadRequest, problem{Error: err.Error(), Resource: resource, Token: token})
			default:
				writeProblem(w, http.StatusServiceUnavailable, problem{Error: "fence unavailable: " + err.Error(), Resource: resource, Token: token})
			}
		})
	}
}

func requestResource(r *http.Request, cfg MiddlewareConfig) (string, error) {
	if cfg.Resource != nil {
		res, err := cfg.Resource(r)
		if err != nil {
			return "", fmt.Errorf("%w: resource of request: %v", ErrInvalid, err)
		}
		return res, ValidateResource(res)
	}
	vals := r.Header.Values(HeaderLease)
	if len(vals) != 1 {
		return "", fmt.Errorf("%w: want exactly one %s header, got %d", ErrInvalid, HeaderLease, len(vals))
	}
	return vals[0], ValidateResource(vals[0])
}

// ParseToken parses the values of a Leasehold-Fencing-Token header: exactly
// one decimal integer from 1 to 2^63-1, without sign or spaces.
func ParseToken(values []string) (int64, error) {
	if len(values) != 1 {
		return 0, fmt.Errorf("%w: want exactly one %s header, got %d", ErrInvalid, HeaderToken, len(values))
	}
	v := values[0]
	if v == "" || strings.TrimLeft(v, "0123456789") != "" {
		return 0, fmt.Errorf("%w: malformed %s header %q: want a decimal integer >= 1", ErrInvalid, HeaderToken, v)
	}
	t, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: malformed %s header %q: %v", ErrInvalid, HeaderToken, v, err)
	}
	if err := ValidateToken(t); err != nil {
		return 0, err
	}
	return t, nil
}

// ParseHolder parses the values of a Leasehold-Holder header: exactly one
// holder identity (1 to MaxHolderLen bytes of printable ASCII without spaces).
func ParseHolder(values []string) (string, error) {
	if len(values) != 1 {
		return "", fmt.Errorf("%w: want exactly one %s header, got %d", ErrInvalid, HeaderHolder, len(values))
	}
	if err := ValidateHolder(values[0]); err != nil {
		return "", fmt.Errorf("malformed %s header: %w", HeaderHolder, err)
	}
	return values[0], nil
}

// problem is the JSON body of a refusal.
type problem struct {
	Error    string `json:"error"`
	Resource string `json:"resource,omitempty"`
	Token    int64  `json:"token,omitempty"`
	Highest  int64  `json:"highest,omitempty"`
}

func writeProblem(w http.ResponseWriter, code int, p problem) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(p)
}

// CheckResponse returns a *StaleError (matching ErrStale, and ErrTokenReused
// if the token equals the highest) if resp is the Middleware's 409 answer to a
// stale term, and nil otherwise. It consumes and closes the body only in the
// first case; otherwise the body reads as before. The error's Holder is the
// Leasehold-Holder of resp.Request, if set; HighestHolder is never sent.
func CheckResponse(resp *http.Response) error {
	if resp.StatusCode != http.StatusConflict || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		return nil
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var p problem
	if json.Unmarshal(b, &p) == nil && p.Error == "stale fencing token" {
		resp.Body.Close()
		se := &StaleError{Resource: p.Resource, Token: p.Token, Highest: p.Highest}
		if resp.Request != nil {
			se.Holder = resp.Request.Header.Get(HeaderHolder)
		}
		return se
	}
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(b), resp.Body), resp.Body}
	return nil
}

// Transport is an http.RoundTripper that stamps every request with the
// fencing headers: Leasehold-Fencing-Token and Leasehold-Holder from the term
// of Source and, if Lease is set, Leasehold-Lease. A request whose token is
// below 1 (no term yet) or whose holder is empty or malformed is not sent.
//
// A request whose context names an operation (WithOperation) also gets an
// Idempotency-Key header, IdempotencyKey(term, operation), unless it already
// has one: for APIs that cannot compare a token but deduplicate retries
// (weaker than a fence: see IdempotencyKey).
//
//	client := &http.Client{Transport: &fence.Transport{Lease: "sweeper", Source: leader}}
type Transport struct {
	// Base sends the request; nil means http.DefaultTransport.
	Base http.RoundTripper
	// Lease is the lease name sent in Leasehold-Lease; empty sends none.
	Lease string
	// Source gives the term (holder and token) of each request. Required.
	Source TermSource
}

// RoundTrip stamps a clone of req and sends it with Base.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if t.Source == nil {
		closeBody(req)
		return nil, fmt.Errorf("%w: fence.Transport has no term Source", ErrInvalid)
	}
	term := t.Source.Term()
	err := ValidateToken(term.Token)
	if err == nil {
		err = ValidateHolder(term.Holder)
	}
	if err != nil {
		closeBody(req)
		return nil, fmt.Errorf("leasehold/fence: not sending %s %s: %w", req.Method, req.URL.Redacted(), err)
	}
	var idemKey string
	if op, ok := operation(req.Context()); ok && req.Header.Get(HeaderIdempotencyKey) == "" {
		if t.Lease != "" && term.Name == "" {
			term.Name = t.Lease
		}
		if idemKey, err = IdempotencyKey(term, op); err != nil {
			closeBody(req)
			return nil, fmt.Errorf("leasehold/fence: not sending %s %s: %w", req.Method, req.URL.Redacted(), err)
		}
	}
	r := req.Clone(req.Context())
	if idemKey != "" {
		r.Header.Set(HeaderIdempotencyKey, idemKey)
	}
	r.Header.Set(HeaderToken, strconv.FormatInt(term.Token, 10))
	r.Header.Set(HeaderHolder, term.Holder)
	if t.Lease != "" {
		r.Header.Set(HeaderLease, t.Lease)
	}
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	return base.RoundTrip(r)
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}
