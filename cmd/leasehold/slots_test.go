package main_test

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"testing"
	"time"
)

// TestSlotsSQLite: three `leasehold run --slots 2` on one semaphore, each
// command running for a while and exiting: at most two commands run at once
// (the third starts after one of the first two has stopped, in the slot that
// one freed, with a higher token), and every run exits 0.
func TestSlotsSQLite(t *testing.T) {
	runs := slotRuns(t, sqliteURL(t), 2, 3)
	if v := slotViolations(runs, 2); len(v) > 0 {
		t.Fatalf("with --slots 2: %v", v)
	}
	if most := mostAtOnce(runs); most != 2 {
		t.Fatalf("at most %d commands ran at once, want 2: the semaphore let fewer holders in than it has slots", most)
	}
}

// TestSlotsCheckerNegativeControl: the same three runs with --slots 3 run all
// three commands at once, and the check of at most two at once says so: the
// check can fail.
func TestSlotsCheckerNegativeControl(t *testing.T) {
	runs := slotRuns(t, sqliteURL(t), 3, 3)
	if v := slotViolations(runs, 2); len(v) == 0 {
		t.Fatalf("three runs with --slots 3 checked against a limit of 2 found nothing wrong: %+v", runs)
	}
}

// slotRun is what one run's command and log say of its term.
type slotRun struct {
	name       string
	slot       string
	token      int64
	start, end time.Time // the command's start and last tick
}

var holdingSlot = regexp.MustCompile(`holding a slot.* slot=(\S+) .*token=(\d+)`)

// slotRuns starts n runs of `leasehold run --slots slots` whose commands tick
// for about two seconds and exit, waits for every run to exit 0, and returns
// what each did.
func slotRuns(t *testing.T, storeURL string, slots, n int) []slotRun {
	dir := t.TempDir()
	args := append([]string{"--store", storeURL, "--lease", "e2e-sem", "--slots", strconv.Itoa(slots)}, timingArgs...)
	var nodes []*node
	for i := 0; i < n; i++ {
		nodes = append(nodes, startRun(t, dir, fmt.Sprintf("n%d", i), []string{"E2E_EXIT_AFTER=200"}, args...))
	}
	var runs []slotRun
	for _, nd := range nodes {
		if code := nd.exitCode(40 * time.Second); code != 0 {
			t.Fatalf("%s: run exited %d, want 0 (its command exited 0)\n%s", nd.name, code, nd.log())
		}
		rec := nd.record()
		if len(rec.starts) != 1 || len(rec.ticks) == 0 {
			t.Fatalf("%s: %d starts and %d ticks, want one start and ticks\n%s", nd.name, len(rec.starts), len(rec.ticks), nd.log())
		}
		m := holdingSlot.FindStringSubmatch(nd.log())
		if m == nil {
			t.Fatalf("%s: its log names no slot\n%s", nd.name, nd.log())
		}
		tok, _ := strconv.ParseInt(m[2], 10, 64)
		if tok != rec.starts[0].token {
			t.Fatalf("%s: log says token %d, the command got %d", nd.name, tok, rec.starts[0].token)
		}
		runs = append(runs, slotRun{name: nd.name, slot: m[1], token: tok, start: rec.starts[0].at, end: rec.ticks[len(rec.ticks)-1].at})
	}
	return runs
}

// slotViolations checks the runs: at most limit commands at once, never two
// at once in one slot, and each slot's tokens rising in the order its
// commands started.
func slotViolations(runs []slotRun, limit int) []string {
	var v []string
	for _, r := range runs {
		if n := runningAt(runs, r.start); n > limit {
			v = append(v, fmt.Sprintf("%d commands ran at once when %s started, the limit is %d", n, r.name, limit))
		}
		for _, o := range runs {
			if o.name != r.name && o.slot == r.slot && !o.start.After(r.start) && !o.end.Before(r.start) {
				v = append(v, fmt.Sprintf("slot %s: %s started while %s still ran in it", r.slot, r.name, o.name))
			}
		}
	}
	bySlot := map[string][]slotRun{}
	for _, r := range runs {
		bySlot[r.slot] = append(bySlot[r.slot], r)
	}
	for slot, rs := range bySlot {
		sort.Slice(rs, func(i, j int) bool { return rs[i].start.Before(rs[j].start) })
		for i := 1; i < len(rs); i++ {
			if rs[i].token <= rs[i-1].token {
				v = append(v, fmt.Sprintf("slot %s: token %d after %d", slot, rs[i].token, rs[i-1].token))
			}
		}
	}
	return v
}

// runningAt counts the commands running at instant at.
func runningAt(runs []slotRun, at time.Time) int {
	n := 0
	for _, r := range runs {
		if !r.start.After(at) && !r.end.Before(at) {
			n++
		}
	}
	return n
}

func mostAtOnce(runs []slotRun) int {
	most := 0
	for _, r := range runs {
		most = max(most, runningAt(runs, r.start))
	}
	return most
}
