package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store/sqlite"
)

// syncBuffer is a bytes.Buffer that run's logger and the test may use at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// httpTimings: a 10 s lease, so that a loaded machine does not end a term
// while the test looks at it.
var httpTimings = []string{"--lease-duration", "10s"}

// httpRun is one `leasehold run --http 127.0.0.1:0` started in this process.
type httpRun struct {
	t    *testing.T
	addr string
	log  *syncBuffer
}

// startHTTPRun starts run with args (which include --http 127.0.0.1:0) and
// waits for it to serve HTTP; the test's cleanup stops it and checks it
// exited.
func startHTTPRun(t *testing.T, args ...string) *httpRun {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &httpRun{t: t, log: &syncBuffer{}}
	done := make(chan int, 1)
	go func() {
		done <- Main(ctx, args, strings.NewReader(""), io.Discard, r.log)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Errorf("run did not stop within 30 s of its context's end")
		}
		if t.Failed() {
			t.Logf("run's log:\n%s", r.log.String())
		}
	})
	serving := regexp.MustCompile(`msg="serving the status page, /healthz, (\S+) and /metrics" .*addr=(127\.0\.0\.1:\d+)`)
	waitFor(t, 30*time.Second, func() bool {
		select {
		case code := <-done:
			t.Fatalf("run exited %d before serving HTTP:\n%s", code, r.log.String())
		default:
		}
		if m := serving.FindStringSubmatch(r.log.String()); m != nil {
			r.addr = m[2]
		}
		return r.addr != ""
	})
	return r
}

