package zookeeper

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
)

// A session is one ZooKeeper session of the store: one zk.Conn, reconnected
// by the client across servers as long as the session lives. The store keeps
// one control session (reads, watches, deletes on behalf of other handles)
// and a pool of term sessions, one per session timeout, that carry the
// store's contender nodes.
//
// Every connection of a session goes through the session's own dialer,
// which does two things go-zookeeper/zk does not offer: it reads the
// timeout the server granted from the connect response (the client asks for
// one; the server clamps it to [minSessionTimeout, maxSessionTimeout]), and
// it can sever the session: close its connection and refuse new ones, so
// that closing the client cannot send closeSession. A severed session lives
// on in the ensemble until it times out, as if its process had crashed; the
// store severs the sessions that carry terms on Close, which does not
// release leases.
type session struct {
	conn *zk.Conn
	d    *sdialer
	// asked is the session timeout asked for (the pool key).
	asked time.Duration

	// Guarded by Store.mu:
	carries int // the store's entries (nodes) on this session
	// proven is the send time of the last request on this session that the
	// leader answered (a write, or a sync): the session lives at least its
	// timeout past it (see Store.proved).
	proven  time.Time
	retired bool // no new nodes go on it (see Store.retire)
	hbStop  chan struct{}
}

// sdialer dials a session's connections (see session).
type sdialer struct {
	_ [0]func() // not comparable: spares the binary an equality function

	mu      sync.Mutex
	severed bool
	cur     net.Conn
	granted time.Duration // the session timeout of the last connect response
	gotResp chan struct{} // closed at the first connect response
	once    sync.Once
}

var errSevered = errors.New("leasehold/zookeeper: session severed")

func newDialer() *sdialer { return &sdialer{gotResp: make(chan struct{})} }

func (d *sdialer) dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	d.mu.Lock()
	if d.severed {
		d.mu.Unlock()
		return nil, errSevered
	}
	d.mu.Unlock()
	c, err := net.DialTimeout(network, addr, timeout)
	if err != nil {
		return nil, err
	}
	sc := &sniffConn{Conn: c, d: d}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.severed {
		c.Close()
		return nil, errSevered
	}
	d.cur = sc
	return sc, nil
}

// sever closes the session's connection and refuses new ones.
func (d *sdialer) sever() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.severed = true
	if d.cur != nil {
		d.cur.Close()
	}
}

// timeout is the session timeout the server granted last.
func (d *sdialer) timeout() time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.granted
}

// sniffConn reads the session timeout out of the first packet the server
// sends on a connection: the connect response, which begins (after its
// 4-byte length) with the protocol version and the granted timeout in
// milliseconds, both 32-bit big-endian (ZooKeeper's ConnectResponse).
type sniffConn struct {
	_ [0]func() // not comparable: spares the binary an equality function

	net.Conn
	d    *sdialer
	head [12]byte
	n    int
}

func (c *sniffConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if c.n < len(c.head) && n > 0 {
		k := copy(c.head[c.n:], p[:n])
		c.n += k
		if c.n == len(c.head) {
			ms := int32(binary.BigEndian.Uint32(c.head[8:12]))
			c.d.mu.Lock()
			c.d.granted = time.Duration(ms) * time.Millisecond
			c.d.mu.Unlock()
			c.d.once.Do(func() { close(c.d.gotResp) })
		}
	}
	return n, err
}

// nopLogger keeps go-zookeeper/zk quiet: its reconnect messages are not
// errors of the caller's, and every failure reaches the caller as an error.
type nopLogger struct{}

func (nopLogger) Printf(string, ...any) {}

// connect opens a session asking for timeout and waits until it has one,
// then adds the store's credentials. It fails when ctx ends first.
func (s *Store) connect(ctx context.Context, timeout time.Duration) (*session, error) {
	d := newDialer()
	var logger zk.Logger = nopLogger{}
	if s.cfg.Logger != nil {
		logger = s.cfg.Logger
	}
	conn, events, err := zk.Connect(s.cfg.Servers, timeout, zk.WithDialer(d.dial), zk.WithLogger(logger), zk.WithLogInfo(false))
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	sess := &session{conn: conn, d: d, asked: timeout}
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				return nil, errors.New("connect: the client closed")
			}
			if ev.State == zk.StateHasSession {
				go drain(events)
				if err := s.auth(ctx, sess); err != nil {
					conn.Close()
					return nil, err
				}
				return sess, nil
			}
		case <-ctx.Done():
			d.sever() // no session, or one nobody will use: nothing to close
			conn.Close()
			go drain(events)
			return nil, fmt.Errorf("%w: no server of %v gave a session (%v)", ErrUnreachable, s.cfg.Servers, ctx.Err())
		}
	}
}

