// Package chaos verifies leasehold under real faults, the way Jepsen and
// etcd's robustness tests verify a database: it runs several real node
// processes against a real store, injects faults into them at random (but
// reproducibly from a seed), records what every node and the protected
// resource did, and checks the record.
//
// See README.md for what a run proves and how to read its report.
package chaos

import "errors"

// ErrInvalid is matched by every error about bad input to the harness: an
// unknown fault, timings that cannot work, a store the harness cannot proxy.
// The message names what was wrong.
var ErrInvalid = errors.New("leasehold/chaos: invalid configuration")

// ErrStore is matched by the error of a run whose store could not be opened
// or reached at the start.
var ErrStore = errors.New("leasehold/chaos: store unavailable")
