// Package etcdwire is a small client of etcd's v3 gRPC API: the RPCs the etcd
// store uses (KV Range and Txn, Lease Grant, Revoke, TimeToLive and
// KeepAlive, Watch, Auth Authenticate), as gRPC over net/http's HTTP/2 (h2c
// for http:// endpoints, TLS for https://), with messages encoded by hand
// with protowire. It links neither google.golang.org/grpc nor etcd's client
// and generated code, which together are about 20 MB of the leasehold command
// (README, "The binary's size").
package etcdwire

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/leasehold/leasehold/store/etcd/internal/etcdapi"
)

// Config says how to reach etcd.
type Config struct {
	// Endpoints are client URLs (http://host:port, https://host:port, or
	// host:port: https when TLS is set, else http).
	Endpoints []string
	TLS       *tls.Config
	// Username and Password, when set, authenticate with etcd's
	// user/password auth; the token goes with every request.
	Username, Password string
	// DialTimeout bounds a connection attempt; zero means 5 s.
	DialTimeout time.Duration
}

// Client is an etcd v3 client. It is safe for concurrent use.
type Client struct {
	eps        []string // base URLs
	hc         *http.Client
	tr         *http.Transport
	user, pass string

	mu    sync.Mutex
	cur   int    // the endpoint requests go to; the next one after a failure
	token string // the auth token, when authenticated
	// authMu makes one goroutine at a time renew the token (renewToken).
	authMu sync.Mutex

	ctx    context.Context // ended by Close: ends every stream
	cancel context.CancelFunc
}

var _ etcdapi.Client = (*Client)(nil)

// maxMessage bounds a message read from etcd (etcd's own default limit of a
// response is about 2 GiB; the store's answers are far smaller).
const maxMessage = 64 << 20

// New returns a client of the endpoints. With a username it authenticates
// first, within ctx, and fails if that fails.
func New(ctx context.Context, cfg Config) (*Client, error) {
	if len(cfg.Endpoints) == 0 {
		return nil, errors.New("etcdwire: no endpoints")
	}
	c := &Client{user: cfg.Username, pass: cfg.Password}
	for _, ep := range cfg.Endpoints {
		u, err := baseURL(ep, cfg.TLS != nil)
		if err != nil {
			return nil, err
		}
		c.eps = append(c.eps, u)
	}
	dt := cfg.DialTimeout
	if dt <= 0 {
		dt = 5 * time.Second
	}
	var protos http.Protocols
	protos.SetHTTP2(true)
	protos.SetUnencryptedHTTP2(true)
	var tc *tls.Config
	if cfg.TLS != nil {
		tc = cfg.TLS.Clone()
	}
	dialer := coalescingDialer{&net.Dialer{Timeout: dt, KeepAlive: 5 * time.Second}}
	c.tr = &http.Transport{
		DialContext:         dialer.DialContext,
		TLSClientConfig:     tc,
		TLSHandshakeTimeout: dt,
		Protocols:           &protos,
		DisableCompression:  true,
		// Find a dead connection in about 11 s even when idle (clientv3 with
		// the store's keep-alive settings took about 10 s). A ping goes out
		// after 6 s without a frame: etcd's server counts pings closer than
		// its --grpc-keepalive-min-time (5 s) apart as abuse.
		HTTP2: &http.HTTP2Config{SendPingTimeout: 6 * time.Second, PingTimeout: 5 * time.Second},
	}
	c.hc = &http.Client{Transport: c.tr}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	if c.user != "" {
		if err := c.authenticate(ctx); err != nil {
			c.Close()
			return nil, err
		}
	}
	return c, nil
}

func baseURL(ep string, useTLS bool) (string, error) {
	if !strings.Contains(ep, "://") {
		if useTLS {
			ep = "https://" + ep
		} else {
			ep = "http://" + ep
		}
	}
	u, err := url.Parse(ep)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("etcdwire: endpoint %q is not http://host:port or https://host:port", ep)
	}
	return u.Scheme + "://" + u.Host, nil
}

// Close ends the client's streams and connections.
func (c *Client) Close() error {
	c.cancel()
	c.tr.CloseIdleConnections()
	return nil
}

// endpoint returns the endpoint in use and its index.
func (c *Client) endpoint() (int, string, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cur, c.eps[c.cur], c.token
}

// failed moves on from endpoint i to the next one (if no other request did
// already).
func (c *Client) failed(i int) {
	c.mu.Lock()
	if c.cur == i {
		c.cur = (i + 1) % len(c.eps)
	}
	c.mu.Unlock()
}

