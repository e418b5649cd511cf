package zktest

import (
	"os"
	"strings"
	"testing"
	"time"
)

func TestStandalone(t *testing.T) {
	start := time.Now()
	s := Standalone(t, Options{})
	t.Logf("standalone server serving on %s after %v", s.Addr(), time.Since(start))
	if m := s.Mode(); m != "standalone" {
		t.Fatalf("mode %q, want standalone", m)
	}
	s.Kill()
	if s.Mode() != "" || s.Running() {
		t.Fatal("server still answers after Kill")
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	if err := s.WaitServing(30 * time.Second); err != nil {
		t.Fatal(err)
	}
}

func TestEnsemble(t *testing.T) {
	start := time.Now()
	e := NewEnsemble(t, 3, Options{})
	lead, err := e.WaitLeader(ensembleWait, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("ensemble %v has leader member %d after %v", e.Addrs(), lead, time.Since(start))
	// Cut the leader off: the other two elect a new one among themselves.
	e.Isolate(lead)
	start = time.Now()
	nl, err := e.WaitLeader(ensembleWait, map[int]bool{lead: true})
	if err != nil {
		t.Fatal(err)
	}
	if nl == lead {
		t.Fatalf("the cut-off member %d still leads", lead)
	}
	t.Logf("member %d leads after the cut, %v later; the cut-off member says %q", nl, time.Since(start), e.Servers[lead].Mode())
	e.Heal()
	if _, err := e.WaitLeader(ensembleWait, nil); err != nil {
		t.Fatal(err)
	}
}

// ensembleWait bounds an election. Generous: on a loaded CI machine (the
// chaos suite beside these JVMs) one re-election was not seen within 30 s.
const ensembleWait = 60 * time.Second

// A member whose process ended by itself (ZooKeeper exits when it cannot bind
// a port) is reported with its log at once, not waited for as if it were
// still electing; a member the test killed is skipped.
func TestWaitLeaderReportsAMemberThatExited(t *testing.T) {
	s := Standalone(t, Options{})
	p, err := os.FindProcess(s.PID()) // the server this test started
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	<-s.exit
	if s.Running() {
		t.Fatal("Running() after the process exited")
	}
	e := &Ensemble{Servers: []*Server{s}}
	_, err = e.WaitLeader(time.Minute, nil)
	if err == nil || !strings.Contains(err.Error(), "member 0 (") || !strings.Contains(err.Error(), "exited") {
		t.Fatalf("WaitLeader with a member that exited: %v", err)
	}
	// A member that exited can be started again.
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	if err := s.WaitServing(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	// Control: once the test has killed it, the member is skipped, and the
	// wait ends in the ordinary way.
	s.Kill()
	_, err = e.WaitLeader(200*time.Millisecond, nil)
	if err == nil || strings.Contains(err.Error(), "exited") || !strings.Contains(err.Error(), "no agreed leader") {
		t.Fatalf("WaitLeader with a killed member: %v", err)
	}
}
