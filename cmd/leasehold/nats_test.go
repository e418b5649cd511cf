package main_test

import (
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"syscall"
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
func TestTwoRunsNATS(t *testing.T) {
	storeURL := "nats://" + embeddedNATS(t) + "/lh-cli-e2e"
	dir := t.TempDir()
	args := append([]string{"--store", storeURL, "--lease", "e2e"}, timingArgs...)
	a := startRun(t, dir, "a", nil, args...)
	waitUntil(t, 20*time.Second, "a's command to start", func() bool { return len(a.record().starts) > 0 })
	b := startRun(t, dir, "b", []string{"E2E_TERM_EXIT=5"}, args...)
	waitUntil(t, 10*time.Second, "b to stand by", func() bool { return strings.Contains(b.log(), "standing by") })
	aStart := a.record().starts[0]

	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killedAt := time.Now()
	waitUntil(t, 10*time.Second, "a's command to die with its run", func() bool { return processGone(aStart.pid) })
	waitUntil(t, 20*time.Second, "b's command to start", func() bool { return len(b.record().starts) > 0 })
	bStart := b.record().starts[0]
	if bStart.token <= aStart.token {
		t.Fatalf("b's token %d, not above a's %d", bStart.token, aStart.token)
	}
	if earliest := killedAt.Add(leaseDuration - renewInterval - retryPeriod); bStart.at.Before(earliest) {
		t.Fatalf("b took over %v after a was killed, before a's lease could expire (lease %v)", bStart.at.Sub(killedAt), leaseDuration)
	}
	ar := a.record()
	if last := ar.ticks[len(ar.ticks)-1].at; !last.Before(bStart.at) {
		t.Fatalf("a's command ticked at %v, after b's command started at %v", last, bStart.at)
	}
	t.Logf("a (token %d) killed; b took over %v later with token %d", aStart.token, bStart.at.Sub(killedAt).Round(time.Millisecond), bStart.token)

	waitUntil(t, 5*time.Second, "b's command to tick", func() bool { return len(b.record().ticks) > 0 })
	code, out, errOut := leasehold(t, nil, "status", "--store", storeURL, "--json", "e2e")
	if code != 0 || !strings.Contains(out, `"held"`) {
		t.Fatalf("status while b holds: exit %d: %s%s", code, out, errOut)
	}
	if err := b.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := b.exitCode(10 * time.Second); code != 5 {
		t.Fatalf("b's run exited %d, want its command's 5\n%s", code, b.log())
	}
	code, out, errOut = leasehold(t, nil, "status", "--store", storeURL, "--json", "e2e")
	if code != 0 {
		t.Fatalf("status: exit %d: %s", code, errOut)
	}
	var views []struct {
		State string `json:"state"`
		Token int64  `json:"token"`
	}
	if err := json.Unmarshal([]byte(out), &views); err != nil || len(views) != 1 {
		t.Fatalf("status --json: %q: %v", out, err)
	}
	if views[0].State != "free" || views[0].Token != bStart.token {
		t.Fatalf("after b's SIGTERM the lease is %+v; want free, with token %d kept", views[0], bStart.token)
	}
}