// drain reads a zk.Conn's event channel until the client closes it (the
// client drops events when the channel is full, so this only frees it).
func drain(events <-chan zk.Event) {
	for range events {
	}
}

func (s *Store) auth(ctx context.Context, sess *session) error {
	if s.cfg.Username == "" {
		return nil
	}
	_, err := call(ctx, func() (struct{}, error) {
		return struct{}{}, sess.conn.AddAuth("digest", []byte(s.cfg.Username+":"+s.cfg.Password))
	})
	if err != nil {
		return fmt.Errorf("add digest credentials: %w", err)
	}
	return nil
}

// close ends the session: with closeSession (its ephemeral nodes go at
// once), or, severed first, without (they go when the session times out).
func (sess *session) close(sever bool) {
	if sever {
		sess.d.sever()
	}
	sess.conn.Close()
}

// call runs a blocking go-zookeeper/zk request and returns its answer, or
// ctx's error as soon as ctx ends. The client has no context of its own: an
// abandoned request still completes (or fails with the connection) in the
// background, so its outcome is unknown to the caller.
func call[T any](ctx context.Context, f func() (T, error)) (T, error) {
	if err := ctx.Err(); err != nil {
		var zero T
		return zero, err
	}
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		v, err := f()
		ch <- result{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}

// probeTimeout connects to one of servers without a client library and asks
// for a session of the given timeout, returns the timeout the server granted,
// and closes the session again. Asked for 1 ms, a server grants its
// minSessionTimeout (two ticks unless configured); asked for the most, its
// maxSessionTimeout (twenty ticks unless configured). go-zookeeper/zk cannot
// ask for either: it derives its own read deadline from the timeout asked.
func probeTimeout(ctx context.Context, servers []string, ask time.Duration) (time.Duration, error) {
	var lastErr error
	for _, addr := range servers {
		granted, err := probeOne(ctx, addr, ask)
		if err == nil {
			return granted, nil
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
	}
	return 0, lastErr
}

func probeOne(ctx context.Context, addr string, ask time.Duration) (time.Duration, error) {
	var dl net.Dialer
	c, err := dl.DialContext(ctx, "tcp", addr)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	deadline := time.Now().Add(5 * time.Second)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	c.SetDeadline(deadline)
	ms := ask.Milliseconds()
	if ms > 1<<31-1 {
		ms = 1<<31 - 1
	}
	// ConnectRequest: protocolVersion int32, lastZxidSeen int64, timeOut
	// int32, sessionId int64, passwd (int32 length, bytes), readOnly bool.
	req := make([]byte, 4+4+8+4+8+4+16+1)
	binary.BigEndian.PutUint32(req[0:], uint32(len(req)-4))
	binary.BigEndian.PutUint32(req[16:], uint32(ms))
	binary.BigEndian.PutUint32(req[28:], 16)
	if _, err := c.Write(req); err != nil {
		return 0, err
	}
	// ConnectResponse: protocolVersion int32, timeOut int32, sessionId
	// int64, passwd, readOnly.
	var lb [4]byte
	if _, err := io.ReadFull(c, lb[:]); err != nil {
		return 0, fmt.Errorf("no connect response from %s (is it a ZooKeeper server that serves?): %w", addr, err)
	}
	n := binary.BigEndian.Uint32(lb[:])
	if n < 16 || n > 1<<16 {
		return 0, fmt.Errorf("a connect response of %d bytes from %s: not a ZooKeeper server", n, addr)
	}
	resp := make([]byte, n)
	if _, err := io.ReadFull(c, resp); err != nil {
		return 0, err
	}
	granted := time.Duration(int32(binary.BigEndian.Uint32(resp[4:8]))) * time.Millisecond
	if binary.BigEndian.Uint64(resp[8:16]) == 0 || granted <= 0 {
		return 0, fmt.Errorf("%s refused a session", addr)
	}
	// closeSession: a request header (xid int32, type int32 = -11).
	var cl [12]byte
	binary.BigEndian.PutUint32(cl[0:], 8)
	binary.BigEndian.PutUint32(cl[4:], 1)
	binary.BigEndian.PutUint32(cl[8:], uint32(0xfffffff5)) // -11
	if _, err := c.Write(cl[:]); err == nil {
		io.ReadFull(c, lb[:]) // the reply (or EOF): the session is closed either way, or times out
	}
	return granted, nil
}
