package chaos

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"time"
)

// The kinds of fault the harness injects.
const (
	// faultPause freezes a node with SIGSTOP for longer than the lease, then
	// resumes it with SIGCONT.
	faultPause = "pause"
	// faultKill kills a node with SIGKILL and starts it again a little later.
	faultKill = "kill"
	// faultBlackhole cuts a node off from the store (its proxy stops
	// forwarding but keeps the connections open) for longer than the lease.
	faultBlackhole = "blackhole"
	// faultReset closes every connection between a node and the store.
	faultReset = "reset"
	// faultLatency adds latency between a node and the store for a while.
	faultLatency = "latency"
	// faultStoreRestart stops the store and starts it again (a real restart
	// where the harness runs the store, else an emulation: every proxy resets
	// its connections and refuses new ones while the store is "down").
	faultStoreRestart = "store-restart"
	// faultClock makes a node's clock run fast or slow for a while, after a
	// forward step.
	faultClock = "clock"
	// faultTwin starts a second process with the same configured identity as
	// a node, for a while.
	faultTwin = "twin"
)

// AllFaults lists every fault kind.
var AllFaults = []string{faultPause, faultKill, faultBlackhole, faultReset, faultLatency, faultStoreRestart, faultClock, faultTwin}

// networkFaults need a store reached over TCP (through the fault proxy).
var networkFaults = []string{faultBlackhole, faultReset, faultLatency, faultStoreRestart}

func isNetworkFault(k string) bool {
	for _, n := range networkFaults {
		if n == k {
			return true
		}
	}
	return false
}

// ParseFaults parses a comma-separated list of fault kinds ("all" means
// every kind). Unknown names are an error naming the known ones.
func ParseFaults(s string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if f == "all" {
			for _, k := range AllFaults {
				if !seen[k] {
					seen[k] = true
					out = append(out, k)
				}
			}
			continue
		}
		known := false
		for _, k := range AllFaults {
			if k == f {
				known = true
			}
		}
		if !known {
			return nil, fmt.Errorf("%w: unknown fault %q; known faults: %s (or all)", ErrInvalid, f, strings.Join(AllFaults, ", "))
		}
		if !seen[f] {
			seen[f] = true
			out = append(out, f)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no faults named", ErrInvalid)
	}
	return out, nil
}

// Planned is one fault of a schedule.
type Planned struct {
	_ [0]func() // not comparable: spares the binary an equality function

	// At is when the fault begins, from the start of the fault phase.
	At   time.Duration `json:"at"`
	Kind string        `json:"kind"`
	// Leader: aim at whichever node leads when the fault begins. Otherwise,
	// or when nobody leads, aim at node index Node (0-based).
	Leader bool `json:"leader"`
	Node   int  `json:"node"`
	// Duration is how long the fault lasts (the downtime for kill and
	// store-restart; zero for reset).
	Duration time.Duration `json:"duration"`
	// Latency is the added round-trip latency (latency faults).
	Latency time.Duration `json:"latency,omitempty"`
	// Rate and Step are the clock's new rate and forward step (clock faults).
	Rate float64       `json:"rate,omitempty"`
	Step time.Duration `json:"step,omitempty"`
	// Burst numbers the faults injected together: the faults of one burst
	// overlap, and the next burst waits until every fault of this one has
	// healed and a quiet period has passed.
	Burst int `json:"burst"`
}

func (p Planned) String() string {
	who := fmt.Sprintf("node %d", p.Node+1)
	if p.Leader {
		who = "the leader"
	}
	if p.Kind == faultStoreRestart {
		who = "the store"
	}
	s := fmt.Sprintf("%v %s %s", p.At.Round(time.Millisecond), p.Kind, who)
	switch p.Kind {
	case faultReset:
	case faultLatency:
		s += fmt.Sprintf(" +%v for %v", p.Latency.Round(time.Millisecond), p.Duration.Round(time.Millisecond))
	case faultClock:
		s += fmt.Sprintf(" rate %.3f step +%v for %v", p.Rate, p.Step.Round(time.Millisecond), p.Duration.Round(time.Millisecond))
	default:
		s += fmt.Sprintf(" for %v", p.Duration.Round(time.Millisecond))
	}
	return s
}

