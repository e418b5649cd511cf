package zookeeper

import "github.com/leasehold/leasehold/store"

// Descriptor describes this store to the leasehold command, its chaos
// harness and the README (see store/registry).
var Descriptor = store.Descriptor{
	Name:        "ZooKeeper",
	Schemes:     Schemes,
	Open:        OpenURL,
	ExampleURL:  "zookeeper://host:2181/root",
	Reach:       store.ReachNetwork,
	DefaultPort: "2181",
	Params:      []string{"acl", "dial_timeout"},
	Doc: store.Doc{
		README: "store/zookeeper/README.md",
		URLs:   []string{"zookeeper://host:2181,host:2182/root"},
		Token:  "the contender node's czxid",
		Expiry: "the ZooKeeper session timeout (and the holder's own deadline)",
		Wake:   "a watch on the predecessor node",
		Notes:  "consensus-backed; interoperates with `zk.Lock` and Curator's `InterProcessMutex`",
	},
}
