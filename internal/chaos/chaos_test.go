package chaos

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/registry"
)

// The test binary is also the chaos node program: the harness re-executes
// it with LEASEHOLD_CHAOS_NODE=1, and TestMain then runs NodeMain
// instead of the tests. No separate build is needed.
const nodeEnv = "LEASEHOLD_CHAOS_NODE"

// openStore opens a store the way the leasehold command does: through the
// registry.
var openStore Opener = registry.Open

func TestMain(m *testing.M) {
	if os.Getenv(nodeEnv) == "1" {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
		code := NodeMain(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr, openStore)
		stop()
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// logWriter sends the harness's progress lines to the test log.
type logWriter struct{ t testing.TB }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// baseConfig is a short run: a 2 s lease and the given length of faults.
func baseConfig(t testing.TB, storeURL string, d time.Duration) Config {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if out := os.Getenv("LEASEHOLD_CHAOS_OUT"); out != "" { // keep the reports
		dir = filepath.Join(out, strings.ReplaceAll(t.Name(), "/", "_"))
		os.RemoveAll(dir)
	}
	return Config{
		StoreURL:    storeURL,
		Open:        openStore,
		NodeCommand: []string{self},
		NodeEnv:     []string{nodeEnv + "=1"},
		Duration:    d,
		Seed:        seedFor(t),
		Dir:         dir,
		Progress:    logWriter{t},
	}
}

// seedFor is fixed per test (so a failure repeats), unless
// LEASEHOLD_CHAOS_SEED overrides it.
func seedFor(t testing.TB) uint64 {
	if s := os.Getenv("LEASEHOLD_CHAOS_SEED"); s != "" {
		var v uint64
		if _, err := fmt.Sscan(s, &v); err != nil {
			t.Fatalf("LEASEHOLD_CHAOS_SEED=%q: %v", s, err)
		}
		return v
	}
	var h uint64 = 1469598103934665603
	for _, c := range t.Name() {
		h = (h ^ uint64(c)) * 1099511628211
	}
	return h%1_000_000 + 1
}

// runLogged runs c and logs its summary and report.
func runLogged(t *testing.T, c Config) *Outcome {
	t.Helper()
	out, err := Run(context.Background(), c)
	if err != nil {
		if out != nil { // what the run recorded before its error, checked
			t.Log(out.Summary)
			t.Logf("report: %s", out.Report)
		}
		t.Fatalf("chaos run: %v", err)
	}
	t.Log(out.Summary)
	t.Logf("report: %s", out.Report)
	return out
}

// run runs c and requires a clean result with real activity.
func runClean(t *testing.T, c Config) *Outcome {
	t.Helper()
	out := runLogged(t, c)
	for _, v := range out.Result.Violations {
		t.Errorf("violation: %s", v)
	}
	// Each failover violation's timeline, from its own group's history: a
	// run of many groups merges only their faults, not their events.
	groups := out.Groups
	if len(groups) == 0 {
		groups = []*Outcome{out}
	}
	var digest []string // the first failover violation's, said last
	for _, o := range groups {
		for _, v := range o.Result.Violations {
			if tl := failoverTimeline(o.History, v); tl != "" {
				t.Logf("%s %s: %s", o.Group, v, tl)
				if digest == nil {
					digest = failoverDigest(o.History, v)
					digest[0] = o.Group + " " + digest[0]
				}
			}
		}
	}
	if n := len(out.Result.Violations); n > 0 {
		// Said again last, after the timelines: a CI log shows only the
		// beginning and the end of a long output, and its summary of
		// failures only lines that begin with a file and line, one each.
		t.Cleanup(func() {
			for _, l := range digest {
				t.Log(l)
			}
			t.Logf("%d violations, first: %s (%s)", n, out.Result.Violations[0], out.Summary)
		})
	}
	for _, e := range out.UnexpectedExits {
		t.Errorf("node: %s", e)
	}
	s := out.Result.Stats
	if len(out.History.Faults) == 0 {
		t.Error("no fault was injected")
	}
	for _, f := range out.History.Faults {
		if f.Err != "" {
			t.Errorf("fault %s on %s failed: %s", f.Kind, f.Target, f.Err)
		}
	}
	if s.WritesAccepted == 0 || s.Terms == 0 || s.Reads == 0 {
		t.Errorf("the run did nothing: %+v", s)
	}
	if s.Linearizable != "Ok" {
		t.Errorf("linearizability: %s", s.Linearizable)
	}
	return out
}

// requireKinds checks that the run injected faults of these kinds (the
// planner takes every kind once before repeating, so a run long enough for
// n faults has the first n kinds of its shuffled bag).
func requireKinds(t *testing.T, out *Outcome, kinds ...string) {
	t.Helper()
	got := map[string]int{}
	for _, f := range out.History.Faults {
		got[f.Kind]++
	}
	n := 0
	for _, k := range kinds {
		if got[k] > 0 {
			n++
		}
	}
	if n < min(len(kinds), len(out.History.Faults)) {
		t.Errorf("faults injected %v; wanted each of %v", got, kinds)
	}
}

// The negative control: the same kind of run with the register's token
// check turned off. Leaders are paused while their writes are on the way;
// the late writes land after a newer term's, and the checker must say so.
func TestChaosNegativeControlIsCaught(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos runs take tens of seconds")
	}
	// Beside the other negative controls, once the store runs (sequential)
	// are done: a short run of a few processes each.
	t.Parallel()
	dir := t.TempDir()
	// Each paused leader lands a stale write with some chance (the pause
	// must catch a write on its way): in 18 s only two pauses fit, and one
	// run in about five found none. 36 s fits about four.
	c := baseConfig(t, "sqlite://"+filepath.Join(dir, "leases.db"), 36*time.Second)
	c.Unfenced = true
	c.Faults = []string{faultPause}
	c.LeaderBias = 1
	out, err := Run(context.Background(), c)
	if err != nil {
		if out != nil { // what the run recorded before its error, checked
			t.Log(out.Summary)
			t.Logf("report: %s", out.Report)
		}
		t.Fatalf("chaos run: %v", err)
	}
	t.Log(out.Summary)
	t.Logf("report: %s", out.Report)
	if out.Result.OK() {
		t.Fatalf("with fencing off, the checker found no violation: it cannot fail, so it proves nothing")
	}
	byCheck := map[string]int{}
	for _, c := range out.Result.Checks {
		byCheck[c.Name] = c.Violations
	}
	if byCheck[chkMonotonic] == 0 {
		t.Errorf("no stale write accepted was found: %v", byCheck)
	}
	if byCheck[chkLinearizable] == 0 {
		t.Errorf("porcupine did not reject the unfenced register: %v", byCheck)
	}
	if !strings.Contains(out.Summary, "FAIL") || !strings.Contains(out.Summary, "UNFENCED") {
		t.Errorf("summary: %s", out.Summary)
	}
}

func TestRunRejectsBadInputBeforeStarting(t *testing.T) {
	c := baseConfig(t, "sqlite:///nonexistent/x.db", 20*time.Second)
	c.Faults = []string{"pause", "meteor"}
	_, err := Run(context.Background(), c)
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), `unknown fault "meteor"`) {
		t.Fatalf("err = %v", err)
	}
	entries, _ := os.ReadDir(c.Dir)
	if len(entries) != 0 {
		t.Fatalf("a rejected run wrote %d files", len(entries))
	}
}

