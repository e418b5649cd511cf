package chaos

import (
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
)

// shortLease are the volume runs' timings: a 1 s lease, renewed every
// 200 ms, with an 800 ms renew deadline and a 550 ms wind-down, the time a
// leader's work has to stop before safeUntil. With a hundred processes on
// two cores a process can wait hundreds of milliseconds for a CPU, and a
// wait longer than the wind-down carries a write past safeUntil, which the
// safe-until check reports (rightly: the work did run late). The 166 ms
// wind-down a 1 s lease scales to was reported within a minute; 400 ms
// was, a few times in 250 faults, on a machine loaded by other suites. A
// renew deadline of 800 ms keeps the clock faults' drift below 1 -
// 800/1000: volumeDrift.
var shortLease = leasehold.Timings{LeaseDuration: time.Second, RenewDeadline: 800 * time.Millisecond,
	RenewInterval: 200 * time.Millisecond, RetryPeriod: 150 * time.Millisecond, Jitter: 0.2, WindDown: 550 * time.Millisecond}

// volumeWindDown is the wind-down of every volume run (see shortLease).
const volumeWindDown = 550 * time.Millisecond

// volumeDrift bounds clock-rate faults under shortLease.
const volumeDrift = 0.15

// ciVolume is the least number of faults every store's run injects in the
// default (CI) run: the test fails below it.
const ciVolume = 200

// volume makes c a run of many lease groups with overlapping faults: groups
// groups of c.Nodes nodes (default 3), bursts of up to one fault per node,
// and a 1 s lease unless c sets its own timings. The leaders write every
// 50 ms instead of 10 ms: a register write is the run's main load, and
// forty processes share two cores in CI.
func volume(c *Config, groups int) {
	c.Groups = groups
	if c.Nodes == 0 {
		c.Nodes = 3
	}
	c.Overlap = c.Nodes
	if c.Timings == (leasehold.Timings{}) {
		c.Timings = shortLease
		c.MaxDrift = volumeDrift
	}
	c.Timings.WindDown = volumeWindDown
	c.WriteInterval = 50 * time.Millisecond
	// A leader must be back within the lease, a retry and the slack of
	// each heal. With a hundred processes on two cores the first runs
	// with the default 1 s slack missed it by a little (in one or two of
	// 250 faults, on MySQL and ZooKeeper); 2 s keeps the failover check a
	// check of the store and the library, not of the machine's load.
	c.Slack = max(c.Slack, 2*time.Second) // a store's run may need more (PostgreSQL's)
	c.UntilFaults = soakFaults()
	if c.UntilFaults > 0 {
		// A soak's groups each record tens of thousands of writes.
		c.LinearizeTimeout = 10 * time.Minute
	}
}

// soakFaults is LEASEHOLD_CHAOS_SOAK_FAULTS: the number of faults a soak
// run injects per store (0: the default, CI-sized run).
func soakFaults() int {
	n, _ := strconv.Atoi(os.Getenv("LEASEHOLD_CHAOS_SOAK_FAULTS"))
	return n
}

// requireVolume fails the test when the run injected fewer than n faults.
func requireVolume(t *testing.T, out *Outcome, n int) {
	t.Helper()
	got := faultTotal(out.Result)
	t.Logf("faults injected: %d in %d groups (%s)", got, max(1, len(out.Groups)), faultCounts(out.Result.Stats.FaultsByKind))
	if soak := soakFaults(); soak > 0 {
		n = soak
	}
	if os.Getenv("LEASEHOLD_CHAOS_SOAK") != "" && soakFaults() == 0 {
		return // a soak of a given length: no count to reach
	}
	if got < n {
		t.Errorf("the run injected %d faults; it must inject at least %d", got, n)
	}
}
