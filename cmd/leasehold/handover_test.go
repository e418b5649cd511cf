package main_test

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"
)

// Hand-over timings: a 10 s lease, so that "well under a lease duration" is
// a wide margin; SQLite has no watch, so the holder reads the request once
// per renew interval and the standbys poll every retry period.
const handoverLease = 10 * time.Second

var handoverTimingArgs = []string{"--lease-duration", "10s", "--renew-interval", "1s", "--retry-period", "300ms"}

// holderID reads a run's holder identity from its "contending" log line.
func holderID(t *testing.T, n *node) string {
	t.Helper()
	re := regexp.MustCompile(`holder=(` + regexp.QuoteMeta(n.name) + `-[0-9a-f]{8})`)
	var id string
	waitUntil(t, 10*time.Second, n.name+"'s identity in its log", func() bool {
		m := re.FindStringSubmatch(n.log())
		if m != nil {
			id = m[1]
		}
		return m != nil
	})
	return id
}

// startTrio starts a (the holder), then b and c (standing by), on one lease.
func startTrio(t *testing.T, storeURL string) (a, b, c *node) {
	dir := t.TempDir()
	args := append([]string{"--store", storeURL, "--lease", "e2e"}, handoverTimingArgs...)
	a = startRun(t, dir, "a", []string{"E2E_TERM_EXIT=0"}, args...)
	waitUntil(t, 20*time.Second, "a's command to start", func() bool { return len(a.record().starts) > 0 })
	b = startRun(t, dir, "b", nil, args...)
	c = startRun(t, dir, "c", nil, args...)
	for _, n := range []*node{b, c} {
		waitUntil(t, 10*time.Second, n.name+" to stand by", func() bool { return strings.Contains(n.log(), "standing by") })
	}
	return a, b, c
}

// TestHandoverSQLite: two standbys; `leasehold handover --to` the second
// one. The holder's command is stopped (SIGTERM) and gone before the named
// successor's command starts, which is well under a lease duration after the
// request; the other standby never takes the lease; tokens rise (a's, the
// reservation's, b's).
func TestHandoverSQLite(t *testing.T) { handoverTo(t, sqliteURL(t)) }

// The same on the stores whose Transfer is a transaction of their own:
// etcd (one Txn), NATS (a compare-and-set on the key's revision) and
// ZooKeeper (a multi-op). Their tokens are revisions and zxids, which rise
// by more than one per grant.
func TestHandoverEtcd(t *testing.T) { handoverTo(t, "etcd://"+embeddedEtcd(t)+"/lh-cli-handover") }

func TestHandoverNATS(t *testing.T) { handoverTo(t, "nats://"+embeddedNATS(t)+"/lh-cli-handover") }

func TestHandoverZooKeeper(t *testing.T) { handoverTo(t, zookeeperURL(t)) }