func TestRunRefusesAUsedOutputDirectory(t *testing.T) {
	c := baseConfig(t, "sqlite://"+filepath.Join(t.TempDir(), "leases.db"), 20*time.Second)
	os.MkdirAll(c.Dir, 0o755)
	if err := os.WriteFile(filepath.Join(c.Dir, "history-n1.1.jsonl"), []byte("{}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Run(context.Background(), c)
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "is not empty") {
		t.Fatalf("err = %v", err)
	}
}

func TestRunNamesABadStoreURLAsBadInput(t *testing.T) {
	c := baseConfig(t, "sqlite://"+filepath.Join(t.TempDir(), "leases.db")+"?colour=blue", 20*time.Second)
	_, err := Run(context.Background(), c)
	if !errors.Is(err, ErrInvalid) || errors.Is(err, ErrStore) {
		t.Fatalf("err = %v, want ErrInvalid", err)
	}
}

// Negative controls that break the store, not the register: every node runs
// on a deliberately broken wrapper of a SQLite store, and a short real run
// must fail with the check meant for that break. The register stays fenced,
// so the register's own checks have nothing to find: only the named check
// stands between such a store and a passing run.
func TestChaosBrokenStoreIsCaught(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos runs take seconds")
	}
	// Beside the other negative controls, once the store runs (sequential)
	// are done: a short run of a few processes each.
	t.Parallel()
	for _, tc := range []struct {
		mode, check string
	}{
		{brokenEarlyGrant, chkExclusive},
		{brokenTokenDown, chkTokenOrder},
		{brokenTokenRepeat, chkUniqueToken},
		{brokenNoFailover, chkFailover},
		{brokenForgeToken, chkWriteOwner},
		{brokenOverrun, chkSafeUntil},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			dir := t.TempDir()
			c := baseConfig(t, "sqlite://"+filepath.Join(dir, "leases.db"), 3*time.Second)
			c.BrokenStore = tc.mode
			c.Faults = []string{faultKill} // hand-overs, so that several grants are made
			c.LeaderBias = 1
			c.Timings = leasehold.Timings{LeaseDuration: time.Second} // the rest scale: a short run
			c.Slack = 200 * time.Millisecond
			if tc.mode == brokenOverrun {
				// The work must outlive a term while its process lives and
				// runs: the leader cut off from the store (a blackhole)
				// cannot renew, is told to stop, and writes on, to a
				// register the cut does not reach. A kill would end the
				// process with its work; on SQLite nothing else cuts a
				// live leader off.
				r := startRedis(t)
				c.StoreURL = r.URL()
				c.Faults = []string{faultBlackhole}
				c.Duration = 5 * time.Second
			}
			requireCaught(t, c, tc.check)
		})
	}
}

