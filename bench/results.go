package main

import (
	"encoding/json"
	"os"
	"sort"
	"sync"
)

// Results hold every sample of a run, by scenario and library, so that the
// report and the chart are made from the same data (and can be made again
// from the JSON file).
type Results struct {
	Started string            `json:"started"`
	Command string            `json:"command"`
	Machine map[string]string `json:"machine"`
	Config  map[string]string `json:"config"` // library key -> settings used
	// Samples: scenario -> library key -> values (ms for latencies, per
	// second for rates, as the scenario says).
	Samples map[string]map[string][]float64 `json:"samples"`
	// Contention holds who got the lock how often, by library and round.
	Contention map[string][]*contentionRound `json:"contention"`
	// Renew holds the renewal costs, by "<leases>/<method>".
	Renew map[string][]renewCost `json:"renew"`
	// Errors counts failed samples by scenario and library.
	Errors map[string]map[string]int `json:"errors"`
	// Violations counts observed breaches of mutual exclusion.
	Violations map[string]map[string]int `json:"violations"`

	// FailoverLeaseMs is the lease of the failover scenario.
	FailoverLeaseMs float64 `json:"failover_lease_ms"`
	// FailoverLeaseMsByStore is the failover lease of a store whose lease
	// differs from FailoverLeaseMs (Kubernetes: -kube-fail-ttl).
	FailoverLeaseMsByStore map[string]float64 `json:"failover_lease_ms_by_store,omitempty"`
	// Diag is the text of the -diag section, if it ran.
	Diag string `json:"diag,omitempty"`

	mu sync.Mutex
}

// failoverLeaseMs is the failover scenario's lease on store s.
func (r *Results) failoverLeaseMs(s string) float64 {
	if v, ok := r.FailoverLeaseMsByStore[s]; ok {
		return v
	}
	return r.FailoverLeaseMs
}

func newResults() *Results {
	return &Results{
		Machine:    map[string]string{},
		Config:     map[string]string{},
		Samples:    map[string]map[string][]float64{},
		Contention: map[string][]*contentionRound{},
		Renew:      map[string][]renewCost{},
		Errors:     map[string]map[string]int{},
		Violations: map[string]map[string]int{},
	}
}

func (r *Results) add(scenario, key string, v float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.Samples[scenario]
	if m == nil {
		m = map[string][]float64{}
		r.Samples[scenario] = m
	}
	m[key] = append(m[key], v)
}

func (r *Results) get(scenario, key string) []float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.Samples[scenario][key]
}

func (r *Results) fail(scenario, key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.Errors[scenario]
	if m == nil {
		m = map[string]int{}
		r.Errors[scenario] = m
	}
	m[key]++
}

func (r *Results) violate(scenario, key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.Violations[scenario]
	if m == nil {
		m = map[string]int{}
		r.Violations[scenario] = m
	}
	m[key]++
}

func (r *Results) keys(scenario string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ks []string
	for k := range r.Samples[scenario] {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func (r *Results) writeJSON(path string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	b, err := json.MarshalIndent(r, "", " ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

func readResults(path string) (*Results, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	r := newResults()
	return r, json.Unmarshal(b, r)
}
