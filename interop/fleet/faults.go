package fleet

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/leasehold/leasehold/internal/faultproxy"
)

// The kinds of fault Faults puts on a participant's proxy.
const (
	FaultDelay     = "delay"     // added latency, 20-300 ms a round trip
	FaultReset     = "reset"     // every connection closed with RST, at once
	FaultPartition = "partition" // silence in both directions
	FaultDown      = "down"      // connections reset and new ones refused
)

// FaultKinds lists every kind, in the order reports show them.
var FaultKinds = []string{FaultDelay, FaultReset, FaultPartition, FaultDown}

// Faults puts faults on the proxies of a fleet's participants, one proxy
// per participant, while the fleet runs. Faults overlap: each participant
// may be under its own fault at the same time as others. Half of the faults
// go to whoever leads at that moment (OnLeader), so that terms end by
// faults as well as by release.
type Faults struct {
	// Proxies are the participants' proxies, by participant name.
	Proxies map[string]*faultproxy.Proxy
	// Leader returns who leads now ("" if nobody); Recorder.Leader.
	Leader func() string
	// Every is the mean time between two faults.
	Every time.Duration
	// Min and Max bound how long a lasting fault lasts.
	Min, Max time.Duration
	// Seed seeds the schedule.
	Seed uint64
	// Kinds are the kinds to draw from; nil means FaultKinds.
	Kinds []string
	// OnLeader is the share of faults put on the leader of the moment; zero
	// means one half.
	OnLeader float64

	mu     sync.Mutex
	counts map[string]int
	onLead int
	events []FaultEvent
}

// FaultEvent is one fault put on one participant's proxy: from Start until
// End (a reset lasts no time: End is Start).
type FaultEvent struct {
	Who, Kind  string
	Start, End time.Time
}

// Run injects faults until ctx ends, then heals every proxy.
func (f *Faults) Run(ctx context.Context) {
	rng := rand.New(rand.NewPCG(f.Seed, 16))
	kinds, onLeader := f.Kinds, f.OnLeader
	if kinds == nil {
		kinds = FaultKinds
	}
	if onLeader == 0 {
		onLeader = 0.5
	}
	names := slices.Sorted(maps.Keys(f.Proxies))
	busy := map[string]time.Time{} // name -> when its lasting fault heals
	type heal struct {
		at   time.Time
		name string
	}
	var heals []heal
	f.mu.Lock()
	f.counts = map[string]int{}
	f.events = nil
	f.mu.Unlock()
	defer func() {
		for _, p := range f.Proxies {
			p.Heal()
		}
	}()
	next := time.Now().Add(f.jitter(rng, f.Every))
	for {
		now := time.Now()
		// Heal what is due.
		kept := heals[:0]
		for _, h := range heals {
			if now.Before(h.at) {
				kept = append(kept, h)
				continue
			}
			f.Proxies[h.name].Heal()
			delete(busy, h.name)
		}
		heals = kept
		if !now.Before(next) {
			target, onLead := "", false
			if lead := f.Leader(); lead != "" && rng.Float64() < onLeader {
				if _, ok := f.Proxies[lead]; ok {
					target, onLead = lead, true
				}
			}
			if target == "" {
				target = names[rng.IntN(len(names))]
			}
			kind := kinds[rng.IntN(len(kinds))]
			_, faulted := busy[target]
			if kind != FaultReset && faulted {
				kind = FaultReset // one lasting fault at a time per proxy
			}
			p := f.Proxies[target]
			dur := f.Min + time.Duration(rng.Int64N(int64(f.Max-f.Min)+1))
			switch kind {
			case FaultDelay:
				p.SetLatency(time.Duration(20+rng.IntN(281)) * time.Millisecond)
			case FaultReset:
				p.Reset()
			case FaultPartition:
				p.Blackhole()
			case FaultDown:
				p.Refuse(true)
				p.Reset()
			}
			if kind != FaultReset {
				busy[target] = now.Add(dur)
				heals = append(heals, heal{now.Add(dur), target})
			}
			end := now
			if kind != FaultReset {
				end = now.Add(dur)
			}
			f.mu.Lock()
			f.events = append(f.events, FaultEvent{Who: target, Kind: kind, Start: now, End: end})
			f.counts[kind]++
			if onLead {
				f.onLead++
			}
			f.mu.Unlock()
			next = now.Add(f.jitter(rng, f.Every))
		}
		wake := next
		for _, h := range heals {
			if h.at.Before(wake) {
				wake = h.at
			}
		}
		t := time.NewTimer(time.Until(wake))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C: // the schedule's own clock
		}
	}
}

// jitter is d scaled by a random factor in [0.5, 1.5).
func (f *Faults) jitter(rng *rand.Rand, d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.5 + rng.Float64()))
}

// Counts returns how many faults of each kind were injected, and how many
// of them were put on the leader of the moment.
func (f *Faults) Counts() (map[string]int, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.counts), f.onLead
}

// Events returns the faults injected, in the order they began.
func (f *Faults) Events() []FaultEvent {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.events)
}

// Total is the number of faults injected.
func (f *Faults) Total() int {
	c, _ := f.Counts()
	n := 0
	for _, v := range c {
		n += v
	}
	return n
}

// String lists the counts by kind.
func (f *Faults) String() string {
	c, onLead := f.Counts()
	var parts []string
	for _, k := range FaultKinds {
		parts = append(parts, fmt.Sprintf("%s %d", k, c[k]))
	}
	return fmt.Sprintf("%d faults (%s; %d on the leader)", f.Total(), strings.Join(parts, ", "), onLead)
}
