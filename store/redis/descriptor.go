package redis

import "github.com/leasehold/leasehold/store"

// Descriptor describes this store to the leasehold command, its chaos
// harness and the README (see store/registry).
var Descriptor = store.Descriptor{
	Name:        "Redis",
	Schemes:     Schemes,
	Open:        OpenURL,
	ExampleURL:  "redis://host:6379/0",
	Reach:       store.ReachNetwork,
	DefaultPort: "6379",
	Params:      []string{"prefix", "password_file", "ca_file", "tokens", "token_floor"},
	Doc: store.Doc{
		README: "store/redis/README.md",
		URLs:   []string{"redis://…?prefix=app:", "rediss://…"},
		Token:  "a counter beside the lock key, never below the server's clock (µs)",
		Expiry: "Redis `PX`",
		Wake:   "pub/sub (~0.1 ms)",
		Notes:  "best-effort work: Redis can lose its last writes; interoperates with redislock/redsync",
	},
}
