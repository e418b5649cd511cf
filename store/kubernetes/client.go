package kubernetes

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"golang.org/x/time/rate"
)

// The store speaks to the API server in JSON over HTTP, about one resource:
// coordination.k8s.io/v1 leases in one namespace (get, create, update, list,
// watch, and delete for an emptied queue). client-go's typed clientset would link every API group Kubernetes
// has into every program that links this store.

// maxBody bounds the answer to one request (a Lease is a few kilobytes; a
// list of a namespace's Leases is larger).
const maxBody = 64 << 20

// APIError is an error answer of the API server: the HTTP status code and
// the Status object the server sent with it (kubectl shows its message).
type APIError struct {
	// Code is the HTTP status code: 403 Forbidden, 404 Not Found, 409
	// Conflict, 401 Unauthorized...
	Code int
	// Reason is the Status object's reason (Forbidden, NotFound, Conflict,
	// AlreadyExists, ...), "" if the server sent none.
	Reason string
	// Message is the Status object's message, or the start of the body.
	Message string
}

func (e *APIError) Error() string {
	if e.Message == "" {
		return fmt.Sprintf("API server answered %d %s", e.Code, http.StatusText(e.Code))
	}
	return fmt.Sprintf("API server answered %d %s: %s", e.Code, http.StatusText(e.Code), e.Message)
}

// IsForbidden reports whether err is, or wraps, the API server's refusal of
// the request by its authorization (HTTP 403): retrying will not help.
func IsForbidden(err error) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Code == http.StatusForbidden
}

func hasReason(err error, code int, reason string) bool {
	var ae *APIError
	if !errors.As(err, &ae) || ae.Code != code {
		return false
	}
	return ae.Reason == "" || ae.Reason == reason
}

func isNotFound(err error) bool      { return hasReason(err, http.StatusNotFound, "NotFound") }
func isConflict(err error) bool      { return hasReason(err, http.StatusConflict, "Conflict") }
func isAlreadyExists(err error) bool { return hasReason(err, http.StatusConflict, "AlreadyExists") }

// apiError reads an error answer.
func apiError(code int, body []byte) *APIError {
	var st struct {
		Kind    string `json:"kind"`
		Reason  string `json:"reason"`
		Message string `json:"message"`
	}
	if json.Unmarshal(body, &st) == nil && st.Kind == "Status" {
		return &APIError{Code: code, Reason: st.Reason, Message: st.Message}
	}
	msg := strings.TrimSpace(string(body))
	if len(msg) > 200 {
		msg = msg[:200] + "..."
	}
	return &APIError{Code: code, Message: msg}
}

// client reaches the Lease objects of one namespace.
type client struct {
	base    string // https://HOST/apis/coordination.k8s.io/v1/namespaces/NS/leases
	http    *http.Client
	limiter *rate.Limiter // nil: no client-side limit
}

func newClient(server string, hc *http.Client, ns string, qps float64, burst int) (*client, error) {
	if !strings.Contains(server, "://") {
		server = "https://" + server // as client-go reads a Host without a scheme
	}
	u, err := url.Parse(server)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return nil, kit.Invalid("new", "Config.Server %q is not an API server URL (https://HOST[:PORT][/PATH])", redactServer(server))
	}
	if hc == nil {
		hc = http.DefaultClient
	}
	c := &client{
		base: strings.TrimSuffix(u.String(), "/") + "/apis/coordination.k8s.io/v1/namespaces/" + url.PathEscape(ns) + "/leases",
		http: hc,
	}
	if qps > 0 {
		c.limiter = rate.NewLimiter(rate.Limit(qps), max(burst, 1))
	}
	return c, nil
}

// redactServer drops a user and password from a server URL for an error
// message.
func redactServer(s string) string {
	if u, err := url.Parse(s); err == nil && u.User != nil {
		u.User = nil
		return u.String()
	}
	return s
}