// scheduleConfig is what a schedule is drawn from.
type scheduleConfig struct {
	Seed    uint64
	Faults  []string
	Span    time.Duration // the length of the fault phase
	Nodes   int
	Timings timingsRecord
	Slack   time.Duration
	// MaxDrift bounds clock-rate changes: rates are drawn from
	// [1-MaxDrift, 1+MaxDrift].
	MaxDrift float64
	// LeaderBias is the share of node faults aimed at the leader (default 0.7).
	LeaderBias float64
	// Overlap is the most faults of one burst (default 1: one fault at a
	// time). A burst of k faults starts them within three quarters of a
	// lease of each other, on different nodes, so that they overlap.
	Overlap int
}

// faultLength is the longest a fault of kind k can last under t.
func faultLength(k string, t timingsRecord) time.Duration {
	ld := t.LeaseDuration
	switch k {
	case faultPause, faultBlackhole:
		return ld * 2
	case faultKill:
		return ld
	case faultReset:
		return 0
	case faultLatency:
		return ld * 2
	case faultStoreRestart:
		return ld * 3 / 2
	case faultClock:
		return ld * 2
	case faultTwin:
		return ld * 5 / 2
	}
	return ld * 4
}

// minSpan is the shortest fault phase that fits one fault of each of kinds,
// each followed by its quiet period.
func minSpan(kinds []string, t timingsRecord, slack time.Duration) time.Duration {
	var longest time.Duration
	for _, k := range kinds {
		longest = max(longest, faultLength(k, t))
	}
	return longest + quietPeriod(t, slack) + t.LeaseDuration/2
}

// quietPeriod is the least time between one fault's healing and the next
// fault: the failover bound, so that each heal is judged on its own.
func quietPeriod(t timingsRecord, slack time.Duration) time.Duration {
	return failoverBound(t, slack)
}

// planFaults draws a fault schedule from the seed: faults one after another, each
// followed by a quiet period of at least the failover bound, every kind once
// (in a random order) before any kind repeats. The same
// configuration and seed always give the same schedule. (Which node is "the
// leader" when a fault begins is decided by the real run.)
func planFaults(pc scheduleConfig) ([]Planned, error) {
	if len(pc.Faults) == 0 {
		return nil, fmt.Errorf("%w: no faults to plan", ErrInvalid)
	}
	if pc.Nodes < 1 {
		return nil, fmt.Errorf("%w: %d nodes", ErrInvalid, pc.Nodes)
	}
	if min := minSpan(pc.Faults, pc.Timings, pc.Slack); pc.Span < min {
		return nil, fmt.Errorf("%w: the fault phase of %v is too short: with a %v lease, the faults %s need at least %v (the longest fault plus a quiet period of leaseDuration + retryPeriod + slack); run longer or with a shorter lease",
			ErrInvalid, pc.Span, pc.Timings.LeaseDuration, strings.Join(pc.Faults, ","), min)
	}
	bias := pc.LeaderBias
	if bias == 0 {
		bias = 0.7
	}
	rng := rand.New(rand.NewPCG(pc.Seed, pc.Seed^0x9e3779b97f4a7c15))
	t := pc.Timings
	ld := t.LeaseDuration
	frac := func(lo, hi float64) time.Duration { // a random share of the lease
		return time.Duration((lo + (hi-lo)*rng.Float64()) * float64(ld))
	}
	quiet := quietPeriod(t, pc.Slack)
	// Kinds come from a shuffled bag: every kind once before any repeats,
	// so that a short run with a few kinds injects each of them.
	var bag []string
	next := func() string {
		if len(bag) == 0 {
			for _, i := range rng.Perm(len(pc.Faults)) {
				bag = append(bag, pc.Faults[i])
			}
		}
		k := bag[0]
		bag = bag[1:]
		return k
	}
	draw := func(at time.Duration, k string) Planned {
		p := Planned{At: at, Kind: k, Leader: rng.Float64() < bias, Node: rng.IntN(pc.Nodes)}
		drawFault(&p, rng, frac, t, pc.MaxDrift)
		return p
	}
	if pc.Overlap > 1 {
		return planBursts(pc, rng, next, draw, frac, quiet), nil
	}
	var out []Planned
	at := frac(0, 0.5)
	for {
		k := next()
		p := Planned{At: at, Kind: k, Leader: rng.Float64() < bias, Node: rng.IntN(pc.Nodes)}
		switch k {
		case faultPause, faultBlackhole:
			p.Duration = frac(1.25, 2)
		case faultKill:
			p.Duration = frac(0.25, 1)
		case faultReset:
		case faultLatency:
			p.Duration = frac(1, 2)
			p.Latency = time.Duration((0.1 + 0.5*rng.Float64()) * float64(t.RenewDeadline))
		case faultStoreRestart:
			p.Leader = false
			p.Duration = frac(0.5, 1.5)
		case faultClock:
			p.Duration = frac(1, 2)
			p.Rate = 1 + pc.MaxDrift*(2*rng.Float64()-1)
			p.Step = time.Duration(rng.Float64() * float64(t.LeaseDuration-t.RenewDeadline) / 2)
		case faultTwin:
			p.Duration = frac(1.5, 2.5)
		}
		end := at + p.Duration + quiet
		if end > pc.Span {
			break
		}
		p.Burst = len(out)
		out = append(out, p)
		at = end + frac(0, 0.5)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].At < out[j].At })
	return out, nil
}

