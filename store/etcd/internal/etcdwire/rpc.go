package etcdwire

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/leasehold/leasehold/store/etcd/internal/etcdapi"
)

// Txn implements etcdapi.Client. A transaction is sent once (it may write),
// unless it surely did not reach etcd.
func (c *Client) Txn(ctx context.Context, cmps []etcdapi.Cmp, then, els []etcdapi.Op) (*etcdapi.TxnResponse, error) {
	req, err := encodeTxn(cmps, then, els)
	if err != nil {
		return nil, err
	}
	readOnly := true
	for _, ops := range [][]etcdapi.Op{then, els} {
		for _, op := range ops {
			if op.Kind != etcdapi.OpRange {
				readOnly = false
			}
		}
	}
	resp, err := c.call(ctx, "etcdserverpb.KV/Txn", req, readOnly, true)
	if err != nil {
		return nil, err
	}
	return decodeTxn(resp)
}

// Range implements etcdapi.Client.
func (c *Client) Range(ctx context.Context, op etcdapi.Op) (*etcdapi.OpResponse, error) {
	resp, err := c.call(ctx, "etcdserverpb.KV/Range", encodeRange(op), true, true)
	if err != nil {
		return nil, err
	}
	r, err := decodeRange(resp)
	return &r, err
}

// Grant implements etcdapi.Client.
func (c *Client) Grant(ctx context.Context, ttl int64) (etcdapi.LeaseID, int64, error) {
	resp, err := c.call(ctx, "etcdserverpb.Lease/LeaseGrant", appendIntField(nil, 1, ttl), false, true)
	if err != nil {
		return 0, 0, err
	}
	v, msg, err := decodeInts(resp, 4)
	if err != nil {
		return 0, 0, err
	}
	if msg != "" {
		return 0, 0, &etcdapi.Error{Code: etcdapi.Unknown, Message: msg}
	}
	return etcdapi.LeaseID(v[2]), v[3], nil
}

// Revoke implements etcdapi.Client. It is sent again after a failure: a
// second revocation of the same lease changes nothing.
func (c *Client) Revoke(ctx context.Context, id etcdapi.LeaseID) error {
	_, err := c.call(ctx, "etcdserverpb.Lease/LeaseRevoke", appendIntField(nil, 1, int64(id)), true, true)
	return err
}

// TimeToLive implements etcdapi.Client.
func (c *Client) TimeToLive(ctx context.Context, id etcdapi.LeaseID) (int64, int64, error) {
	resp, err := c.call(ctx, "etcdserverpb.Lease/LeaseTimeToLive", appendIntField(nil, 1, int64(id)), true, true)
	if err != nil {
		return 0, 0, err
	}
	v, _, err := decodeInts(resp, 0)
	if err != nil {
		return 0, 0, err
	}
	if v[3] == -1 {
		return -1, v[4], nil
	}
	return v[3], v[4], nil
}

// KeepAliveOnce implements etcdapi.Client: the request is the whole body of
// its stream (a client stream of one message, ended at once), so it leaves
// with its headers in one segment and the stream needs no reset afterwards.
func (c *Client) KeepAliveOnce(ctx context.Context, id etcdapi.LeaseID) (int64, error) {
	resp, err := c.call(ctx, "etcdserverpb.Lease/LeaseKeepAlive", appendIntField(nil, 1, int64(id)), false, true)
	if err != nil {
		return 0, err
	}
	v, _, err := decodeInts(resp, 0)
	if err != nil {
		return 0, err
	}
	return v[3], nil
}

// stream is a gRPC stream: a request body that stays open for the messages
// sent, and the response body the answers come on.
type stream struct {
	c      *Client
	ep     int
	token  string // the auth token it was opened with
	ctx    context.Context
	cancel context.CancelFunc
	pw     *io.PipeWriter

	done chan struct{} // closed once resp or err is set
	resp *http.Response
	err  error
	once sync.Once
}

