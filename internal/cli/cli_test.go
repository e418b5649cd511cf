package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/sqlite"
)

func resolve(t *testing.T, args ...string) (leasehold.Timings, time.Duration, time.Duration, error) {
	t.Helper()
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	var tf timingFlags
	tf.register(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return tf.resolve()
}

func TestTimingsResolve(t *testing.T) {
	tm, grace, margin, err := resolve(t)
	if err != nil {
		t.Fatal(err)
	}
	// Defaults: 15s/10s/5s/2s; the window RD-RI is 5s: grace 1.25s, margin 250ms.
	if tm.LeaseDuration != 15*time.Second || tm.RenewDeadline != 10*time.Second || tm.RenewInterval != 5*time.Second ||
		tm.RetryPeriod != 2*time.Second || grace != 1250*time.Millisecond || margin != 250*time.Millisecond || tm.WindDown != grace+margin {
		t.Fatalf("defaults: %+v, grace %v, margin %v", tm, grace, margin)
	}
	// Only --lease-duration: the rest scale with it.
	tm, _, _, err = resolve(t, "--lease-duration", "3s")
	if err != nil || tm.RenewDeadline != 2*time.Second || tm.RenewInterval != time.Second || tm.RetryPeriod != 400*time.Millisecond {
		t.Fatalf("--lease-duration 3s: %+v, %v", tm, err)
	}
	bad := []struct {
		args []string
		flag string
	}{
		{[]string{"--lease-duration", "0s"}, "--lease-duration"},
		{[]string{"--lease-duration", "-1s"}, "--lease-duration"},
		{[]string{"--renew-deadline", "15s"}, "--renew-deadline 15s must be less than --lease-duration"},
		{[]string{"--renew-interval", "10s"}, "--renew-interval 10s must be less than --renew-deadline"},
		{[]string{"--retry-period", "10s"}, "--retry-period"},
		{[]string{"--renew-deadline", "0s"}, "--renew-deadline"},
		{[]string{"--jitter", "1.5"}, "--jitter"},
		{[]string{"--term-grace", "5s"}, "--term-grace"},
		{[]string{"--kill-margin", "5s"}, "--kill-margin"},
		{[]string{"--term-grace", "-1s"}, "--term-grace"},
	}
	for _, c := range bad {
		_, _, _, err := resolve(t, c.args...)
		var ue *UsageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), c.flag) {
			t.Errorf("%v: err = %v, want a usage error naming %s", c.args, err, c.flag)
		}
	}
}

func TestHealth(t *testing.T) {
	now := time.Now()
	tm := leasehold.DefaultTimings()
	base := healthView{running: true, started: now.Add(-time.Hour), timings: tm, now: now, storeURL: "postgres://u:xxxxx@h/db"}
	cases := []struct {
		name string
		st   leasehold.Status
		run  bool
		ok   bool
		why  string
	}{
		{"leader in time", leasehold.Status{Leading: true, Term: store.Term{Token: 7}, SafeUntil: now.Add(3 * time.Second), LastContact: now}, true, true, "leading with token 7"},
		{"leader past safeUntil", leasehold.Status{Leading: true, Term: store.Term{Token: 7}, SafeUntil: now.Add(-time.Second)}, true, false, "past safeUntil"},
		{"standby contending", leasehold.Status{Contending: true, LastContact: now}, true, true, "standing by"},
		{"standby, one failed call", leasehold.Status{Contending: true, LastContact: now.Add(-time.Second), LastError: errors.New("timeout")}, true, true, "standing by"},
		{"standby cut off from the store", leasehold.Status{Contending: true, LastContact: now.Add(-time.Minute), LastError: errors.New("connection refused")}, true, false, "cannot reach the store postgres://u:xxxxx@h/db"},
		{"never reached the store", leasehold.Status{Contending: true, LastError: errors.New("connection refused")}, true, false, "cannot reach the store"},
		{"elector stopped", leasehold.Status{}, false, false, "stopped"},
	}
	for _, c := range cases {
		v := base
		v.status, v.running = c.st, c.run
		ok, why := health(v)
		if ok != c.ok || !strings.Contains(why, c.why) {
			t.Errorf("%s: health = %v %q; want %v, %q", c.name, ok, why, c.ok, c.why)
		}
	}
}

var metricLine = regexp.MustCompile(`^([a-z_]+)\{([a-z_]+="(?:[^"\\]|\\.)*"(?:,[a-z_]+="(?:[^"\\]|\\.)*")*)\} (\S+)$`)

