// Package freeport picks loopback ports for the servers tests start on a
// fixed port: a ZooKeeper member named in its peers' configuration, or a
// server killed and restarted on the same port.
//
// Listening on port 0 and closing the listener is not enough: that port comes
// from the kernel's ephemeral range, the range every outgoing connection takes
// its local port from, so any connection made between the pick and the
// server's bind (or while the server is down for a restart) can take it, and
// the server then fails to bind. Ports below that range are never handed out
// by the kernel; only a process asking for one by number can hold it.
//
// go test runs several test processes at once, each picking at random in
// that range. So that two never pick the same port (one's server down for a
// restart, say, while the other picks), a process that hands a port out
// holds an exclusive lock on a file named after it, in
// $TMPDIR/leasehold-freeport, until it exits; another process skips a port
// whose file is locked.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// lowest is the lowest port Pick hands out: above the well-known and most
// registered service ports.
const lowest = 10000

var (
	mu     sync.Mutex
	handed = map[int]bool{} // ports this process was given: never twice
)

// Pick returns n distinct ports on which 127.0.0.1 accepts a listener now,
// chosen at random below the kernel's ephemeral range, and never one this
// process was given before.
func Pick(n int) ([]int, error) {
	high := ephemeralLow()
	if high-lowest < 1000 {
		return nil, fmt.Errorf("freeport: the ephemeral range starts at %d, leaving too few ports above %d", high, lowest)
	}
	mu.Lock()
	defer mu.Unlock()
	var ports []int
	for tries := 0; len(ports) < n; tries++ {
		if tries > 100*n {
			return nil, fmt.Errorf("freeport: no free port in [%d, %d) after %d tries", lowest, high, tries)
		}
		p := lowest + rand.IntN(high-lowest)
		if handed[p] || !free(p) || !claim(p) {
			continue
		}
		handed[p] = true
		ports = append(ports, p)
	}
	return ports, nil
}

// One returns one port as Pick does.
func One() (int, error) {
	pp, err := Pick(1)
	if err != nil {
		return 0, err
	}
	return pp[0], nil
}

func free(port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// ephemeralLow is where the kernel's ephemeral port range starts: Linux's
// setting, or IANA's 49152 where there is none to read.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 49152
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 49152
	}
	low, err := strconv.Atoi(f[0])
	if err != nil {
		return 49152
	}
	return low
}

// ForTest returns one port as Pick does, or fails t.
func ForTest(t testing.TB) int {
	t.Helper()
	p, err := One()
	if err != nil {
		t.Fatal(err)
	}
	return p
}
