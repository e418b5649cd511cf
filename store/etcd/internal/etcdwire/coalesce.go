package etcdwire

import (
	"net"
	"sync"
	"time"
)

// net/http's HTTP/2 client writes a request's HEADERS frame and its DATA (the
// gRPC message) in two writes, each flushed to the socket; gRPC's own client
// sends both in one. Two segments are two chances to be held up on their own:
// a proxy that forwards chunk by chunk adds its delay to each (the chaos
// harness's latency fault made requests about one extra one-way delay
// slower). coalescingConn holds a write that ends with a HEADERS frame whose
// stream goes on (no END_STREAM) until the next write, which carries the
// DATA, so that both leave in one segment; a held write leaves on its own
// after holdHeaders at the latest (a stream whose first message comes
// later). It only ever delays bytes, never reorders or changes them, so a
// misjudged frame boundary costs at most holdHeaders.

// holdHeaders bounds how long a HEADERS frame waits for its DATA.
const holdHeaders = time.Millisecond

const (
	frameHeaders   = 0x1
	flagEndStream  = 0x1
	flagEndHeaders = 0x4
	clientPreface  = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
)

type coalescingConn struct {
	net.Conn

	mu    sync.Mutex
	held  []byte
	timer *time.Timer
	err   error

	// The frame parser's state across writes: the client preface still to
	// skip, the frame header bytes read so far, the current frame's type,
	// flags and payload bytes still to come, and whether the bytes parsed so
	// far end exactly at the end of a frame that is an open HEADERS frame.
	preface     int
	hdr         [9]byte
	hdrLen      int
	typ, flags  byte
	payload     int
	openHeaders bool
}

func newCoalescingConn(c net.Conn) *coalescingConn {
	return &coalescingConn{Conn: c, preface: len(clientPreface)}
}

// parse advances the frame parser over b.
func (c *coalescingConn) parse(b []byte) {
	for len(b) > 0 {
		c.openHeaders = false
		switch {
		case c.preface > 0:
			n := min(c.preface, len(b))
			c.preface -= n
			b = b[n:]
		case c.hdrLen < 9:
			n := copy(c.hdr[c.hdrLen:], b)
			c.hdrLen += n
			b = b[n:]
			if c.hdrLen == 9 {
				c.payload = int(c.hdr[0])<<16 | int(c.hdr[1])<<8 | int(c.hdr[2])
				c.typ, c.flags = c.hdr[3], c.hdr[4]
				if c.payload == 0 {
					c.endFrame()
				}
			}
		default:
			n := min(c.payload, len(b))
			c.payload -= n
			b = b[n:]
			if c.payload == 0 {
				c.endFrame()
			}
		}
	}
}

func (c *coalescingConn) endFrame() {
	c.hdrLen = 0
	c.openHeaders = c.typ == frameHeaders && c.flags&flagEndStream == 0 && c.flags&flagEndHeaders != 0
}

func (c *coalescingConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return 0, c.err
	}
	c.parse(p)
	if c.timer != nil {
		c.timer.Stop()
		c.timer = nil
	}
	if c.openHeaders {
		c.held = append(c.held, p...)
		c.timer = time.AfterFunc(holdHeaders, c.flushHeld)
		return len(p), nil
	}
	out := p
	if len(c.held) > 0 {
		out = append(c.held, p...)
		c.held = nil
	}
	if _, err := c.Conn.Write(out); err != nil {
		c.err = err
		return 0, err
	}
	return len(p), nil
}

// flushHeld writes a held HEADERS frame whose DATA did not follow in time.
func (c *coalescingConn) flushHeld() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.held) == 0 || c.err != nil {
		return
	}
	if _, err := c.Conn.Write(c.held); err != nil {
		c.err = err
	}
	c.held = nil
	c.timer = nil
}

func (c *coalescingConn) Close() error {
	c.mu.Lock()
	if c.timer != nil {
		c.timer.Stop()
		c.timer = nil
	}
	c.mu.Unlock()
	return c.Conn.Close()
}