// openStream starts a stream of method on the endpoint in use. The request
// goes out in the background; etcd answers its headers with its first
// message, so the first Recv waits for both.
func (c *Client) openStream(ctx context.Context, method string) (*stream, error) {
	i, ep, token := c.endpoint()
	sctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(c.ctx, cancel)
	pr, pw := io.Pipe()
	context.AfterFunc(sctx, func() {
		stop()
		pr.CloseWithError(sctx.Err())
	})
	req, err := newRequest(sctx, ep, method, token, pr)
	if err != nil {
		cancel()
		return nil, err
	}
	s := &stream{c: c, ep: i, token: token, ctx: sctx, cancel: cancel, pw: pw, done: make(chan struct{})}
	go func() {
		resp, err := c.hc.Do(req)
		if err == nil {
			if err = checkResponse(resp); err != nil {
				resp.Body.Close()
			}
		} else {
			if notSent(err) {
				c.failed(i)
			}
			err = transportError(err)
		}
		if err != nil {
			cancel()
		}
		s.resp, s.err = resp, err
		close(s.done)
	}()
	return s, nil
}

func (s *stream) send(msg []byte) error {
	if _, err := s.pw.Write(frame(msg)); err != nil {
		if s.ctx.Err() != nil {
			select {
			case <-s.done:
				if s.err != nil {
					return s.err
				}
			default:
			}
			return s.ctx.Err()
		}
		return transportError(err)
	}
	return nil
}

// recv returns the next message; at the stream's end, its status as an
// error (io.EOF for OK). A stream etcd ended for an expired auth token gets
// a new token for the next stream, and the error is Unavailable (to be tried
// again).
func (s *stream) recv() ([]byte, error) {
	m, err := s.recvMessage()
	if err != nil && s.c.user != "" && errors.Is(err, etcdapi.ErrInvalidAuthToken) {
		if aerr := s.c.renewToken(s.ctx, s.token); aerr != nil {
			return nil, aerr
		}
		return nil, &etcdapi.Error{Code: etcdapi.Unavailable, Message: "etcdwire: the auth token had expired; authenticated again", Err: err}
	}
	return m, err
}

func (s *stream) recvMessage() ([]byte, error) {
	select {
	case <-s.done:
	case <-s.ctx.Done():
		return nil, s.ctx.Err()
	}
	if s.err != nil {
		return nil, s.err
	}
	m, err := readFrame(s.resp.Body)
	if err == nil {
		return m, nil
	}
	if errors.Is(err, io.EOF) {
		if serr, ok := status(s.resp); ok {
			if serr != nil {
				return nil, serr
			}
			return nil, io.EOF
		}
		return nil, &etcdapi.Error{Code: etcdapi.Internal, Message: "etcdwire: stream ended without a grpc-status"}
	}
	if s.ctx.Err() != nil {
		return nil, s.ctx.Err()
	}
	if serr, ok := status(s.resp); ok && serr != nil {
		return nil, serr
	}
	return nil, transportError(err)
}

// closeSend ends the request body.
func (s *stream) closeSend() error { return s.pw.Close() }

// close ends the stream.
func (s *stream) close() {
	s.once.Do(func() {
		s.cancel()
		s.pw.Close()
		go func() {
			<-s.done
			if s.resp != nil {
				s.resp.Body.Close()
			}
		}()
	})
}

// keepAliveStream is an etcdapi.KeepAliveStream.
type keepAliveStream struct{ s *stream }

// KeepAlive implements etcdapi.Client. The stream ends with ctx.
func (c *Client) KeepAlive(ctx context.Context) (etcdapi.KeepAliveStream, error) {
	s, err := c.openStream(ctx, "etcdserverpb.Lease/LeaseKeepAlive")
	if err != nil {
		return nil, err
	}
	context.AfterFunc(s.ctx, s.close)
	return keepAliveStream{s}, nil
}

