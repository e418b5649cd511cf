package zookeeper

import (
	"testing"
	"time"

	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/storetest"
)

// TestConformance runs the store contract's suite on one ZooKeeper server,
// each case under its own root path. The loss it offers is the lease's
// whole path deleted (contender nodes, record and all, as an operator's
// deleteall would): the tokens are czxids, which the ensemble never
// lowers, so they survive it.
func TestConformance(t *testing.T) {
	srv := shared(t)
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T) func() (store.Store, error) {
			root := uniqueRoot("conf")
			return func() (store.Store, error) {
				return Open(testCtx(t, 20*time.Second), Config{Servers: []string{srv.Addr()}, Root: root})
			}
		},
		MinTTL:            500 * time.Millisecond,
		FixedTTL:          true,
		QueueSessionBound: true,
		LowestPlaceHolds:  true,
		Losses: []storetest.Loss{{
			Name: "the lease's path deleted",
			Lose: func(t *testing.T, open func() (store.Store, error), name string) error {
				st, err := open()
				if err != nil {
					t.Fatal(err)
				}
				defer st.Close()
				if err := deleteTree(rawConn(t, srv.Addr()), st.(*Store).Path(name)); err != nil {
					t.Fatalf("delete the lease's path: %v", err)
				}
				if _, err := st.Get(testCtx(t, 10*time.Second), name); err == nil {
					t.Fatalf("Get after the path was deleted found a record")
				}
				return nil
			},
			Survives: true,
		}},
	})
}
