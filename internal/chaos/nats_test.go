package chaos

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/freeport"

	"github.com/nats-io/nats-server/v2/server"
)

// natsMember is a current NATS server (2.15, JetStream on) run inside the
// test process, its store in a directory of the test. As the harness's
// StoreControl it shuts down and starts again on the same port and
// JetStream directory: a real server restart, with the bucket recovered
// from disk.
type natsMember struct {
	opts server.Options
	srv  *server.Server
}

func startNATS(t *testing.T) *natsMember {
	t.Helper()
	m := &natsMember{opts: server.Options{
		ServerName: "chaos", Host: "127.0.0.1", Port: freeport.ForTest(t), HTTPPort: -1,
		JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
	}}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Stop(context.Background()) })
	return m
}

func (m *natsMember) URL() string {
	return fmt.Sprintf("nats://127.0.0.1:%d/chaos", m.opts.Port)
}

func (m *natsMember) Start(context.Context) error {
	opts := m.opts // the server keeps and changes its options
	srv, err := server.NewServer(&opts)
	if err != nil {
		return fmt.Errorf("embedded NATS server: %w", err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(30 * time.Second) {
		srv.Shutdown()
		return fmt.Errorf("embedded NATS server not ready within 30s")
	}
	m.srv = srv
	return nil
}

func (m *natsMember) Stop(context.Context) error {
	if m.srv != nil {
		m.srv.Shutdown()
		m.srv.WaitForShutdown()
		m.srv = nil
	}
	return nil
}
