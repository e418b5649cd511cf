package main

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/internal/testenv"
)

// TestQuick runs the whole program in -quick mode (one short round, under a
// minute) against the servers of this machine: Redis and PostgreSQL on
// loopback (a missing one is a loud skip, a failure in CI) and an embedded
// etcd. It checks that every scenario produced samples and that no mutual
// exclusion violation was seen; it asserts no speed (the targets are
// reported, never tested).
func TestQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the quick benchmark takes about a minute")
	}
	testenv.RequireTCP(t, "Redis", testenv.Env("LEASEHOLD_REDIS_ADDR", "127.0.0.1:6379"), "start redis-server on 127.0.0.1:6379")
	testenv.RequireTCP(t, "PostgreSQL", "127.0.0.1:5432", "start PostgreSQL on 127.0.0.1:5432 (user postgres, trust auth, database test)")
	dir := t.TempDir()
	jsonPath := dir + "/results.json"
	svgPath := dir + "/chart.svg"
	var out bytes.Buffer
	stdout := os.Stdout
	r, w, _ := os.Pipe()
	os.Stdout = w
	done := make(chan struct{})
	go func() {
		out.ReadFrom(r)
		close(done)
	}()
	code := run([]string{"-quick", "-stores", "redis,postgres,etcd", "-json", jsonPath, "-svg", svgPath, "-require-all"})
	w.Close()
	os.Stdout = stdout
	<-done
	t.Logf("output:\n%s", out.String())
	if code != 0 {
		t.Fatalf("bench -quick exited %d", code)
	}
	res, err := readResults(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Samples["fence"][fwClaim]) == 0 || len(res.Samples["fence"][fwTx]) == 0 {
		t.Errorf("no fenced-write samples")
	}
	for _, sc := range []string{scHandoff, scEarly, scFailover, scCycles, scContention} {
		for _, st := range []string{"redis", "postgres", "etcd"} {
			found := false
			for k, xs := range res.Samples[sc] {
				if strings.HasPrefix(k, st+"/leasehold") && len(xs) > 0 {
					found = true
				}
			}
			if !found {
				t.Errorf("no leasehold samples for %s on %s", sc, st)
			}
		}
	}
	if len(res.Renew) == 0 {
		t.Errorf("no renewal-cost measurements")
	}
	if v := totalViolations(res); v != 0 {
		t.Errorf("%d mutual exclusion violations: %v", v, res.Violations)
	}
	svg, err := os.ReadFile(svgPath)
	if err != nil || !bytes.Contains(svg, []byte("<svg")) || !bytes.Contains(svg, []byte("leasehold")) {
		t.Errorf("chart not written or empty: %v", err)
	}
	if !strings.Contains(out.String(), "== Targets (issue 10)") {
		t.Errorf("report has no targets section")
	}
}