// authenticate gets a new token.
func (c *Client) authenticate(ctx context.Context) error {
	var req []byte
	req = appendBytesField(req, 1, c.user)
	req = appendBytesField(req, 2, c.pass)
	resp, err := c.call(ctx, "etcdserverpb.Auth/Authenticate", req, true, false)
	if err != nil {
		return err
	}
	var token string
	err = fields(resp, func(num protowire.Number, _ uint64, bs []byte) error {
		if num == 2 {
			token = string(bs)
		}
		return nil
	})
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.token = token
	c.mu.Unlock()
	return nil
}

// renewToken authenticates again after etcd refused the token used (it
// expired), unless another goroutine already replaced it.
func (c *Client) renewToken(ctx context.Context, used string) error {
	c.authMu.Lock()
	defer c.authMu.Unlock()
	c.mu.Lock()
	current := c.token
	c.mu.Unlock()
	if current != used {
		return nil
	}
	return c.authenticate(ctx)
}

// call makes a unary call. A request that never left (the connection could
// not be made) is sent again to the next endpoint, as is one a member
// refused for having no leader; safe requests (reads, and writes that may be
// applied twice) are sent again after any failure to reach etcd. It retries
// until ctx ends. An invalid (expired) auth token is renewed once.
func (c *Client) call(ctx context.Context, method string, req []byte, safe, withToken bool) ([]byte, error) {
	var last error
	reauthed, anySent := false, false
	for attempt := 0; ; attempt++ {
		i, ep, token := c.endpoint()
		if !withToken {
			token = ""
		}
		resp, sent, err := c.unary(ctx, ep, method, req, token)
		if err == nil {
			return resp, nil
		}
		anySent = anySent || sent
		if ctx.Err() != nil {
			return nil, markNotSent(ctxError(ctx, err), anySent)
		}
		switch {
		case withToken && c.user != "" && !reauthed && errors.Is(err, etcdapi.ErrInvalidAuthToken):
			reauthed = true
			if err := c.renewToken(ctx, token); err != nil {
				return nil, err
			}
			continue
		case !sent || errors.Is(err, etcdapi.ErrNoLeader) || (safe && etcdapi.CodeOf(err) == etcdapi.Unavailable):
			c.failed(i)
			last = err
		default:
			return nil, err
		}
		t := time.NewTimer(min(time.Duration(attempt+1)*25*time.Millisecond, 500*time.Millisecond))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, markNotSent(ctxError(ctx, last), anySent)
		case <-c.ctx.Done():
			t.Stop()
			return nil, markNotSent(errClosed, anySent)
		case <-t.C:
		}
	}
}

var errClosed = errors.New("etcdwire: client closed")

// markNotSent marks err with etcdapi.ErrNotSent unless a request may have left.
func markNotSent(err error, anySent bool) error {
	if anySent {
		return err
	}
	return errors.Join(err, etcdapi.ErrNotSent)
}

// ctxError is ctx's error, with the last failure that made the call wait.
func ctxError(ctx context.Context, last error) error {
	if last == nil || errors.Is(last, ctx.Err()) {
		return ctx.Err()
	}
	return fmt.Errorf("%w (last error: %v)", ctx.Err(), last)
}

// newRequest is a gRPC request of method to ep.
func newRequest(ctx context.Context, ep, method, token string, body io.Reader) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ep+"/"+method, body)
	if err != nil {
		return nil, err
	}
	h := req.Header
	h["Content-Type"] = []string{"application/grpc"}
	h["Te"] = []string{"trailers"}
	if token != "" {
		h["Token"] = []string{token}
	}
	if etcdapi.RequireLeader(ctx) {
		h["Hasleader"] = []string{"true"}
	}
	if dl, ok := ctx.Deadline(); ok {
		ms := max(time.Until(dl).Milliseconds(), 1)
		if ms < 1e8 {
			h["Grpc-Timeout"] = []string{strconv.FormatInt(ms, 10) + "m"}
		} else {
			h["Grpc-Timeout"] = []string{strconv.FormatInt(min(ms/1000, 1e8-1), 10) + "S"}
		}
	}
	return req, nil
}

// frame is msg with gRPC's length prefix (uncompressed).
func frame(msg []byte) []byte {
	b := make([]byte, 5, 5+len(msg))
	binary.BigEndian.PutUint32(b[1:], uint32(len(msg)))
	return append(b, msg...)
}

