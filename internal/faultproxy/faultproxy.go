// Package faultproxy is a TCP fault proxy for tests and for the chaos
// harness (internal/chaos, which calls it chaos.Proxy): it forwards every
// connection to one target and injects faults there. Tests of a store use it
// between a client and its server, or between the members of an ensemble.
package faultproxy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// ErrInvalid is wrapped by New for a bad target.
var ErrInvalid = errors.New("leasehold/faultproxy: invalid argument")

// Proxy is a TCP fault proxy: it listens on 127.0.0.1 and forwards every
// connection to one target address. The harness puts one in front of each
// store endpoint for each node, so that every byte a node exchanges with the
// store passes through it, and injects faults there:
//
//   - Blackhole: stop forwarding in both directions while keeping every
//     connection open (a partition: the peers see silence, not an error).
//     Bytes already read are held and delivered when the blackhole heals, as
//     TCP retransmission would, so a request sent before a partition may land
//     after it.
//   - Reset: close every connection at once, with RST.
//   - Refuse: reset new connections as soon as they arrive (with Reset, this
//     emulates a store that is down).
//   - Latency: hold each chunk for half the latency in each direction.
type Proxy struct {
	ln     net.Listener
	target string

	mu        sync.Mutex
	conns     map[net.Conn]struct{}
	gate      chan struct{} // closed while traffic flows; open (blocking) during a blackhole
	refuse    bool
	latency   time.Duration
	closed    bool
	done      chan struct{}
	wg        sync.WaitGroup
	accepted  int
	resetConn int
	// hello rewrites each connection's first message (RewriteHello).
	hello func(client io.Reader) ([]byte, error)
	// filter copies each connection's client bytes on (FilterClient);
	// filtered numbers the connections it was given.
	filter   ClientFilter
	filtered int
}

// ClientFilter copies what a client sends on connection conn (numbered
// from 1, in the order the proxy served them) from src to dst, changed as
// it likes: it may count, drop or rewrite the protocol's messages. It
// returns when src ends or dst fails. Blackholes and latency apply to what
// it writes.
type ClientFilter func(conn int, dst io.Writer, src io.Reader) error

// New listens on a free port of 127.0.0.1 and forwards to target
// (host:port).
func New(target string) (*Proxy, error) {
	if _, _, err := net.SplitHostPort(target); err != nil {
		return nil, fmt.Errorf("%w: proxy target %q is not host:port", ErrInvalid, target)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("leasehold/faultproxy: listen: %w", err)
	}
	gate := make(chan struct{})
	close(gate)
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}, gate: gate, done: make(chan struct{})}
	p.wg.Add(1)
	go p.acceptLoop()
	return p, nil
}

// Addr is the proxy's listening address (127.0.0.1:port).
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target is the address the proxy forwards to.
func (p *Proxy) Target() string { return p.target }

// Blackhole stops all forwarding until Heal.
func (p *Proxy) Blackhole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.gate:
		p.gate = make(chan struct{})
	default: // already blackholed
	}
}

// EndBlackhole ends a blackhole only: a refusal and added latency stay (a
// caller whose faults overlap heals each one on its own).
func (p *Proxy) EndBlackhole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.gate:
	default:
		close(p.gate)
	}
}

// Heal ends a blackhole and a refusal, and removes added latency.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.gate:
	default:
		close(p.gate)
	}
	p.refuse = false
	p.latency = 0
}

// SetLatency adds d to every round trip (d/2 each way) from now on.
func (p *Proxy) SetLatency(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.latency = d
}

// RewriteHello has f rewrite the first message of every connection from
// now on: f reads that message from the client (exactly it, no more) and
// returns the bytes sent to the target in its place; an error closes the
// connection. The ZooKeeper ensemble fixture needs it: a member opening an
// election connection names its own address in its first message, and the
// peer may call it back there, past the proxy, unless the name is rewritten.
func (p *Proxy) RewriteHello(f func(client io.Reader) ([]byte, error)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hello = f
}

