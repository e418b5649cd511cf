package nats

import "github.com/leasehold/leasehold/store"

// Descriptor describes this store to the leasehold command, its chaos
// harness and the README (see store/registry).
var Descriptor = store.Descriptor{
	Name:        "NATS JetStream KV",
	Schemes:     Schemes,
	Open:        OpenURL,
	ExampleURL:  "nats://host:4222/leases",
	Reach:       store.ReachNetwork,
	DefaultPort: "4222",
	Params:      urlParams,
	Doc: store.Doc{
		README: "store/nats/README.md",
		Note:   "(server ≥ 2.11)",
		URLs:   []string{"nats://host:4222,host:4222/bucket"},
		Token:  "the key's revision at the grant (the bucket's stream sequence)",
		Expiry: "the server's per-key TTL (`Nats-TTL`)",
		Wake:   "a KV watch: releases and the server's expiry markers",
		Notes:  "tokens survive restarts, R3 member loss, key and bucket purges, and the bucket deleted and made again by leasehold (made again by hand: detected, not survived)",
	},
}