// drawFault draws the kind-specific figures of p (its duration, latency,
// clock rate and step) as the one-at-a-time planner does.
func drawFault(p *Planned, rng *rand.Rand, frac func(lo, hi float64) time.Duration, t timingsRecord, maxDrift float64) {
	switch p.Kind {
	case faultPause, faultBlackhole:
		p.Duration = frac(1.25, 2)
	case faultKill:
		p.Duration = frac(0.25, 1)
	case faultReset:
	case faultLatency:
		p.Duration = frac(1, 2)
		p.Latency = time.Duration((0.1 + 0.5*rng.Float64()) * float64(t.RenewDeadline))
	case faultStoreRestart:
		p.Leader = false
		p.Duration = frac(0.5, 1.5)
	case faultClock:
		p.Duration = frac(1, 2)
		p.Rate = 1 + maxDrift*(2*rng.Float64()-1)
		p.Step = time.Duration(rng.Float64() * float64(t.LeaseDuration-t.RenewDeadline) / 2)
	case faultTwin:
		p.Duration = frac(1.5, 2.5)
	}
}

// planBursts draws overlapping faults: bursts of 1 to Overlap faults (at
// most one per node, and at most one store restart), started within three
// quarters of a lease of each other, each burst followed by a quiet period
// of at least the failover bound after its last fault heals.
func planBursts(pc scheduleConfig, rng *rand.Rand, next func() string, draw func(time.Duration, string) Planned,
	frac func(lo, hi float64) time.Duration, quiet time.Duration) []Planned {
	var out []Planned
	at := frac(0, 0.5)
	for burst := 0; ; burst++ {
		k := 1 + rng.IntN(min(pc.Overlap, pc.Nodes))
		nodes := rng.Perm(pc.Nodes)
		var ps []Planned
		end := at
		restart := false
		for j := 0; j < k; j++ {
			kind := next()
			if kind == faultStoreRestart && restart {
				continue
			}
			restart = restart || kind == faultStoreRestart
			start := at
			if j > 0 {
				start += frac(0, 0.75)
			}
			p := draw(start, kind)
			p.Node = nodes[j]
			p.Burst = burst
			end = max(end, start+p.Duration)
			ps = append(ps, p)
		}
		if end+quiet > pc.Span {
			break
		}
		out = append(out, ps...)
		at = end + quiet + frac(0, 0.5)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].At < out[j].At })
	return out
}
