package faultproxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// echoServer echoes every line on loopback until the test ends.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

func roundTrip(t *testing.T, c net.Conn, r *bufio.Reader, msg string, within time.Duration) (string, error) {
	t.Helper()
	if _, err := c.Write([]byte(msg + "\n")); err != nil {
		return "", err
	}
	c.SetReadDeadline(time.Now().Add(within))
	defer c.SetReadDeadline(time.Time{})
	line, err := r.ReadString('\n')
	return line, err
}

// proxied starts a proxy to an echo server and connects through it; both
// end with the test.
func proxied(t *testing.T) (*Proxy, net.Conn, *bufio.Reader) {
	t.Helper()
	p, err := New(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return p, c, bufio.NewReader(c)
}

func TestProxyForwardsAndBlackholes(t *testing.T) {
	p, c, r := proxied(t)
	if line, err := roundTrip(t, c, r, "hello", 10*time.Second); err != nil || line != "hello\n" {
		t.Fatalf("through the proxy: %q, %v", line, err)
	}

	// A blackhole keeps the connection open and delivers nothing...
	p.Blackhole()
	_, err := roundTrip(t, c, r, "held", 300*time.Millisecond)
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("during a blackhole the read returned %v, want a timeout", err)
	}
	// ...and what was sent during it lands after it heals, as with TCP.
	p.Heal()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if line, err := r.ReadString('\n'); err != nil || line != "held\n" {
		t.Fatalf("after healing: %q, %v", line, err)
	}
	c.SetReadDeadline(time.Time{})

	// Latency: a round trip takes at least the added latency.
	p.SetLatency(200 * time.Millisecond)
	start := time.Now()
	if _, err := roundTrip(t, c, r, "slow", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Fatalf("round trip with +200ms latency took %v", d)
	}
	p.Heal()
}

func TestProxyResetAndRefuse(t *testing.T) {
	p, c, r := proxied(t)
	if _, err := roundTrip(t, c, r, "a", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	p.Reset()
	if _, err := roundTrip(t, c, r, "b", 10*time.Second); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("after a reset the connection answered (%v)", err)
	}
	if acc, reset := p.Stats(); acc != 1 || reset < 1 {
		t.Fatalf("stats: accepted %d, reset %d", acc, reset)
	}

	p.Refuse(true)
	if _, err := through(t, p, "c\n"); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a refusing proxy answered (%v)", err)
	}
	p.Heal()
	if line, err := through(t, p, "d\n"); err != nil || line != "d\n" {
		t.Fatalf("after refusing ended: %q, %v", line, err)
	}
}

// Overlapping faults heal one at a time: ending a blackhole leaves a
// store restart's refusal in place, and Heal (the control) lifts both.
func TestProxyEndBlackholeKeepsARefusal(t *testing.T) {
	p, err := New(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	p.Refuse(true)
	p.Blackhole()
	p.EndBlackhole()
	if _, err := through(t, p, "a\n"); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("after the blackhole ended, the refusing proxy answered (%v)", err)
	}
	p.Heal()
	if line, err := through(t, p, "b\n"); err != nil || line != "b\n" {
		t.Fatalf("after Heal: %q, %v", line, err)
	}
}

// through sends msg through a new connection to p and reads one line back
// (a refused dial is its error).
func through(t *testing.T, p *Proxy, msg string) (string, error) {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		return "", err
	}
	defer c.Close()
	if _, err := c.Write([]byte(msg)); err != nil {
		return "", err
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	return bufio.NewReader(c).ReadString('\n')
}

// TestRewriteHello: the first message of each connection is read by the
// rewriter, exactly, and what it returns goes to the target in its place;
// the rest of the stream passes as it is. A rewriter's error closes the
// connection.
func TestRewriteHello(t *testing.T) {
	p, err := New(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	// Control: without a rewriter the bytes pass as they are.
	if line, err := through(t, p, "abcde rest\n"); err != nil || line != "abcde rest\n" {
		t.Fatalf("without a rewriter: %q, %v", line, err)
	}
	p.RewriteHello(func(r io.Reader) ([]byte, error) {
		b := make([]byte, 5)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, err
		}
		return []byte("HELLO(" + string(b) + ")"), nil
	})
	if line, err := through(t, p, "abcde rest\n"); err != nil || line != "HELLO(abcde) rest\n" {
		t.Fatalf("rewritten: %q, %v", line, err)
	}
	p.RewriteHello(func(r io.Reader) ([]byte, error) { return nil, errors.New("not a hello") })
	if line, err := through(t, p, "abcde rest\n"); err == nil {
		t.Fatalf("a refused hello: read %q, want the connection closed", line)
	}
}

// TestFilterClient: a client filter carries what clients send, connection
// by connection (numbered in order), and may drop or rewrite it; what it
// writes still passes the proxy's faults (a blackhole holds it); a
// filter's error closes the connection.
func TestFilterClient(t *testing.T) {
	p, c, r := proxied(t)
	// Control: without a filter the line passes as it is.
	if line, err := roundTrip(t, c, r, "drop me", 5*time.Second); err != nil || line != "drop me\n" {
		t.Fatalf("without a filter: %q, %v", line, err)
	}
	p.FilterClient(func(conn int, dst io.Writer, src io.Reader) error {
		lines := bufio.NewReader(src)
		for {
			line, err := lines.ReadString('\n')
			if err != nil {
				return err
			}
			switch {
			case line == "drop me\n":
				continue
			case line == "fail\n":
				return errors.New("a line the filter refuses")
			}
			if _, err := fmt.Fprintf(dst, "%d:%s", conn, line); err != nil {
				return err
			}
		}
	})
	// The connection made before the filter keeps its plain copy.
	if line, err := roundTrip(t, c, r, "old", 5*time.Second); err != nil || line != "old\n" {
		t.Fatalf("a connection from before the filter: %q, %v", line, err)
	}
	// The proxy has served one connection; the next ones are 2 and 3.
	for _, conn := range []int{2, 3} {
		if line, err := through(t, p, "drop me\nkeep\n"); err != nil || line != fmt.Sprintf("%d:keep\n", conn) {
			t.Fatalf("connection %d through the filter: %q, %v; want the first line dropped and the second numbered", conn, line, err)
		}
	}
	// A blackhole holds what the filter wrote.
	c2, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	r2 := bufio.NewReader(c2)
	if line, err := roundTrip(t, c2, r2, "before", 5*time.Second); err != nil || line != "4:before\n" {
		t.Fatalf("before the blackhole: %q, %v", line, err)
	}
	p.Blackhole()
	if line, err := roundTrip(t, c2, r2, "held", 300*time.Millisecond); err == nil {
		t.Fatalf("in a blackhole, the filter's output came back: %q", line)
	}
	p.Heal()
	c2.SetReadDeadline(time.Now().Add(5 * time.Second))
	if line, err := r2.ReadString('\n'); err != nil || line != "4:held\n" {
		t.Fatalf("after the blackhole healed: %q, %v; want the held line", line, err)
	}
	if line, err := through(t, p, "fail\n"); err == nil {
		t.Fatalf("after the filter's error: read %q, want the connection closed", line)
	}
}
