package main_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
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
// check can fail. Each command waits for the other two to start before it
// counts towards its exit, so that the three overlap however loaded the
// machine is (CI once saw a run's command start after the others had exited).
func TestSlotsCheckerNegativeControl(t *testing.T) {
	barrier := t.TempDir()
	runs := slotRuns(t, sqliteURL(t), 3, 3, "E2E_BARRIER="+barrier, "E2E_BARRIER_N=3")
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
func slotRuns(t *testing.T, storeURL string, slots, n int, childVars ...string) []slotRun {
	dir := t.TempDir()
	args := append([]string{"--store", storeURL, "--lease", "e2e-sem", "--slots", strconv.Itoa(slots)}, timingArgs...)
	childVars = append([]string{"E2E_EXIT_AFTER=200"}, childVars...)
	var nodes []*node
	for i := 0; i < n; i++ {
		nodes = append(nodes, startRun(t, dir, fmt.Sprintf("n%d", i), childVars, args...))
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
		// The slot of the term the command ran under. On a loaded machine a
		// run may hold an earlier term that ends before its command records
		// a start (a renewal timed out); its slot line names another token.
		var m []string
		for _, x := range holdingSlot.FindAllStringSubmatch(nd.log(), -1) {
			if tok, _ := strconv.ParseInt(x[2], 10, 64); tok == rec.starts[0].token {
				m = x
			}
		}
		if m == nil {
			t.Fatalf("%s: its log names no slot held with token %d, the token its command got\n%s", nd.name, rec.starts[0].token, nd.log())
		}
		tok := rec.starts[0].token
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

// servedAddr waits until n's log says where it serves HTTP, and returns the
// address.
func servedAddr(t *testing.T, n *node) string {
	t.Helper()
	re := regexp.MustCompile(`msg="serving the status page, /healthz[^"]*" .*addr=(127\.0\.0\.1:\d+)`)
	var addr string
	waitUntil(t, 20*time.Second, n.name+" to serve HTTP", func() bool {
		if m := re.FindStringSubmatch(n.log()); m != nil {
			addr = m[1]
		}
		return addr != ""
	})
	return addr
}

func getURL(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestHTTPSlots: two `leasehold run --slots 2 --http` each serve /slots
// naming the one slot it holds (not the other's), /metrics with
// leasehold_is_leader 1 for its slot and 0 for the other's, and a /leader
// that points at /slots.
func TestHTTPSlots(t *testing.T) {
	dir := t.TempDir()
	url := sqliteURL(t)
	args := append([]string{"--store", url, "--lease", "pool", "--slots", "2", "--http", "127.0.0.1:0"}, timingArgs...)
	a, b := startRun(t, dir, "a", nil, args...), startRun(t, dir, "b", nil, args...)
	type slots struct {
		Holding []string `json:"holding"`
		Leases  []struct {
			Name  string `json:"name"`
			State string `json:"state"`
			Self  bool   `json:"self"`
		} `json:"leases"`
	}
	held := map[string]string{} // node -> slot
	for _, n := range []*node{a, b} {
		addr := servedAddr(t, n)
		var s slots
		waitUntil(t, 20*time.Second, n.name+" to hold a slot and run its command", func() bool {
			s = slots{}
			_, body := getURL(t, "http://"+addr+"/slots")
			return json.Unmarshal([]byte(body), &s) == nil && len(s.Holding) == 1 && len(n.record().ticks) > 0
		})
		held[n.name] = s.Holding[0]
		if len(s.Leases) != 2 {
			t.Fatalf("%s: /slots leases %+v, want 2", n.name, s.Leases)
		}
		_, metrics := getURL(t, "http://"+addr+"/metrics")
		for _, l := range s.Leases {
			mine := l.Name == s.Holding[0]
			if l.Self != mine {
				t.Errorf("%s: /slots marks %s self=%v, it holds %s", n.name, l.Name, l.Self, s.Holding[0])
			}
			want := fmt.Sprintf(`leasehold_is_leader{lease=%q} 0`, l.Name)
			if mine {
				want = fmt.Sprintf(`leasehold_is_leader{lease=%q} 1`, l.Name)
			}
			if !strings.Contains(metrics, want) {
				t.Errorf("%s: /metrics lacks %s", n.name, want)
			}
		}
		if code, body := getURL(t, "http://"+addr+"/leader"); code != 404 || !strings.Contains(body, "/slots") {
			t.Errorf("%s: /leader = %d %q, want 404 pointing at /slots", n.name, code, body)
		}
	}
	if held["a"] == held["b"] {
		t.Fatalf("both runs say they hold %s", held["a"])
	}
}
