package chaos

import (
	"context"
	"testing"
	"time"

	"github.com/leasehold/leasehold/store/zookeeper/zktest"
)

// zkServer is a standalone ZooKeeper server from the installed package
// (store/zookeeper/zktest: tick 100 ms, so the 2 s leases of a chaos run are
// ten ticks). As the harness's StoreControl it kills the server (SIGKILL,
// by its PID) and starts it again on the same data directory and port: a
// real server restart, which keeps zxids and sessions.
type zkServer struct{ s *zktest.Server }

func (z zkServer) Stop(context.Context) error {
	z.s.Kill()
	return nil
}

func (z zkServer) Start(context.Context) error {
	if err := z.s.Start(); err != nil {
		return err
	}
	return z.s.WaitServing(30 * time.Second)
}

func TestChaosZooKeeper(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos runs take tens of seconds")
	}
	srv := zktest.Standalone(t, zktest.Options{})
	c := baseConfig(t, "zookeeper://"+srv.Addr()+"/chaos", 28*time.Second)
	c.StoreControl = zkServer{srv}
	// The faults that end a leader's session one way or another, aimed at
	// whichever node leads: its process paused (its session expires while
	// it sleeps), killed, cut off from the server, and the server restarted.
	c.Faults = []string{faultPause, faultKill, faultBlackhole, faultStoreRestart}
	c.LeaderBias = 1
	out := runClean(t, c)
	requireKinds(t, out, c.Faults...)
}
