package chaos

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestChaosSoak is the long run, off by default: each store's CI
// configuration (storeRuns), run until it has injected
// LEASEHOLD_CHAOS_SOAK_FAULTS faults, or for LEASEHOLD_CHAOS_SOAK, whichever
// ends first:
//
//	LEASEHOLD_CHAOS_SOAK_FAULTS=10000 LEASEHOLD_CHAOS_SOAK_STORES=redis \
//	  go test ./internal/chaos -run TestChaosSoak -v -timeout 6h
//
// LEASEHOLD_CHAOS_SOAK_STORES chooses stores (default: all of them, one
// after another), LEASEHOLD_CHAOS_SOAK_GROUPS=N runs N lease groups instead
// of the store's CI number (more groups reach 10,000 faults sooner, and load
// the machine more), LEASEHOLD_CHAOS_OUT=DIR keeps the reports, and
// LEASEHOLD_CHAOS_SEED repeats a schedule.
func TestChaosSoak(t *testing.T) {
	n, d := soakFaults(), os.Getenv("LEASEHOLD_CHAOS_SOAK")
	if n == 0 && d == "" {
		t.Skip("the soak runs only with LEASEHOLD_CHAOS_SOAK_FAULTS=N (e.g. 10000) or LEASEHOLD_CHAOS_SOAK=DURATION")
	}
	span := 24 * time.Hour
	if d != "" {
		v, err := time.ParseDuration(d)
		if err != nil || v <= 0 {
			t.Fatalf("LEASEHOLD_CHAOS_SOAK=%q is not a positive duration", d)
		}
		span = v
	}
	groups := 0
	if s := os.Getenv("LEASEHOLD_CHAOS_SOAK_GROUPS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v <= 0 {
			t.Fatalf("LEASEHOLD_CHAOS_SOAK_GROUPS=%q is not a positive number of lease groups", s)
		}
		groups = v
	}
	want := map[string]bool{}
	if s := os.Getenv("LEASEHOLD_CHAOS_SOAK_STORES"); s != "" {
		for _, name := range strings.Split(s, ",") {
			want[strings.TrimSpace(name)] = true
		}
	}
	for _, r := range storeRuns {
		if len(want) > 0 && !want[r.name] {
			continue
		}
		t.Run(r.name, func(t *testing.T) { runStore(t, r.name, span, groups) })
	}
}