func (k keepAliveStream) Send(id etcdapi.LeaseID) error {
	return k.s.send(appendIntField(nil, 1, int64(id)))
}

func (k keepAliveStream) Recv() (etcdapi.LeaseID, int64, error) {
	m, err := k.s.recv()
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = &etcdapi.Error{Code: etcdapi.Unavailable, Message: "etcdwire: keep-alive stream ended"}
		}
		return 0, 0, err
	}
	v, _, err := decodeInts(m, 0)
	if err != nil {
		return 0, 0, err
	}
	return etcdapi.LeaseID(v[2]), v[3], nil
}

func (k keepAliveStream) CloseSend() error { return k.s.closeSend() }

// Watch implements etcdapi.Client. If the stream cannot reach the endpoint in
// use, it is opened on the next one, until ctx ends.
func (c *Client) Watch(ctx context.Context, prefix string) (<-chan etcdapi.WatchEvent, int64, error) {
	var create []byte
	create = appendBytesField(create, 1, prefix)
	create = appendBytesField(create, 2, etcdapi.PrefixEnd(prefix))
	req := appendMessage(nil, 1, create)
	for attempt := 0; ; attempt++ {
		s, err := c.openStream(ctx, "etcdserverpb.Watch/Watch")
		if err != nil {
			return nil, 0, err
		}
		ch, from, err := c.watchOn(s, req)
		if err == nil {
			return ch, from, nil
		}
		s.close()
		<-s.done // Do has returned (close cancelled it)
		if ctx.Err() != nil {
			return nil, 0, ctxError(ctx, err)
		}
		if c.user != "" && attempt == 0 && errors.Is(err, etcdapi.ErrInvalidAuthToken) {
			// The token expired: get a new one and watch again at once.
			if aerr := c.renewToken(ctx, s.token); aerr != nil {
				return nil, 0, aerr
			}
			continue
		}
		if s.err == nil || etcdapi.CodeOf(s.err) != etcdapi.Unavailable {
			return nil, 0, err
		}
		// The endpoint could not be reached: try again (on the next
		// endpoint if the connection failed).
		t := time.NewTimer(min(time.Duration(attempt+1)*25*time.Millisecond, 500*time.Millisecond))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, 0, ctxError(ctx, err)
		case <-t.C:
		}
	}
}

// watchOn creates the watch req on stream s. The created answer's header
// revision is taken after etcd registered the watch, so every change after
// it is sent.
func (c *Client) watchOn(s *stream, req []byte) (<-chan etcdapi.WatchEvent, int64, error) {
	if err := s.send(req); err != nil {
		return nil, 0, err
	}
	m, err := s.recv()
	if err != nil {
		return nil, 0, err
	}
	w, err := decodeWatch(m)
	if err != nil {
		return nil, 0, err
	}
	if w.canceled || !w.created {
		reason := w.reason
		if reason == "" {
			reason = "etcdwire: watch not created"
		}
		return nil, 0, etcdapi.ErrorFromText(reason)
	}
	out := make(chan etcdapi.WatchEvent, 16)
	go func() {
		defer close(out)
		defer s.close()
		for {
			m, err := s.recv()
			if err != nil {
				if !errors.Is(err, io.EOF) && s.ctx.Err() == nil {
					select {
					case out <- etcdapi.WatchEvent{Err: err}:
					case <-s.ctx.Done():
					}
				}
				return
			}
			r, err := decodeWatch(m)
			canceled := r.canceled
			ev := etcdapi.WatchEvent{Events: r.events, Canceled: canceled, Err: err}
			if canceled && err == nil {
				switch {
				case r.compactRev != 0:
					ev.Err = etcdapi.ErrCompacted
				case r.reason != "":
					ev.Err = etcdapi.ErrorFromText(r.reason)
				}
			}
			select {
			case out <- ev:
			case <-s.ctx.Done():
				return
			}
			if canceled || err != nil {
				return
			}
		}
	}()
	return out, w.revision, nil
}