func handoverTo(t *testing.T, url string) {
	a, b, c := startTrio(t, url)
	bID := holderID(t, b)
	aStart := a.record().starts[0]

	asked := time.Now()
	code, out, errOut := leasehold(t, nil, "handover", "--store", url, "--lease", "e2e", "--to", bID, "--prefer-for", "2s")
	if code != 0 {
		t.Fatalf("handover: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	if !strings.Contains(out, bID+" took over") {
		t.Fatalf("handover output does not say %s took over:\n%s", bID, out)
	}
	waitUntil(t, 10*time.Second, "b's command to start", func() bool { return len(b.record().starts) > 0 })
	bStart := b.record().starts[0]
	ar := a.record()
	switch {
	case len(ar.terms) != 1 || ar.sigs[0] != "terminated":
		t.Fatalf("a's command got signals %v, want one SIGTERM", ar.sigs)
	case ar.terms[0].Before(asked):
		t.Fatalf("a's command was signalled before the request")
	case !processGone(aStart.pid):
		t.Fatalf("a's command (pid %d) is still running after b took over", aStart.pid)
	case !ar.ticks[len(ar.ticks)-1].at.Before(bStart.at):
		t.Fatalf("a's command ticked at %v, after b's started at %v", ar.ticks[len(ar.ticks)-1].at, bStart.at)
	case bStart.holder != bID || bStart.token <= aStart.token:
		t.Fatalf("b's command started as %s with token %d; want %s with a token above a's %d", bStart.holder, bStart.token, bID, aStart.token)
	case !strings.HasPrefix(url, "sqlite:"):
	case bStart.token != aStart.token+2:
		t.Fatalf("b's command started with token %d; want %d (a's %d, then the reservation's)", bStart.token, aStart.token+2, aStart.token)
	}
	took := bStart.at.Sub(asked)
	if took >= handoverLease/2 {
		t.Fatalf("b took over %v after the request: not well under the %v lease", took, handoverLease)
	}
	// Past the preference window and several of c's retry periods, c has
	// never led, and b still does.
	waitUntil(t, 10*time.Second, "the preference window to pass", func() bool { return time.Since(bStart.at) > 3*time.Second })
	if cr := c.record(); len(cr.starts) != 0 {
		t.Fatalf("c led during or after the hand-over to b: %+v", cr.starts)
	}
	if br := b.record(); len(br.starts) != 1 || len(br.terms) != 0 {
		t.Fatalf("b's command: %d starts, %d signals; want one start, still running", len(br.starts), len(br.terms))
	}
	if !strings.Contains(a.log(), "reason=handed-over") {
		t.Errorf("a's log does not say its term was handed over:\n%s", a.log())
	}
	t.Logf("b took over %v after the request (lease %v), token %d; a's command stopped %v after it",
		took.Round(time.Millisecond), handoverLease, bStart.token, ar.terms[0].Sub(asked).Round(time.Millisecond))
}

// TestHandoverSuccessorAbsentSQLite is the negative control of the test
// above: named successor that does not exist holds the lease for the
// preference window only, after which a standby that was not named takes
// over: the standbys of the test above could have taken the lease, and did
// not only because the store refused them.
func TestHandoverSuccessorAbsentSQLite(t *testing.T) {
	url := sqliteURL(t)
	a, b, c := startTrio(t, url)
	aStart := a.record().starts[0]
	asked := time.Now()
	code, out, errOut := leasehold(t, nil, "handover", "--store", url, "--lease", "e2e", "--to", "ghost-00000000", "--prefer-for", "2s")
	if code != 0 || !strings.Contains(out, "did not take over") {
		t.Fatalf("handover: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	var next start
	waitUntil(t, 10*time.Second, "a standby to take over", func() bool {
		for _, n := range []*node{b, c} {
			if s := n.record().starts; len(s) > 0 {
				next = s[0]
				return true
			}
		}
		return false
	})
	if d := next.at.Sub(asked); d < 2*time.Second || d >= handoverLease {
		t.Fatalf("%s took over %v after the request; want after the 2 s preference window, well before a lease", next.holder, d)
	}
	if next.token != aStart.token+2 {
		t.Fatalf("next token %d, want %d (above the ghost's reservation)", next.token, aStart.token+2)
	}
	// handover watches for the window's length from when it saw a's term
	// end, a little longer than the reservation lasts, so it may see the
	// standby take over; if it says so, it names the right one.
	if i := strings.Index(out, "; "); i >= 0 && strings.Contains(out[i:], "took over with token") {
		want := fmt.Sprintf("; %s took over with token %d", next.holder, next.token)
		if !strings.Contains(out, want) {
			t.Fatalf("handover says:\n%s\nwant it to name the standby that took over (%q)", out, want)
		}
		t.Logf("handover saw the standby take over: %s", strings.TrimSpace(out))
	}
}

// Bad requests: nothing held, a bad successor, no lease name.
func TestHandoverBadRequests(t *testing.T) {
	url := sqliteURL(t)
	if code, _, errOut := leasehold(t, nil, "migrate", "--store", url); code != 0 {
		t.Fatalf("migrate: %d %s", code, errOut)
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--lease", "nobody"}, 1, "no lease named nobody"},
		{[]string{"--lease", "e2e", "--to", "has space"}, 2, "--to"},
		{[]string{"--to", "x-1"}, 2, "--lease is required"},
		{[]string{"--lease", "e2e", "--prefer-for", "-1s"}, 2, "--prefer-for"},
	} {
		code, _, errOut := leasehold(t, nil, append([]string{"handover", "--store", url}, c.args...)...)
		if code != c.code || !strings.Contains(errOut, c.want) {
			t.Errorf("handover %v: exit %d, %q; want exit %d naming %q", c.args, code, errOut, c.code, c.want)
		}
	}
}
