package main_test

import (
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// embeddedNATS runs a current NATS server (JetStream on) in the test
// process and returns its client address.
func embeddedNATS(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: port, HTTPPort: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(30 * time.Second) {
		t.Fatal("embedded NATS server not ready within 30s")
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	return fmt.Sprintf("127.0.0.1:%d", port)
}

// The standby is woken by the KV watch when the holder releases.
func TestHandOffWokenNATS(t *testing.T) {
	handOff(t, "nats://"+embeddedNATS(t)+"/lh-cli-handoff")
}

// TestTwoRunsNATS: two `leasehold run` on one lease in a NATS KV bucket;
// kill -9 the leader; the other takes over only once the server has expired
// the killed leader's key, with a higher token (the key's revision); SIGTERM
// to the new leader is forwarded, and it releases: status shows the lease
// free with the last token.
func TestTwoRunsNATS(t *testing.T) { twoRuns(t, "nats://"+embeddedNATS(t)+"/lh-cli-e2e") }