// send makes one request and returns the answer if its status is 2xx; any
// other status is an *APIError.
func (c *client) send(ctx context.Context, method, path string, q url.Values, body []byte) (*http.Response, error) {
	if c.limiter != nil {
		if err := c.limiter.Wait(ctx); err != nil {
			return nil, fmt.Errorf("client-side rate limit: %w", err)
		}
	}
	u := c.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "leasehold")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		return nil, apiError(resp.StatusCode, b)
	}
	return resp, nil
}

// call makes one request and decodes the answer into out.
func (c *client) call(ctx context.Context, method, path string, body []byte, out any) error {
	resp, err := c.send(ctx, method, path, nil, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("API server's answer to %s: %w", method, err)
	}
	return nil
}

func (c *client) get(ctx context.Context, name string) (*lease, error) {
	l := new(lease)
	if err := c.call(ctx, http.MethodGet, "/"+url.PathEscape(name), nil, l); err != nil {
		return nil, err
	}
	return l, nil
}

func (c *client) create(ctx context.Context, l *lease) (*lease, error) {
	body, err := l.encode()
	if err != nil {
		return nil, err
	}
	out := new(lease)
	if err := c.call(ctx, http.MethodPost, "", body, out); err != nil {
		return nil, err
	}
	return out, nil
}

// update writes l, which must carry the resourceVersion it was read with.
func (c *client) update(ctx context.Context, l *lease) (*lease, error) {
	if l.Metadata.ResourceVersion == "" {
		// An update without a resourceVersion is accepted unconditionally.
		return nil, errors.New("leasehold/kubernetes: internal error: update without a resourceVersion")
	}
	body, err := l.encode()
	if err != nil {
		return nil, err
	}
	out := new(lease)
	if err := c.call(ctx, http.MethodPut, "/"+url.PathEscape(l.Metadata.Name), body, out); err != nil {
		return nil, err
	}
	return out, nil
}

