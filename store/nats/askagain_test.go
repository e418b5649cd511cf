package nats

import (
	"bufio"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// dropProxy passes a NATS client's connections to a server and drops the
// first n messages the client publishes to subjects that start with
// prefix, as a clustered server leaves a request unanswered.
type dropProxy struct {
	ln      net.Listener
	target  string
	prefix  string
	left    atomic.Int32
	dropped atomic.Int32
	wg      sync.WaitGroup
}

func startDropProxy(t *testing.T, target, prefix string, n int32) *dropProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &dropProxy{ln: ln, target: strings.TrimPrefix(target, "nats://"), prefix: prefix}
	p.left.Store(n)
	var conns []net.Conn
	var mu sync.Mutex
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, s)
			mu.Unlock()
			p.wg.Add(2)
			go func() { defer p.wg.Done(); io.Copy(c, s); c.Close() }()
			go func() { defer p.wg.Done(); p.forward(s, c); s.Close() }()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		p.wg.Wait()
	})
	return p
}

func (p *dropProxy) url() string { return "nats://" + p.ln.Addr().String() }

// forward copies the client's protocol to the server one operation at a
// time, leaving out the publishes it drops (PUB subject [reply] size, and
// HPUB subject [reply] header-size total-size, each followed by its payload).
func (p *dropProxy) forward(dst io.Writer, src io.Reader) {
	r := bufio.NewReader(src)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		out := []byte(line)
		f := strings.Fields(line)
		if len(f) >= 3 && (strings.EqualFold(f[0], "PUB") || strings.EqualFold(f[0], "HPUB")) {
			size, err := strconv.Atoi(f[len(f)-1])
			if err != nil {
				return
			}
			body := make([]byte, size+2) // the payload and its CRLF
			if _, err := io.ReadFull(r, body); err != nil {
				return
			}
			if strings.HasPrefix(f[1], p.prefix) && p.left.Add(-1) >= 0 {
				p.dropped.Add(1)
				continue
			}
			out = append(out, body...)
		}
		if _, err := dst.Write(out); err != nil {
			return
		}
	}
}

// TestOpenAsksAgainWhenUnanswered: a JetStream API read that Open sends and
// no server answers (a clustered server leaves some unanswered while a new
// stream's group elects its leader) is sent again after a short wait,
// rather than holding Open until its context ends. Here the first two
// stream-info requests are dropped on the way to the server; Open asks a
// third time and opens the bucket. The control is the count of drops: the
// proxy saw and dropped both (without the asking again, Open fails with
// the context's deadline, as TestClusterR3KillMembers once did in CI).
func TestOpenAsksAgainWhenUnanswered(t *testing.T) {
	srv := shared(t)
	bucket := uniqueBucket("ask-again")
	openStore(t, srv.url(), bucket) // makes the bucket
	p := startDropProxy(t, srv.url(), "$JS.API.STREAM.INFO.KV_"+bucket, 2)
	st, err := Open(testCtx(t, 15*time.Second), Config{Servers: []string{p.url()}, Options: Options{Bucket: bucket}})
	if err != nil {
		t.Fatalf("open with two stream-info requests unanswered: %v (dropped %d)", err, p.dropped.Load())
	}
	defer st.Close()
	if n := p.dropped.Load(); n != 2 {
		t.Fatalf("the proxy dropped %d stream-info requests, want 2", n)
	}
	// The store works through the proxy.
	rec, err := st.Acquire(testCtx(t, 10*time.Second), "job", "a", 5*time.Second, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Release(testCtx(t, 10*time.Second), rec.Term); err != nil {
		t.Fatal(err)
	}
}
