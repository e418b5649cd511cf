package freeport

import (
	"net"
	"strconv"
	"testing"
)

func TestPickIsBelowTheEphemeralRangeDistinctAndFree(t *testing.T) {
	high := ephemeralLow()
	first, err := Pick(50)
	if err != nil {
		t.Fatal(err)
	}
	more, err := Pick(50)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range append(first, more...) {
		if p < lowest || p >= high {
			t.Errorf("port %d outside [%d, %d)", p, lowest, high)
		}
		if seen[p] {
			t.Errorf("port %d handed out twice", p)
		}
		seen[p] = true
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Errorf("port %d was picked but cannot be listened on: %v", p, err)
			continue
		}
		l.Close()
	}
}

func TestFreeRefusesAHeldPort(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	if free(port) {
		t.Fatalf("free(%d) while a listener holds it", port)
	}
	l.Close()
	if !free(port) {
		t.Fatalf("free(%d) is false after the listener closed", port)
	}
}