// deleteAt deletes object name if its resourceVersion is still rv: the
// server refuses with 409 Conflict if it changed.
func (c *client) deleteAt(ctx context.Context, name, rv string) error {
	body, err := json.Marshal(map[string]any{
		"apiVersion":    "v1",
		"kind":          "DeleteOptions",
		"preconditions": map[string]string{"resourceVersion": rv},
	})
	if err != nil {
		return err
	}
	resp, err := c.send(ctx, http.MethodDelete, "/"+url.PathEscape(name), nil, body)
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

func (c *client) list(ctx context.Context) ([]*lease, error) {
	var list struct {
		Items []*lease `json:"items"`
	}
	if err := c.call(ctx, http.MethodGet, "", nil, &list); err != nil {
		return nil, err
	}
	return list.Items, nil
}

// watchEvent is one event of a watch.
type watchEvent struct {
	Type   string          `json:"type"` // ADDED, MODIFIED, DELETED, BOOKMARK, ERROR
	Object json.RawMessage `json:"object"`
}

// watch starts a watch on the one Lease object name, from resourceVersion rv
// ("" for now). The caller reads events with next and closes body.
func (c *client) watch(ctx context.Context, name, rv string) (io.ReadCloser, error) {
	q := url.Values{"watch": {"true"}, "fieldSelector": {"metadata.name=" + name}}
	if rv != "" {
		q.Set("resourceVersion", rv)
	}
	resp, err := c.send(ctx, http.MethodGet, "", q, nil)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// lease is one Lease object: the fields the store reads and writes, decoded,
// and the object as the server sent it, so that a write changes those fields
// and keeps every other one (see encode).
type lease struct {
	Metadata struct {
		Name            string `json:"name"`
		Namespace       string `json:"namespace,omitempty"`
		ResourceVersion string `json:"resourceVersion,omitempty"`
		// UID tells an object from one deleted and created again under
		// its name. Read only: encode leaves it as the server sent it.
		UID         string            `json:"uid,omitempty"`
		Annotations map[string]string `json:"annotations,omitempty"`
	} `json:"metadata"`
	Spec struct {
		HolderIdentity       *string    `json:"holderIdentity,omitempty"`
		LeaseDurationSeconds *int32     `json:"leaseDurationSeconds,omitempty"`
		AcquireTime          *microTime `json:"acquireTime,omitempty"`
		RenewTime            *microTime `json:"renewTime,omitempty"`
		LeaseTransitions     *int32     `json:"leaseTransitions,omitempty"`
	} `json:"spec"`

	// raw is the object as read; nil for one the store makes.
	raw json.RawMessage
}

func (l *lease) UnmarshalJSON(b []byte) error {
	type plain lease // without this method
	var p plain
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*l = lease(p)
	l.raw = append(json.RawMessage(nil), b...)
	return nil
}

// clone returns a copy of l whose fields can be changed without changing l.
func (l *lease) clone() *lease {
	c := *l
	if l.Metadata.Annotations != nil {
		c.Metadata.Annotations = make(map[string]string, len(l.Metadata.Annotations))
		for k, v := range l.Metadata.Annotations {
			c.Metadata.Annotations[k] = v
		}
	}
	return &c
}

// encode returns the object to write: the object as read (raw), with the
// fields the store owns set from l. Every other field, known to this
// package or not (spec.strategy, spec.preferredHolder, labels,
// ownerReferences, a field added to Lease after this was written), goes back
// to the server as it came.
func (l *lease) encode() ([]byte, error) {
	obj := map[string]json.RawMessage{}
	if l.raw != nil {
		if err := json.Unmarshal(l.raw, &obj); err != nil {
			return nil, err
		}
	}
	meta, err := members(obj["metadata"])
	if err != nil {
		return nil, fmt.Errorf("Lease metadata: %w", err)
	}
	spec, err := members(obj["spec"])
	if err != nil {
		return nil, fmt.Errorf("Lease spec: %w", err)
	}
	m := l.Metadata
	set(meta, "name", m.Name, m.Name != "")
	set(meta, "namespace", m.Namespace, m.Namespace != "")
	set(meta, "resourceVersion", m.ResourceVersion, m.ResourceVersion != "")
	set(meta, "annotations", m.Annotations, len(m.Annotations) > 0)
	sp := l.Spec
	set(spec, "holderIdentity", sp.HolderIdentity, sp.HolderIdentity != nil)
	set(spec, "leaseDurationSeconds", sp.LeaseDurationSeconds, sp.LeaseDurationSeconds != nil)
	set(spec, "acquireTime", sp.AcquireTime, sp.AcquireTime != nil)
	set(spec, "renewTime", sp.RenewTime, sp.RenewTime != nil)
	set(spec, "leaseTransitions", sp.LeaseTransitions, sp.LeaseTransitions != nil)
	set(obj, "apiVersion", "coordination.k8s.io/v1", true)
	set(obj, "kind", "Lease", true)
	set(obj, "metadata", meta, true)
	set(obj, "spec", spec, true)
	return json.Marshal(obj)
}

// members decodes a JSON object into its members (an absent one is empty).
func members(raw json.RawMessage) (map[string]json.RawMessage, error) {
	m := map[string]json.RawMessage{}
	if len(raw) == 0 || string(raw) == "null" {
		return m, nil
	}
	return m, json.Unmarshal(raw, &m)
}

// set sets m[key] to v encoded if ok, and removes it if not. Every value
// set here is of a type that encodes without error.
func set(m map[string]json.RawMessage, key string, v any, ok bool) {
	if !ok {
		delete(m, key)
		return
	}
	b, err := json.Marshal(v)
	if err != nil {
		panic("leasehold/kubernetes: encode " + key + ": " + err.Error())
	}
	m[key] = b
}

// microTime is a metav1.MicroTime: RFC 3339 in UTC with microseconds.
type microTime struct{ time.Time }

const rfc3339Micro = "2006-01-02T15:04:05.000000Z07:00"

func (t microTime) MarshalJSON() ([]byte, error) {
	return json.Marshal(t.UTC().Format(rfc3339Micro))
}

func (t *microTime) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		t.Time = time.Time{}
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	pt, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return err
	}
	t.Time = pt.Local()
	return nil
}
