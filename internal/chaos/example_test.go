package chaos

import (
	"fmt"
	"time"
)

// A fault schedule is a pure function of its configuration and seed.
func Example_plan() {
	plan, err := planFaults(scheduleConfig{
		Seed:    42,
		Faults:  []string{faultPause, faultKill, faultBlackhole},
		Span:    30 * time.Second,
		Nodes:   3,
		Timings: timingsRecord{LeaseDuration: 2 * time.Second, RenewDeadline: 1400 * time.Millisecond, RenewInterval: 400 * time.Millisecond, RetryPeriod: 300 * time.Millisecond, Jitter: 0.2},
		Slack:   time.Second,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, p := range plan {
		fmt.Println(p)
	}
	// Output:
	// 825ms pause the leader for 3.88s
	// 8.64s kill the leader for 753ms
	// 13.177s blackhole the leader for 3.93s
	// 20.562s blackhole node 2 for 3.531s
}

// The checker reads a history and says which property broke. Here a
// register accepted token 1 after token 2: the stale write a fence exists to
// refuse.
func Example_check() {
	sec := func(s float64) int64 { return int64(s * 1e9) }
	ev := func(node string, s float64, e event) event {
		e.Node, e.Inc, e.Wall, e.Clock = node, 1, sec(s), sec(s)
		return e
	}
	h := &history{
		Timings: timingsRecord{LeaseDuration: 2 * time.Second, RenewDeadline: 1400 * time.Millisecond, RenewInterval: 400 * time.Millisecond, RetryPeriod: 300 * time.Millisecond},
		Start:   0, End: sec(5),
		Events: []event{
			ev("n1", 1, event{Kind: evAcquired, Token: 1, SafeUntil: sec(2.4)}),
			ev("n1", 1, event{Kind: evWorkStart, Token: 1}),
			ev("n2", 3, event{Kind: evAcquired, Token: 2, SafeUntil: sec(4.4)}),
			ev("n2", 3, event{Kind: evWorkStart, Token: 2}),
		},
		Register: []registerEntry{
			{Seq: 1, Resource: "r0", Token: 2, Value: "b", Writer: "n2.1", Result: writeAccepted},
			{Seq: 2, Resource: "r0", Token: 1, Value: "a", Writer: "n1.1", Result: writeAccepted},
		},
	}
	r := checkHistory(h, checkOptions{})
	for _, c := range r.Checks {
		if c.Name == chkMonotonic {
			fmt.Println(c.Name, "violations:", c.Violations)
		}
	}
	// Output:
	// register-monotonic violations: 1
}
