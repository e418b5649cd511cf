package zookeeper_test

import (
	"context"
	"log"
	"net/url"
	"os"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store/zookeeper"
)

// An elector on a ZooKeeper ensemble, whose leader fences its writes to
// ZooKeeper itself with the term's node. (Compiled, not run: it needs an
// ensemble.)
func Example() {
	ctx := context.Background()
	st, err := zookeeper.Open(ctx, zookeeper.Config{
		Servers:  []string{"zk-0:2181", "zk-1:2181", "zk-2:2181"},
		Root:     "/services/billing/leases",
		Username: "billing", Password: os.Getenv("ZK_PASSWORD"),
	})
	if err != nil {
		log.Fatal(err) // unreachable servers, a root it may not read
	}
	defer st.Close()
	conn, _, err := zk.Connect([]string{"zk-0:2181", "zk-1:2181", "zk-2:2181"}, 15*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	e, err := leasehold.NewElector(st, "billing", leasehold.Config{})
	if err != nil {
		log.Fatal(err) // timings the ensemble cannot keep, named
	}
	e.Run(ctx, func(ctx context.Context, l *leasehold.Lease) error {
		node, err := st.TermNode(ctx, l.Term())
		if err != nil {
			return err
		}
		// Applies only while this term holds: its node exists.
		_, err = conn.Multi(&zk.CheckVersionRequest{Path: node, Version: 0},
			&zk.SetDataRequest{Path: "/services/billing/config", Data: []byte("v2"), Version: -1})
		return err
	})
}

// Opening the store by URL, as the leasehold command does.
func ExampleOpenURL() {
	u, _ := url.Parse("zookeeper://zk-0:2181,zk-1:2181,zk-2:2181/services/billing/leases?dial_timeout=10s")
	st, err := zookeeper.OpenURL(context.Background(), u)
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
}