func (r *httpRun) get(path string) (int, string) {
	r.t.Helper()
	resp, err := http.Get("http://" + r.addr + path)
	if err != nil {
		r.t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (r *httpRun) getJSON(path string, v any) int {
	r.t.Helper()
	code, body := r.get(path)
	if err := json.Unmarshal([]byte(body), v); err != nil {
		r.t.Fatalf("GET %s = %d, not JSON: %v\n%s", path, code, err, body)
	}
	return code
}

// TestRunSlotsHTTP: run --slots 2 --http on SQLite serves the status page,
// /slots naming the slot this process holds (and not the one a rival holds),
// /metrics with leasehold_is_leader per slot, and /healthz; /leader says to
// ask /slots.
func TestRunSlotsHTTP(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "leases.db")
	// A rival holds slot 0 first (straight through the store, as another
	// node would), so run can only take slot 1: the control that /slots and
	// the page tell this process's slot from a slot merely held.
	st, err := sqlite.Open(context.Background(), db, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rival, err := st.Acquire(context.Background(), leasehold.SlotName("jobs", 0), "rival", time.Hour, "")
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"run", "--store", "sqlite://" + db, "--lease", "jobs", "--slots", "2", "--identity", "a", "--http", "127.0.0.1:0"}, httpTimings...)
	r := startHTTPRun(t, append(args, "--", "sleep", "60")...)

	var sv slotsView
	waitFor(t, 20*time.Second, func() bool {
		r.getJSON("/slots", &sv)
		return len(sv.Holding) == 1
	})
	sv = slotsView{}
	if code := r.getJSON("/slots", &sv); code != 200 || sv.Name != "jobs" || sv.Slots != 2 || len(sv.Leases) != 2 {
		t.Fatalf("/slots = %d %+v", code, sv)
	}
	if sv.Holding[0] != "jobs.slot-1" {
		t.Errorf("/slots holding %q, want [jobs.slot-1] (the rival holds slot 0)", sv.Holding)
	}
	s0, s1 := sv.Leases[0], sv.Leases[1]
	if s0.Name != "jobs.slot-0" || s0.State != "held" || s0.Holder != "rival" || s0.Token != rival.Token || s0.Self {
		t.Errorf("/slots slot 0 = %+v, want held by the rival, not self", s0)
	}
	if s1.Name != "jobs.slot-1" || s1.State != "held" || !strings.HasPrefix(s1.Holder, "a-") || s1.Token < 1 || !s1.Self {
		t.Errorf("/slots slot 1 = %+v, want held by this process (self)", s1)
	}

	var body string
	waitFor(t, 10*time.Second, func() bool { // the command starts after the slot is held
		_, body = r.get("/metrics")
		return strings.Contains(body, `leasehold_command_starts_total{lease="jobs"} 1`)
	})
	for _, want := range []string{
		`leasehold_is_leader{lease="jobs.slot-0"} 0`,
		`leasehold_is_leader{lease="jobs.slot-1"} 1`,
		`leasehold_terms_started_total{lease="jobs.slot-1"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if strings.Contains(body, `leasehold_is_leader{lease="jobs"}`) {
		t.Errorf("/metrics has an is-leader series for the semaphore's name, which is no lease")
	}
	if code, body := r.get("/healthz"); code != 200 || !strings.Contains(body, "leading with token") {
		t.Errorf("/healthz = %d %q", code, body)
	}
	if code, body := r.get("/leader"); code != 404 || !strings.Contains(body, "/slots") {
		t.Errorf("/leader = %d %q, want 404 pointing at /slots", code, body)
	}
	if code, body := r.get("/"); code != 200 || !strings.Contains(body, `<script src="/static/app.js"`) {
		t.Errorf("GET / = %d", code)
	}
	var snap pageSnapshot
	r.getJSON("/api/leases", &snap)
	self := map[string]bool{}
	for _, l := range snap.Leases {
		self[l.Name] = l.Self
	}
	if !snap.Listed || !self["jobs.slot-1"] || self["jobs.slot-0"] || len(snap.Leases) != 2 {
		t.Errorf("/api/leases = %+v: want every lease, jobs.slot-1 marked self and jobs.slot-0 not", snap)
	}
}

// TestRunEveryHTTP: run --every --http on SQLite serves /schedule with the
// current period's claim and this process's run (while it runs, and after
// it ended with its exit code), /metrics with leasehold_is_leader of the run
// lease, /healthz and the page; /leader says to ask /schedule.
func TestRunEveryHTTP(t *testing.T) {
	dir := t.TempDir()
	started, release := filepath.Join(dir, "started"), filepath.Join(dir, "release")
	script := `touch "$1"; while [ ! -e "$2" ]; do sleep 0.05; done; exit 3`
	args := append([]string{"run", "--store", "sqlite://" + filepath.Join(dir, "leases.db"), "--lease", "job",
		"--every", "1h", "--missed", "run-once", "--identity", "a", "--http", "127.0.0.1:0"}, httpTimings...)
	r := startHTTPRun(t, append(args, "--", "sh", "-c", script, "sh", started, release)...)
	waitFor(t, 20*time.Second, func() bool {
		_, err := os.Stat(started)
		return err == nil
	})

	// While the period runs.
	var sv scheduleView
	waitFor(t, 10*time.Second, func() bool {
		r.getJSON("/schedule", &sv)
		return sv.Run.Self && sv.LastRun != nil
	})
	if sv.Name != "job" || sv.EverySeconds != 3600 || sv.Missed != "run-once" || !sv.NextPeriod.Equal(sv.Period.Add(time.Hour)) || sv.Period.Unix()%3600 != 0 {
		t.Errorf("/schedule = %+v", sv)
	}
	if sv.Run.State != "held" || sv.Run.Token < 1 || sv.LastRun.Token != sv.Run.Token || sv.LastRun.Ended != nil || sv.LastRun.ExitCode != nil {
		t.Errorf("/schedule while running: run %+v, last run %+v", sv.Run, sv.LastRun)
	}
	token := sv.Run.Token
	_, body := r.get("/metrics")
	for _, want := range []string{`leasehold_is_leader{lease="job"} 1`, `leasehold_command_starts_total{lease="job"} 1`} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics while running lacks %q", want)
		}
	}
	if code, body := r.get("/healthz"); code != 200 || !strings.Contains(body, "leading with token") {
		t.Errorf("/healthz while running = %d %q", code, body)
	}
	if code, body := r.get("/leader"); code != 404 || !strings.Contains(body, "/schedule") {
		t.Errorf("/leader = %d %q, want 404 pointing at /schedule", code, body)
	}

	// After the period ran.
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, func() bool {
		sv = scheduleView{} // a field left out (self: false) must not keep its last value
		r.getJSON("/schedule", &sv)
		// The run lease is released after the tracker has seen the term
		// end: wait for the store to say so too.
		return sv.LastRun != nil && sv.LastRun.ExitCode != nil && !sv.Run.Self && sv.Run.State != "held"
	})
	lr := sv.LastRun
	if *lr.ExitCode != 3 || lr.Ended == nil || lr.Token != token || lr.Ended.Before(lr.Started) || lr.Period.Unix()%3600 != 0 {
		t.Errorf("/schedule last run %+v: want exit 3, ended, token %d", lr, token)
	}
	if sv.Period.Equal(lr.Period) && (!sv.Claimed || sv.Claim.Token < 1 || sv.Claim.Name != leasehold.PeriodName("job", lr.Period)) {
		t.Errorf("/schedule claim of the period that ran: claimed %v %+v", sv.Claimed, sv.Claim)
	}
	if sv.Run.State == "held" {
		t.Errorf("/schedule run lease still held after the run: %+v", sv.Run)
	}
	waitFor(t, 10*time.Second, func() bool {
		_, body = r.get("/metrics")
		return strings.Contains(body, `leasehold_is_leader{lease="job"} 0`)
	})
	if !strings.Contains(body, `leasehold_terms_started_total{lease="job"} 1`) || !strings.Contains(body, `leasehold_terms_ended_total{lease="job",reason="released"} 1`) {
		t.Errorf("/metrics after the run:\n%s", body)
	}
	if code, body := r.get("/healthz"); code != 200 || !strings.Contains(body, "standing by") {
		t.Errorf("/healthz after the run = %d %q", code, body)
	}
	var snap pageSnapshot
	r.getJSON("/api/leases", &snap)
	names := map[string]bool{}
	for _, l := range snap.Leases {
		names[l.Name] = true
	}
	if !names["job"] || !names[leasehold.PeriodName("job", lr.Period)] {
		t.Errorf("/api/leases = %+v: want the run lease and the period's claim", snap)
	}
}
