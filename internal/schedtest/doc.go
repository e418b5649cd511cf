// Package schedtest is the chaos-style check of scheduled jobs on real
// stores: several nodes, each with its own store handle and a wall clock
// skewed by more than a period, run one leasehold.Scheduler, and no period
// may run twice; its negative control, a store that forgets period claims,
// must run some period twice. The check lives in check_test.go (its
// forgetful store embeds store.Store, which only test code may do), and
// stores_test.go runs it on SQLite, PostgreSQL, Redis and Kubernetes (where
// the negative control cannot show a double run: see TestKubernetes).
package schedtest
