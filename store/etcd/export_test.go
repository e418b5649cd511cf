package etcd

// SharedEndpoint is the client URL of the embedded etcd member the tests and
// the examples share (started on first use, stopped by TestMain).
func SharedEndpoint() string { return exampleEndpoint() }

// UniquePrefix is a key prefix no other test or example uses.
func UniquePrefix(tag string) string { return uniquePrefix(tag) }
