package faultproxy

import (
	"bufio"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// echo echoes every connection on loopback until the test ends.
func echo(t *testing.T) string {
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

// through sends msg through a new connection to p and reads one line back.
func through(t *testing.T, p *Proxy, msg string) (string, error) {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
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
	p, err := New(echo(t))
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
