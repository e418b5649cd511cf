package etcd

import (
	"context"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"testing"
)

// peerProxy sits in front of one member's peer listener: the member advertises
// the proxy's URL, so every raft message, snapshot and lease forward that other
// members send it passes through here, and so does every message stream the
// member reads from its peers (etcd's rafthttp has the receiver of a stream
// dial the sender). The proxy works per HTTP request, so it sees etcd's
// X-Server-From header (the sending member's ID) on each raft request.
//
// A partition cuts members off: a request is refused (and a long-lived stream
// in flight is ended) when its destination or its sender is cut off. Requests
// without X-Server-From (lease keep-alives that a follower forwards to the
// leader, version probes) are refused only by destination: in the first
// election timeout after the cut, before the cut-off member notices it has
// lost its leader, it may still forward a lease keep-alive to the leader.
// Client URLs are not proxied: clients still reach a cut-off member.
type peerProxy struct {
	part   *partition
	target *url.URL
	dest   string // the member ID behind this proxy, set once known
	srv    *http.Server
	l      net.Listener
}

// partition is the cut shared by all proxies of a cluster.
type partition struct {
	mu       sync.Mutex
	cut      map[string]bool // member IDs (hex) cut off
	inflight map[*inflightReq]struct{}
}

type inflightReq struct {
	from, dest string
	cancel     context.CancelFunc
}

func newPartition() *partition {
	return &partition{cut: map[string]bool{}, inflight: map[*inflightReq]struct{}{}}
}

// blocked reports whether a request from member from to member dest is cut.
// Called with p.mu held.
func (p *partition) blocked(from, dest string) bool {
	return p.cut[dest] || (from != "" && p.cut[from])
}

// isolate cuts member id off from every other member, ending its peer
// requests in flight.
func (p *partition) isolate(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut[id] = true
	for r := range p.inflight {
		if p.blocked(r.from, r.dest) {
			r.cancel()
		}
	}
}

// heal ends every cut.
func (p *partition) heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	clear(p.cut)
}

// startPeerProxy listens on a free loopback port and forwards to target.
func startPeerProxy(t testing.TB, part *partition, target string) *peerProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy listen: %v", err)
	}
	tu, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	pp := &peerProxy{part: part, target: tu, l: l}
	rp := httputil.NewSingleHostReverseProxy(tu)
	rp.FlushInterval = -1 // raft streams: pass every write through at once
	rp.ErrorLog = nil
	rp.ErrorHandler = func(w http.ResponseWriter, r *http.Request, err error) {
		w.WriteHeader(http.StatusBadGateway)
	}
	pp.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		from := r.Header.Get("X-Server-From")
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		part.mu.Lock()
		req := &inflightReq{from: from, dest: pp.dest, cancel: cancel}
		if part.blocked(from, req.dest) {
			part.mu.Unlock()
			// Drop the connection, as a cut network would.
			if hj, ok := w.(http.Hijacker); ok {
				if c, _, err := hj.Hijack(); err == nil {
					c.Close()
					return
				}
			}
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		part.inflight[req] = struct{}{}
		part.mu.Unlock()
		defer func() {
			part.mu.Lock()
			delete(part.inflight, req)
			part.mu.Unlock()
		}()
		rp.ServeHTTP(w, r.WithContext(ctx))
	})}
	go pp.srv.Serve(l)
	t.Cleanup(func() { pp.srv.Close() })
	return pp
}

// setDest records the ID of the member behind the proxy.
func (pp *peerProxy) setDest(id string) {
	pp.part.mu.Lock()
	pp.dest = id
	pp.part.mu.Unlock()
}

func (pp *peerProxy) url() string { return "http://" + pp.l.Addr().String() }
