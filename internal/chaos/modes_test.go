package chaos

import (
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
)

// modeSpan is how long each semaphore and schedule CI run injects faults:
// the four runs (two modes on two stores) go at once.
const modeSpan = 20 * time.Second

// modeGroups is the number of lease groups of each of those runs.
const modeGroups = 4

// TestChaosModes is the CI run of a semaphore (2 slots on 3 nodes) and of
// a scheduled job (every 2 s) on SQLite and on a Redis of the test's own,
// all four at once: each modeGroups groups with overlapping faults, as the
// stores' volume runs (a 1 s lease, a 550 ms wind-down, a 2 s slack), for
// modeSpan.
func TestChaosModes(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos runs take tens of seconds")
	}
	// Waves of overlapping runs: the stores with their own small servers,
	// then each heavier one alone (a PostgreSQL cluster, an etcd member, a
	// kube-apiserver with its etcd for each of its two runs). With all six
	// heavy runs in one wave, beside the other packages' tests in CI,
	// failover was late in 1 and then 3 of them (the kube-apiserver took
	// 23.7 s to start); alone, the Kubernetes semaphore run passed 3 of 3
	// with its slowest heal-to-leader at 1.64 s against the 4.24 s bound.
	// With PostgreSQL and etcd in one wave, CI's etcd schedule run ran 21
	// of its periods and 138 writes, and failed failover twice; alone here
	// with the same seed, 40-43 periods and 415-451 writes, 3 of 3 clean.
	for _, wave := range [][]string{{"sqlite", "redis"}, {"postgres"}, {"etcd"}, {"kubernetes"}} {
		var wg sync.WaitGroup
		for _, mode := range []string{ModeSemaphore, ModeSchedule} {
			for _, st := range wave {
				// Not t.Parallel, which -parallel (GOMAXPROCS, here 2) would
				// cap: the runs must overlap to keep the package's time.
				wg.Go(func() { t.Run(mode+"/"+st, func(t *testing.T) { modeRun(t, mode, st) }) })
			}
		}
		wg.Wait()
	}
}

// modeRun is one of TestChaosModes's runs.
func modeRun(t *testing.T, mode, storeName string) {
	var c Config
	switch storeName {
	case "sqlite":
		c = baseConfig(t, "sqlite://"+filepath.Join(t.TempDir(), "leases.db"), modeSpan)
		c.Faults = []string{faultPause, faultKill, faultClock, faultTwin}
		c.Register = registerHTTP // as TestChaosSQLite, for the same reason
	case "redis":
		r := startRedis(t)
		c = baseConfig(t, r.URL(), modeSpan)
		c.StoreControl = r // a real restart (SIGKILL, AOF), drawn by the first group
		c.Faults = []string{faultPause, faultKill, faultClock, faultBlackhole, faultReset, faultStoreRestart}
	default:
		// The store's own CI configuration (storeRuns): its server, faults
		// and timings.
		for _, r := range storeRuns {
			if r.name == storeName {
				c = r.setup(t, modeSpan)
			}
		}
		if c.StoreURL == "" {
			t.Fatalf("no mode run on %s", storeName)
		}
		if storeName == "kubernetes" {
			// Eight kinds on a 3 s lease in 20 s do not all come up (the
			// run requires each): the ones that end a holder's belief.
			c.Faults = []string{faultPause, faultKill, faultBlackhole, faultClock}
		}
	}
	c.Mode = mode
	switch mode {
	case ModeSemaphore:
		c.Slots = 2
	case ModeSchedule:
		c.Every = 2 * time.Second
	}
	volume(&c, modeGroups)
	out := runClean(t, c)
	requireKinds(t, out, c.Faults...)
	s := out.Result.Stats
	t.Logf("faults injected: %d in %d groups (%s)", faultTotal(out.Result), len(out.Groups), faultCounts(s.FaultsByKind))
	switch mode {
	case ModeSemaphore:
		// Both slots at work at once at some moment: the check had
		// something to judge.
		if s.MaxLive != c.Slots {
			t.Errorf("at most %d guarded works live at once; want the %d slots used together", s.MaxLive, c.Slots)
		}
	case ModeSchedule:
		if s.Runs < modeGroups*int(modeSpan/c.Every)/2 {
			t.Errorf("%d runs in %d groups of %v: the schedule hardly ran", s.Runs, modeGroups, modeSpan)
		}
	}
}

// The negative controls of the modes, each a short run on SQLite with the
// leader killed (hand-overs): a node using one slot more than the others
// (only at-most-n can see it), a store that grants a held slot (the slot's
// exclusive-work and at-most-n), and a store that forgets each period's
// claim (once-per-period: nodes whose skewed clocks reach a period after
// the first claim expired run it again).
func TestChaosModeBrokenIsCaught(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos runs take seconds")
	}
	// Beside the other negative controls, once the store runs (sequential)
	// are done: a short run of a few processes each.
	t.Parallel()
	for _, tc := range []struct {
		mode, broken string
		checks       []string
	}{
		{ModeSemaphore, brokenExtraSlot, []string{chkAtMostN}},
		{ModeSemaphore, brokenEarlyGrant, []string{chkExclusive, chkAtMostN}},
		{ModeSchedule, brokenForgetClaims, []string{chkOncePerPeriod}},
	} {
		t.Run(tc.mode+"/"+tc.broken, func(t *testing.T) {
			c := baseConfig(t, "sqlite://"+filepath.Join(t.TempDir(), "leases.db"), 4*time.Second)
			c.Mode, c.BrokenStore = tc.mode, tc.broken
			c.Faults = []string{faultKill}
			c.LeaderBias = 1
			c.Timings = leasehold.Timings{LeaseDuration: time.Second}
			c.Slack = 200 * time.Millisecond
			if tc.mode == ModeSchedule {
				// Five nodes, their clocks up to 5 s apart, for four
				// periods: a second claim needs two nodes more than the
				// claim's lease (1 s) apart and the run's lease free
				// (runs take half a period) within the period.
				c.Every = 2 * time.Second
				c.Nodes = 5
				c.Duration = 8 * time.Second
			}
			out := requireCaught(t, c, tc.checks...)
			if tc.broken == brokenExtraSlot {
				// Every slot on its own was held rightly: only the count
				// across the semaphore is wrong. (safe-until and failover,
				// which judge timing, can still fire on a loaded machine.)
				for _, v := range out.Result.Violations {
					switch v.Check {
					case chkExclusive, chkUniqueToken, chkTokenOrder, chkMonotonic, chkWriteOwner, chkLinearizable:
						t.Errorf("extra slot: %s", v)
					}
				}
			}
		})
	}
}