// readFrame reads one length-prefixed message.
func readFrame(r io.Reader) ([]byte, error) {
	var h [5]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, errMalformed
		}
		return nil, err
	}
	if h[0] != 0 {
		return nil, errors.New("etcdwire: etcd sent a compressed message")
	}
	n := binary.BigEndian.Uint32(h[1:])
	if n > maxMessage {
		return nil, fmt.Errorf("etcdwire: etcd sent a message of %d bytes, over the limit of %d", n, maxMessage)
	}
	msg := make([]byte, n)
	if _, err := io.ReadFull(r, msg); err != nil {
		return nil, errMalformed
	}
	return msg, nil
}

// notSent reports whether a transport error means the request never left
// (no connection could be made).
func notSent(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "dial"
}

// transportError is a failure to talk to etcd, as gRPC reports it.
func transportError(err error) error {
	return &etcdapi.Error{Code: etcdapi.Unavailable, Message: err.Error(), Err: err}
}

// status is the gRPC status of a response: from its trailers, or from its
// headers for a "trailers-only" response. ok is false if there is none.
func status(resp *http.Response) (err error, ok bool) {
	h := resp.Trailer
	if h.Get("Grpc-Status") == "" {
		h = resp.Header
	}
	s := h.Get("Grpc-Status")
	if s == "" {
		return nil, false
	}
	code, cerr := strconv.Atoi(s)
	if cerr != nil {
		return &etcdapi.Error{Code: etcdapi.Unknown, Message: "etcdwire: bad grpc-status " + strconv.Quote(s)}, true
	}
	if code == 0 {
		return nil, true
	}
	msg := h.Get("Grpc-Message")
	if m, err := url.PathUnescape(msg); err == nil {
		msg = m
	}
	return &etcdapi.Error{Code: etcdapi.Code(code), Message: msg}, true
}

// checkResponse checks a response's HTTP status and content type.
func checkResponse(resp *http.Response) error {
	if resp.StatusCode != http.StatusOK {
		code := etcdapi.Unknown
		switch resp.StatusCode {
		case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout, http.StatusTooManyRequests:
			code = etcdapi.Unavailable
		}
		return &etcdapi.Error{Code: code, Message: "etcdwire: HTTP status " + resp.Status + " from etcd"}
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/grpc") {
		return &etcdapi.Error{Code: etcdapi.Unknown, Message: "etcdwire: content type " + strconv.Quote(ct) + " from etcd, not gRPC"}
	}
	return nil
}

// unary sends one request to ep and reads its answer. sent is false when
// the request surely did not reach etcd.
func (c *Client) unary(ctx context.Context, ep, method string, msg []byte, token string) ([]byte, bool, error) {
	req, err := newRequest(ctx, ep, method, token, bytes.NewReader(frame(msg)))
	if err != nil {
		return nil, false, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, !notSent(err), transportError(err)
	}
	defer resp.Body.Close()
	if err := checkResponse(resp); err != nil {
		return nil, true, err
	}
	if serr, ok := status(resp); ok && serr != nil {
		return nil, true, serr // trailers-only
	}
	var out []byte
	got := false
	for {
		m, err := readFrame(resp.Body)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil, true, ctx.Err()
			}
			return nil, true, transportError(err)
		}
		if !got {
			out, got = m, true
		}
	}
	serr, ok := status(resp)
	switch {
	case !ok:
		return nil, true, &etcdapi.Error{Code: etcdapi.Internal, Message: "etcdwire: etcd's answer has no grpc-status"}
	case serr != nil:
		return nil, true, serr
	case !got:
		return nil, true, &etcdapi.Error{Code: etcdapi.Internal, Message: "etcdwire: etcd's answer has no message"}
	}
	return out, true, nil
}

// Endpoints returns the client's endpoint URLs.
func (c *Client) Endpoints() []string { return append([]string(nil), c.eps...) }

// Token returns the auth token in use (for tests).
func (c *Client) Token() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.token
}

// RangeWithToken sends one Range with the given auth token, once, to the
// endpoint in use (for tests: it neither renews the token nor retries).
func (c *Client) RangeWithToken(ctx context.Context, token string, op etcdapi.Op) error {
	_, ep, _ := c.endpoint()
	_, _, err := c.unary(ctx, ep, "etcdserverpb.KV/Range", encodeRange(op), token)
	return err
}

// coalescingDialer dials TCP connections that send a request's HEADERS and
// DATA together (coalescingConn).
type coalescingDialer struct{ d *net.Dialer }

func (d coalescingDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := d.d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return newCoalescingConn(c), nil
}
