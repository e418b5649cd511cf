package chaos

import (
	"bufio"
	"errors"
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

func TestProxyForwardsAndBlackholes(t *testing.T) {
	p, err := newProxy(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	if line, err := roundTrip(t, c, r, "hello", 10*time.Second); err != nil || line != "hello\n" {
		t.Fatalf("through the proxy: %q, %v", line, err)
	}

	// A blackhole keeps the connection open and delivers nothing...
	p.Blackhole()
	_, err = roundTrip(t, c, r, "held", 300*time.Millisecond)
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
	p, err := newProxy(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
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
	c2, err := net.Dial("tcp", p.Addr())
	if err == nil {
		_, err = roundTrip(t, c2, bufio.NewReader(c2), "c", 10*time.Second)
		c2.Close()
	}
	if err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a refusing proxy answered (%v)", err)
	}
	p.Heal()
	c3, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	if line, err := roundTrip(t, c3, bufio.NewReader(c3), "d", 10*time.Second); err != nil || line != "d\n" {
		t.Fatalf("after refusing ended: %q, %v", line, err)
	}
}

func TestProxyRejectsBadTarget(t *testing.T) {
	if _, err := newProxy("no-port"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("err = %v", err)
	}
}

// Overlapping faults heal one at a time: ending a blackhole leaves a
// store restart's refusal in place, and Heal (the control) lifts both.
func TestProxyEndBlackholeKeepsARefusal(t *testing.T) {
	p, err := newProxy(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	p.Refuse(true)
	p.Blackhole()
	p.EndBlackhole()
	c, err := net.Dial("tcp", p.Addr())
	if err == nil {
		_, err = roundTrip(t, c, bufio.NewReader(c), "a", 10*time.Second)
		c.Close()
	}
	if err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("after the blackhole ended, the refusing proxy answered (%v)", err)
	}
	p.Heal()
	c2, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if line, err := roundTrip(t, c2, bufio.NewReader(c2), "b", 10*time.Second); err != nil || line != "b\n" {
		t.Fatalf("after Heal: %q, %v", line, err)
	}
}
