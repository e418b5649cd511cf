package etcdwire

import (
	"net"
	"testing"
	"time"
)

// frameBytes is an HTTP/2 frame of type typ with flags and a payload of n bytes.
func frameBytes(typ, flags byte, n int) []byte {
	b := []byte{byte(n >> 16), byte(n >> 8), byte(n), typ, flags, 0, 0, 0, 1}
	return append(b, make([]byte, n)...)
}

// TestCoalescingConn: a write that ends with an open HEADERS frame is held
// and leaves with the next write in one segment; anything else leaves at
// once; a held frame leaves on its own after holdHeaders.
func TestCoalescingConn(t *testing.T) {
	client, server := net.Pipe()
	defer server.Close()
	c := newCoalescingConn(client)
	defer c.Close()
	reads := make(chan []byte, 10)
	go func() {
		buf := make([]byte, 1<<16)
		for {
			n, err := server.Read(buf)
			if err != nil {
				close(reads)
				return
			}
			reads <- append([]byte(nil), buf[:n]...)
		}
	}()
	next := func(what string) []byte {
		t.Helper()
		select {
		case b := <-reads:
			return b
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: nothing written", what)
			return nil
		}
	}
	preface := append([]byte(clientPreface), frameBytes(0x4, 0, 6)...) // SETTINGS
	if _, err := c.Write(preface); err != nil {
		t.Fatal(err)
	}
	if got := next("preface"); len(got) != len(preface) {
		t.Fatalf("the preface: %d bytes, want %d", len(got), len(preface))
	}
	// A request: HEADERS (open), then DATA with END_STREAM: one segment.
	h := frameBytes(frameHeaders, flagEndHeaders, 20)
	d := frameBytes(0x0, flagEndStream, 12)
	c.Write(h)
	c.Write(d)
	if got := next("request"); len(got) != len(h)+len(d) {
		t.Fatalf("the request left in a segment of %d bytes, want %d (HEADERS and DATA together)", len(got), len(h)+len(d))
	}
	// The negative control: HEADERS with END_STREAM (no body) leaves at once.
	he := frameBytes(frameHeaders, flagEndHeaders|flagEndStream, 20)
	c.Write(he)
	start := time.Now()
	if got := next("headers-only request"); len(got) != len(he) {
		t.Fatalf("a headers-only request: %d bytes, want %d", len(got), len(he))
	}
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Errorf("a headers-only request waited %v", d)
	}
	// An open HEADERS frame with no DATA after it leaves on its own.
	c.Write(h)
	if got := next("held headers"); len(got) != len(h) {
		t.Fatalf("held headers: %d bytes, want %d", len(got), len(h))
	}
	// A frame split over writes is followed: the split HEADERS is held only
	// once complete.
	c.Write(h[:5])
	if got := next("first part"); len(got) != 5 {
		t.Fatalf("the first part of a split frame: %d bytes", len(got))
	}
	c.Write(h[5:])
	c.Write(d)
	if got := next("rest"); len(got) != len(h)-5+len(d) {
		t.Fatalf("the rest of a split frame and its DATA: %d bytes, want %d", len(got), len(h)-5+len(d))
	}
}
