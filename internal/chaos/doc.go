// Package chaos verifies leasehold under real faults, the way Jepsen and
// etcd's robustness tests verify a database: it runs several real node
// processes against a real store, injects faults into them at random (but
// reproducibly from a seed), records what every node and the protected
// resource did, and checks the record. `leasehold verify` is its command.
//
// A run ([Run]) starts node processes ([NodeMain]) that contend for one lease
// with leasehold.NewElector; the leader writes to a fenced register with its
// term (token, and its process as the holder). Between each node and the
// store sits a TCP fault proxy (except on SQLite, a file, where only pauses,
// kills, clocks and twins are injected; a Kubernetes store is proxied through
// a kubeconfig per node when its server is on this host); each node's
// elector runs on a drift clock. Config.Groups runs many such lease groups
// at once on one store, each its own nodes, lease, register and schedule,
// and Config.Overlap injects faults in overlapping bursts. The harness
// pauses (SIGSTOP), kills and restarts nodes, cuts, resets and slows their
// connections, restarts the store (for real through a [StoreControl], or
// emulated at the proxies), skews and drifts their clocks, and starts twins
// with a node's identity, following a schedule drawn from the seed
// (planFaults). The checker (checkHistory) then verifies, from the recorded
// history alone: that the register never accepted a token lower than one it
// had accepted, nor one token from two writers; that no token was granted
// twice, and that a grant observed after another has a higher token; that
// every accepted write came from its token's term; that no two live (not
// frozen) processes ran guarded work at once; that no work ran past its
// safeUntil on its own clock, and no safeUntil was counted from later than
// the request's send as the node's own recorder saw it (not as the library
// reports); that a leader came back within the failover bound after each
// fault healed; and that the register is linearizable (porcupine, per
// resource). It writes a one-line summary and an HTML report.
//
// Config.Mode runs each node on a leasehold.Semaphore (ModeSemaphore: each
// slot's term writes to that slot's resource, the checks above run per slot,
// and at-most-n checks that no more than Slots live works overlap) or a
// leasehold.Scheduler on the node's skewed clock (ModeSchedule: each run
// records its period and writes with the run lease's token, the checks run
// on the run lease, and once-per-period checks that no period ran twice).
//
// # What is and is not guaranteed
//
// A passing run is evidence, not proof: it shows that the faults and timings
// it reached produced no violation. A failing check is a real finding, and the
// checker can fail: its unit tests feed it a hand-made history for each kind
// of violation, and the negative controls (Config.Unfenced: the register's
// token check turned off; Config.BrokenStore: a store that grants before
// expiry, or whose tokens go down) must be caught in every CI run. All nodes run on one host
// and share its wall clock, which is how events of different processes are
// ordered; skew and drift are injected into each node's leasehold.Clock, not
// into the host or the store. A seed fixes the fault schedule, not the
// interleaving of the processes. A store restart is real only where the
// caller supplies a StoreControl; otherwise it is emulated by resetting and
// refusing every proxied connection while the server keeps running. The
// harness needs a Unix system (signals); it only runs against a store on this
// host unless told otherwise, because it cuts that store's connections and
// writes test data (a lease named chaos-<run id>, and on PostgreSQL the
// register's tables).
//
// See README.md for the command, the report and the soak.
package chaos

import "errors"

// ErrInvalid is matched by every error about bad input to the harness: an
// unknown fault, timings that cannot work, a store the harness cannot proxy.
// The message names what was wrong.
var ErrInvalid = errors.New("leasehold/chaos: invalid configuration")

// ErrStore is matched by the error of a run whose store could not be opened
// or reached at the start.
var ErrStore = errors.New("leasehold/chaos: store unavailable")