// FilterClient has f carry the client's side of every connection served
// from now on (after RewriteHello's first message, if set): the tests that
// count a store's requests, or leave some unanswered, read its protocol
// there.
func (p *Proxy) FilterClient(f ClientFilter) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.filter = f
}

// Refuse makes the proxy reset new connections (on) or forward them (off).
func (p *Proxy) Refuse(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refuse = on
}

// Reset closes every open connection with RST.
func (p *Proxy) Reset() {
	p.mu.Lock()
	conns := make([]net.Conn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.resetConn += len(conns)
	p.mu.Unlock()
	for _, c := range conns {
		abort(c)
	}
}

// Stats reports how many connections were accepted and reset so far.
func (p *Proxy) Stats() (accepted, reset int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted, p.resetConn
}

// Close stops the proxy and closes every connection. It waits for the
// proxy's goroutines.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	close(p.done)
	p.mu.Unlock()
	err := p.ln.Close()
	p.Reset()
	p.wg.Wait()
	return err
}

// abort closes c with RST where it can.
func abort(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	c.Close()
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.conns, c)
}

func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			select {
			case <-p.done:
				return
			case <-time.After(10 * time.Millisecond): // a transient accept error (EMFILE): back off
			}
			continue
		}
		p.mu.Lock()
		p.accepted++
		refuse := p.refuse
		p.mu.Unlock()
		if refuse {
			abort(c)
			continue
		}
		if !p.track(c) {
			abort(c)
			return
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

// waitGate blocks while the proxy is blackholed. It reports false when the
// proxy is closing or stop is closed.
func (p *Proxy) waitGate(stop <-chan struct{}) bool {
	p.mu.Lock()
	gate := p.gate
	p.mu.Unlock()
	select {
	case <-gate:
		return true
	case <-p.done:
		return false
	case <-stop:
		return false
	}
}

func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	defer p.untrack(client)
	defer abort(client)
	// A partition also holds back new connections: dial only once traffic flows.
	if !p.waitGate(nil) {
		return
	}
	server, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		return
	}
	if !p.track(server) {
		abort(server)
		return
	}
	defer p.untrack(server)
	defer abort(server)
	p.mu.Lock()
	hello := p.hello
	p.mu.Unlock()
	if hello != nil {
		b, err := hello(client)
		if err != nil || !p.waitGate(nil) {
			return
		}
		if _, err := server.Write(b); err != nil {
			return
		}
	}
	var fromClient io.Reader = client
	p.mu.Lock()
	filter := p.filter
	p.filtered++
	conn := p.filtered
	p.mu.Unlock()
	if filter != nil {
		// The filter writes into a pipe that the pump reads, so that
		// blackholes and latency apply to its output. It ends when the
		// client's side is closed (below), or its pipe is.
		pr, pw := io.Pipe()
		defer pr.Close()
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			pw.CloseWithError(filter(conn, pw, client))
		}()
		fromClient = pr
	}
	done := make(chan struct{}, 2)
	stop := make(chan struct{})
	go func() { p.pump(server, fromClient, stop); done <- struct{}{} }()
	go func() { p.pump(client, server, stop); done <- struct{}{} }()
	<-done // one side ended: end both
	close(stop)
	abort(client)
	abort(server)
	<-done
}

// pump copies src to dst chunk by chunk, honouring blackholes and latency.
func (p *Proxy) pump(dst io.Writer, src io.Reader, stop <-chan struct{}) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			readAt := time.Now()
			if !p.waitGate(stop) {
				return
			}
			p.mu.Lock()
			lat := p.latency / 2
			p.mu.Unlock()
			if lat > 0 {
				if wait := time.Until(readAt.Add(lat)); wait > 0 {
					select {
					case <-time.After(wait): // the injected latency itself
					case <-p.done:
						return
					case <-stop:
						return
					}
				}
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