// TestMetricsFormat: run's /metrics is promlease's metrics plus the
// command's starts, in the text format, with the lease label escaped.
func TestMetricsFormat(t *testing.T) {
	const name = `odd"name`
	m := newMetrics(name)
	held := fmt.Errorf("x: %w", store.ErrHeld)
	term := store.Term{Name: name, Holder: "h", Token: 9}
	for _, ev := range []leasehold.Event{
		{Kind: leasehold.EventAcquireAttempt, Err: held},
		{Kind: leasehold.EventAcquireAttempt, Err: errors.New("timeout")},
		{Kind: leasehold.EventAcquireAttempt},
		{Kind: leasehold.EventAcquired, Term: term, SafeUntil: leasehold.SystemClock().Now().Add(time.Hour)},
		{Kind: leasehold.EventRenewed, Term: term, SafeUntil: leasehold.SystemClock().Now().Add(time.Hour), Latency: 3 * time.Millisecond},
		{Kind: leasehold.EventRenewed, Term: term, SafeUntil: leasehold.SystemClock().Now().Add(time.Hour), Latency: 30 * time.Second},
		{Kind: leasehold.EventRenewFailed, Term: term, Err: errors.New("timeout")},
	} {
		ev.Name = name
		m.observe(ev)
	}
	m.childStarted()
	scrape := func() (string, map[string]float64) {
		rec := httptest.NewRecorder()
		m.handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		if ct := rec.Header().Get("Content-Type"); rec.Code != 200 || !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
			t.Errorf("/metrics answered %d with Content-Type %q, want 200 and Prometheus' text format 0.0.4", rec.Code, ct)
		}
		values := map[string]float64{}
		var lastBucket float64 = -1
		for _, line := range strings.Split(strings.TrimSpace(rec.Body.String()), "\n") {
			if strings.HasPrefix(line, "# HELP ") || strings.HasPrefix(line, "# TYPE ") {
				continue
			}
			mm := metricLine.FindStringSubmatch(line)
			if mm == nil {
				t.Fatalf("not a Prometheus text line: %q", line)
			}
			v, err := strconv.ParseFloat(mm[3], 64)
			if err != nil {
				t.Fatalf("bad value in %q", line)
			}
			labels := strings.Replace(mm[2], `lease="odd\"name"`, "", 1)
			if labels == mm[2] {
				t.Fatalf("lease label not escaped in %q", line)
			}
			values[mm[1]+"{"+strings.Trim(labels, ",")+"}"] = v
			if mm[1] == "leasehold_renew_latency_seconds_bucket" {
				if v < lastBucket {
					t.Fatalf("histogram buckets not cumulative at %q", line)
				}
				lastBucket = v
			}
		}
		return rec.Body.String(), values
	}
	body, values := scrape()
	want := map[string]float64{
		"leasehold_is_leader{}":                              1,
		"leasehold_token{}":                                  9,
		"leasehold_terms_started_total{}":                    1,
		`leasehold_acquire_attempts_total{result="granted"}`: 1,
		`leasehold_acquire_attempts_total{result="held"}`:    1,
		`leasehold_acquire_attempts_total{result="error"}`:   1,
		`leasehold_terms_ended_total{reason="lost"}`:         0,
		"leasehold_renew_failures_total{}":                   1,
		`leasehold_renew_latency_seconds_bucket{le="0.005"}`: 1,
		`leasehold_renew_latency_seconds_bucket{le="10"}`:    1,
		`leasehold_renew_latency_seconds_bucket{le="+Inf"}`:  2,
		"leasehold_renew_latency_seconds_count{}":            2,
		"leasehold_renew_latency_seconds_sum{}":              30.003,
		"leasehold_command_starts_total{}":                   1,
	}
	for k, v := range want {
		if got, ok := values[k]; !ok || got != v {
			t.Errorf("%s = %v (present %v), want %v", k, got, ok, v)
		}
	}
	if left := values["leasehold_safe_until_remaining_seconds{}"]; left < 3500 || left > 3600 {
		t.Errorf("leasehold_safe_until_remaining_seconds = %v, want about 3600", left)
	}
	wantAt := float64(time.Now().Add(time.Hour).UnixNano()) / 1e9
	if got := values["leasehold_safe_until_timestamp_seconds{}"]; math.Abs(got-wantAt) > 100 {
		t.Errorf("leasehold_safe_until_timestamp_seconds = %v, want about %v", got, wantAt)
	}
	if regexp.MustCompile(`_seconds\{[^}]*\} [0-9]+\.[0-9]{4,}\n`).MatchString(body) {
		t.Errorf("a gauge in seconds is not rounded to the millisecond")
	}
	// The term ends: both safe-until gauges are zero.
	m.observe(leasehold.Event{Kind: leasehold.EventLost, Name: name, Term: term, Err: &SignalError{Signal: syscall.SIGTERM}})
	body, values = scrape()
	for k, v := range map[string]float64{
		"leasehold_is_leader{}":                          0,
		"leasehold_safe_until_remaining_seconds{}":       0,
		"leasehold_safe_until_timestamp_seconds{}":       0,
		`leasehold_terms_ended_total{reason="shutdown"}`: 1,
	} {
		if got, ok := values[k]; !ok || got != v {
			t.Errorf("standby: %s = %v (present %v), want %v", k, got, ok, v)
		}
	}
	if t.Failed() {
		t.Log(body)
	}
}

