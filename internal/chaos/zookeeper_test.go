package chaos

import (
	"context"
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
