package etcd

import "github.com/leasehold/leasehold/store"

// Descriptor describes this store to the leasehold command, its chaos
// harness and the README (see store/registry).
var Descriptor = store.Descriptor{
	Name:        "etcd",
	Schemes:     Schemes,
	Open:        OpenURL,
	ExampleURL:  "etcd://host:2379",
	Reach:       store.ReachNetwork,
	DefaultPort: "2379",
	Params:      []string{"prefix", "cacert", "cert", "key", "server_name", "dial_timeout"},
	Doc: store.Doc{
		README: "store/etcd/README.md",
		URLs:   []string{"etcd://host:2379,host:2379/prefix"},
		Token:  "the key's create revision",
		Expiry: "the etcd lease TTL",
		Wake:   "a watch from the next revision",
		Notes:  "consensus-backed; interoperates with `etcdctl lock`/`elect`",
	},
}