// requireCaught runs c, a broken-store negative control, and requires
// each of checks to find violations.
func requireCaught(t *testing.T, c Config, checks ...string) *Outcome {
	t.Helper()
	out := runLogged(t, c)
	byCheck := map[string]int{}
	for _, c := range out.Result.Checks {
		byCheck[c.Name] = c.Violations
	}
	for _, check := range checks {
		if byCheck[check] == 0 {
			t.Errorf("with the store broken (%s), %s found nothing: %v", c.BrokenStore, check, byCheck)
		}
	}
	if !strings.Contains(out.Summary, "FAIL") || !strings.Contains(out.Summary, "BROKEN-STORE "+c.BrokenStore) {
		t.Errorf("summary: %s", out.Summary)
	}
	return out
}

func TestRunRejectsAnUnknownBrokenStore(t *testing.T) {
	c := baseConfig(t, "sqlite://"+filepath.Join(t.TempDir(), "leases.db"), 20*time.Second)
	c.BrokenStore = "slightly"
	_, err := Run(context.Background(), c)
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), `broken store "slightly"`) {
		t.Fatalf("err = %v", err)
	}
}

// minLeaseStore declares a minimum lease no default timing meets, as the
// Kubernetes store declares a one-second resolution.
type minLeaseStore struct{ store.Store }

func (minLeaseStore) Limits() store.Limits { return store.Limits{MinLeaseDuration: time.Hour} }