// TestLeaderJSONMilliseconds: /leader and `status --json` give durations in
// seconds to the millisecond, not float noise like 13.321307000000001.
func TestLeaderJSONMilliseconds(t *testing.T) {
	rec := store.Record{Term: store.Term{Token: 3, Holder: "h"}, TTL: 15*time.Second + 123456789, Remaining: 13*time.Second + 321307000}
	b, err := json.Marshal(leaseJSON(rec, "web"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"remaining_seconds":13.321,`, `"ttl_seconds":15.123}`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("%s lacks %s", b, want)
		}
	}
}

func TestDiagnose(t *testing.T) {
	tm, grace, margin, err := resolve(t)
	if err != nil {
		t.Fatal(err)
	}
	fast := []time.Duration{time.Millisecond, 2 * time.Millisecond}
	d := diagnose(tm, grace, margin, fast, caps{})
	if len(d.warnings) != 0 || d.margin != 5*time.Second || d.attempts != 2 || d.crashFail != 15*time.Second+4*time.Millisecond {
		t.Fatalf("defaults with a fast store: %+v", d)
	}
	var out bytes.Buffer
	d.print(&out, "sqlite:///x")
	if !strings.Contains(out.String(), "OK: the arithmetic is safe") {
		t.Fatalf("print:\n%s", out.String())
	}
	cases := []struct {
		args []string
		rtt  time.Duration
		want string
	}{
		{[]string{"--lease-duration", "10s", "--renew-deadline", "9900ms"}, time.Millisecond, "safety margin 100ms"},
		{[]string{"--renew-interval", "8s", "--retry-period", "2s"}, time.Millisecond, "only one renewal attempt"},
		{nil, 1500 * time.Millisecond, "more than half the retry period"},
		{nil, 9 * time.Second, "no renewal can be answered"},
		{[]string{"--kill-margin", "5ms"}, time.Millisecond, "--kill-margin 5ms"},
	}
	for _, c := range cases {
		tm, grace, margin, err := resolve(t, c.args...)
		if err != nil {
			t.Fatalf("%v: %v", c.args, err)
		}
		d := diagnose(tm, grace, margin, []time.Duration{c.rtt}, caps{})
		if !strings.Contains(strings.Join(d.warnings, "\n"), c.want) {
			t.Errorf("%v with rtt %v: warnings %q, want one with %q", c.args, c.rtt, d.warnings, c.want)
		}
	}
}

func testEnv(stdout, stderr *bytes.Buffer, vars map[string]string) *Env {
	return newEnv(nil, stdout, stderr, func(k string) string { return vars[k] })
}

func TestOpenStore(t *testing.T) {
	ctx := context.Background()
	var out, errb bytes.Buffer
	env := testEnv(&out, &errb, nil)
	var ue *UsageError
	var se *StoreError

	_, err := (&storeFlag{raw: "nosuch://h/x"}).open(ctx, env)
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), `unknown store scheme "nosuch"`) || !strings.Contains(err.Error(), "sqlite") {
		t.Fatalf("unknown scheme: %v", err)
	}
	_, err = (&storeFlag{raw: "postgres://u:p%zzsecret@h/db"}).open(ctx, env)
	if !errors.As(err, &ue) || strings.Contains(err.Error(), "secret") {
		t.Fatalf("unparsable URL: %v (must be a usage error without the password)", err)
	}
	_, err = (&storeFlag{raw: "sqlite:///nonexistent-leasehold-dir/x.db"}).open(ctx, env)
	if !errors.As(err, &se) || se.URL != "sqlite:///nonexistent-leasehold-dir/x.db" {
		t.Fatalf("missing directory: %v, want a StoreError naming the URL", err)
	}
	// $LEASEHOLD_STORE, then the default.
	dir := t.TempDir()
	env = testEnv(&out, &errb, map[string]string{StoreEnv: "sqlite://" + dir + "/env.db"})
	st, err := (&storeFlag{}).open(ctx, env)
	if err != nil || st.Name != "sqlite://"+dir+"/env.db" {
		t.Fatalf("from $LEASEHOLD_STORE: %v, %v", st, err)
	}
	st.Close()
	errb.Reset()
	env = testEnv(&out, &errb, map[string]string{"HOME": dir})
	st, err = (&storeFlag{}).open(ctx, env)
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	want := filepath.Join(dir, ".local/state/leasehold/leases.db")
	if st.Store.(*sqlite.Store).Path() != want || !strings.Contains(errb.String(), "using the default store sqlite://"+want) {
		t.Fatalf("default store at %s, stderr %q; want %s, said on stderr", st.Store.(*sqlite.Store).Path(), errb.String(), want)
	}
}

func TestScrub(t *testing.T) {
	u, _ := url.Parse("postgres://u:s3cr3t@h/db")
	sec := &secretSet{}
	sec.add(urlSecrets(u)...)
	err := scrub(sec, fmt.Errorf("wrapped: %w", errors.New("dial postgres://u:s3cr3t@h/db failed")))
	if strings.Contains(err.Error(), "s3cr3t") || !strings.Contains(err.Error(), "u:xxxxx@h") {
		t.Fatalf("scrub: %v", err)
	}
	se := &StoreError{URL: u.Redacted(), Err: err}
	if strings.Contains(se.Error(), "s3cr3t") {
		t.Fatalf("StoreError shows the password: %v", se)
	}
}

func TestStatusWatch(t *testing.T) {
	dir := t.TempDir()
	url := "sqlite://" + dir + "/w.db"
	st, err := sqlite.Open(context.Background(), dir+"/w.db", sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.Acquire(context.Background(), "job", "node-a-1", time.Minute, ""); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errb bytes.Buffer
	done := make(chan int)
	w := &watchBuffer{b: &out, onWrite: func(s string) {
		if strings.Count(s, "node-a-1") >= 3 {
			cancel()
		}
	}}
	go func() {
		done <- Main(ctx, []string{"status", "--store", url, "--watch", "--json", "--interval", "10ms"}, nil, w, &errb)
	}()
	if code := <-done; code != 0 {
		t.Fatalf("status --watch: exit %d: %s", code, errb.String())
	}
	lines := strings.Split(strings.TrimSpace(w.String()), "\n")
	if len(lines) < 3 || !strings.Contains(lines[0], `"state":"held"`) {
		t.Fatalf("status --watch --json printed %q", lines)
	}
}

type watchBuffer struct {
	b       *bytes.Buffer
	onWrite func(string)
}

func (l *watchBuffer) Write(p []byte) (int, error) {
	n, err := l.b.Write(p)
	l.onWrite(l.b.String())
	return n, err
}

func (l *watchBuffer) String() string { return l.b.String() }

func TestSignalErrorIsShutdown(t *testing.T) {
	err := &SignalError{Signal: syscall.SIGINT}
	if !errors.Is(err, context.Canceled) || leasehold.LossReason(err) != "shutdown" {
		t.Fatalf("SignalError: Is(Canceled) %v, LossReason %q", errors.Is(err, context.Canceled), leasehold.LossReason(err))
	}
}

// Every command registered in the table answers --help with its usage on
// stdout and exit 0, and every listed one has an example.
func TestEveryCommandHasHelp(t *testing.T) {
	for _, c := range commands {
		var out, errb bytes.Buffer
		code := Main(context.Background(), []string{c.name, "--help"}, nil, &out, &errb)
		if code != 0 || !strings.HasPrefix(out.String(), "Usage: leasehold "+c.name) {
			t.Errorf("%s --help: exit %d, %q %q", c.name, code, out.String(), errb.String())
		}
		if !c.hidden && !strings.Contains(out.String(), "Example") {
			t.Errorf("%s --help has no example", c.name)
		}
	}
}

// TestDiagnoseWatchLag: on a store whose watch polls, doctor counts the
// poll in the release failover and says so; on a pushed watch it does not.
func TestDiagnoseWatchLag(t *testing.T) {
	tm, grace, margin, err := resolve(t)
	if err != nil {
		t.Fatal(err)
	}
	rtts := []time.Duration{time.Millisecond, 2 * time.Millisecond}
	for _, c := range []struct {
		cp   caps
		fail time.Duration
		says string
	}{
		{caps{watch: true, watchLag: 37500 * time.Microsecond}, 37500*time.Microsecond + 4*time.Millisecond, "at their next poll of the store at the latest, within 37.5ms"},
		{caps{watch: true}, 4 * time.Millisecond, "the store tells waiters at once"},
	} {
		d := diagnose(tm, grace, margin, rtts, c.cp)
		if d.releaseFail != c.fail {
			t.Errorf("watch lag %v: release failover %v, want %v", c.cp.watchLag, d.releaseFail, c.fail)
		}
		var out bytes.Buffer
		d.print(&out, "x://")
		if !strings.Contains(out.String(), c.says) {
			t.Errorf("watch lag %v: doctor says\n%s\nwant it to say %q", c.cp.watchLag, out.String(), c.says)
		}
	}
}