// Timings the store cannot keep are refused before any node starts, naming
// the store's rule, instead of every node exiting at start.
func TestRunRejectsTimingsBelowTheStoresLimits(t *testing.T) {
	c := baseConfig(t, "sqlite://"+filepath.Join(t.TempDir(), "leases.db"), 20*time.Second)
	open := c.Open
	c.Open = func(ctx context.Context, u *url.URL) (store.Store, error) {
		st, err := open(ctx, u)
		return minLeaseStore{st}, err
	}
	_, err := Run(context.Background(), c)
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "below this store's minimum 1h0m0s") {
		t.Fatalf("err = %v, want ErrInvalid naming the store's minimum", err)
	}
	if entries, _ := os.ReadDir(c.Dir); len(entries) != 0 {
		t.Fatalf("a rejected run wrote %d files", len(entries))
	}
}

// TestFairGroups: with FairGroups, the last groups' electors wait in the
// store's fair queue and the others do not. On SQLite each group has its
// own file, whose queue table's AUTOINCREMENT counter (sqlite_sequence)
// counts the places ever written: the fair group's standbys queue behind
// its leader, and the other group writes none (the control: the flag
// reaches the nodes of one group only). The summary names the fair groups.
func TestFairGroups(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos runs take seconds")
	}
	path := filepath.Join(t.TempDir(), "leases.db")
	c := baseConfig(t, "sqlite://"+path, 9*time.Second)
	c.Groups, c.FairGroups = 2, 1
	c.Faults = []string{faultPause}
	out, err := Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if !out.Result.OK() || !strings.Contains(out.Summary, "2 groups (1 fair)") {
		t.Fatalf("summary: %s", out.Summary)
	}
	places := func(group string) int {
		db, err := sql.Open("sqlite", "file:"+strings.TrimSuffix(path, ".db")+"-"+group+".db?mode=ro")
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		var n int
		if err := db.QueryRow(`SELECT seq FROM sqlite_sequence WHERE name = 'leader_lease_queue'`).Scan(&n); err != nil && !errors.Is(err, sql.ErrNoRows) {
			t.Fatalf("group %s: %v", group, err)
		}
		return n
	}
	if n := places("g01"); n != 0 {
		t.Errorf("group g01 is not fair, yet %d places were written to its queue", n)
	}
	if n := places("g02"); n == 0 {
		t.Errorf("group g02 is fair, yet no place was written to its queue: its standbys did not queue")
	}
	// The recorder logs each enqueue with the places ahead, for the
	// timelines: the fair group's history has them, the other's none.
	for _, o := range out.Groups {
		enqueues, answered := 0, 0
		for _, e := range o.History.Events {
			if e.Call != callEnqueue {
				continue
			}
			switch {
			case e.Kind == evRequest:
				enqueues++
			case e.Kind == evAnswer && strings.HasPrefix(e.Detail, "ahead "):
				answered++
			}
		}
		if fair := o.Group == "g02"; fair != (enqueues > 0 && answered > 0) {
			t.Errorf("group %s (fair: %v) recorded %d enqueues, %d answered with the places ahead", o.Group, fair, enqueues, answered)
		}
	}
}

func TestRunRejectsBadFairGroups(t *testing.T) {
	for _, tc := range []struct {
		groups, fair int
		mode, want   string
	}{
		{2, 3, "", "3 fair groups: need 0 to --groups (2)"},
		{1, -1, "", "-1 fair groups"},
		{1, 1, ModeSemaphore, "fair groups need an elector run: a semaphore refuses Config.Fair"},
		{1, 1, ModeSchedule, "fair groups need an elector run: a schedule refuses Config.Fair"},
	} {
		c := baseConfig(t, "sqlite://"+filepath.Join(t.TempDir(), "leases.db"), 20*time.Second)
		c.Groups, c.FairGroups, c.Mode = tc.groups, tc.fair, tc.mode
		if _, err := Validate(c); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: err = %v, want ErrInvalid with %q", tc, err, tc.want)
		}
	}
}
