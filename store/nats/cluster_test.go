package nats

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/freeport"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store/storetest"
)

// The test in this file runs a three-server JetStream cluster inside the
// test process, on loopback, with the leases in an R3 bucket, and kills
// servers under three leasehold electors: first the server that leads the
// bucket's stream, then (after it is back) the JetStream meta-leader.
// Throughout, a ledger checks that no two electors ever lead at once and
// that every new leader's token is above the last one.

type natsCluster struct {
	t       *testing.T
	servers []*natsServer
}

func startCluster(t *testing.T, n int) *natsCluster {
	t.Helper()
	c := &natsCluster{t: t}
	routes := make([]string, n)
	clusterPorts := make([]int, n)
	name := "lh-" + randHex(2)
	for i := range n {
		clusterPorts[i] = freeport.ForTest(t)
		routes[i] = fmt.Sprintf("nats://127.0.0.1:%d", clusterPorts[i])
	}
	for i := range n {
		opts := serverOptions(t, t.TempDir())
		opts.ServerName = fmt.Sprintf("m%d", i)
		opts.Cluster = server.ClusterOpts{Name: name, Host: "127.0.0.1", Port: clusterPorts[i]}
		opts.Routes = server.RoutesFromStr(strings.Join(routes, ","))
		c.servers = append(c.servers, &natsServer{t: t, opts: opts})
	}
	// Start them together: each waits for the others' routes.
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i, s := range c.servers {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = s.start() }()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("server %d: %v", i, err)
		}
	}
	t.Cleanup(func() {
		for _, s := range c.servers {
			s.stop()
		}
	})
	// A meta-leader alone is not enough: until it has heard from every
	// server, making an R3 bucket fails with "no suitable peers for
	// placement" or hangs.
	c.waitIndex(fmt.Sprintf("JetStream meta-leader that sees all %d servers", n), func(s *server.Server) bool {
		return s.JetStreamIsLeader() && len(s.JetStreamClusterPeers()) == n
	})
	return c
}

func (c *natsCluster) urls() []string {
	var out []string
	for _, s := range c.servers {
		out = append(out, s.url())
	}
	return out
}

// waitIndex polls the running servers until pick finds one, or fails.
func (c *natsCluster) waitIndex(what string, pick func(*server.Server) bool) int {
	c.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		for i, s := range c.servers {
			if s.srv != nil && pick(s.srv) {
				return i
			}
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("no %s within 60s", what)
		}
		time.Sleep(50 * time.Millisecond) // polling the servers' state
	}
}

func (c *natsCluster) metaLeader() int {
	return c.waitIndex("JetStream meta-leader", (*server.Server).JetStreamIsLeader)
}

func (c *natsCluster) streamLeader(stream string) int {
	return c.waitIndex("leader of stream "+stream, func(s *server.Server) bool {
		return s.JetStreamIsStreamLeader(server.DEFAULT_GLOBAL_ACCOUNT, stream)
	})
}

// state is who leads now, with its token, and how many terms have led.
func state(l *storetest.Ledger) (leader string, token int64, terms int) {
	leader, token = l.Leading()
	return leader, token, l.Terms()
}

// elector is one leasehold elector running in the background, on its own
// store handle.
type elector struct {
	*storetest.Elector
	st *Store
}

// crash closes the elector's store under it, then stops it: its renewals
// and its release fail, so its term ends only when the server expires it.
func (e *elector) crash() {
	e.st.Close()
	e.Stop()
}

func startElector(t *testing.T, l *storetest.Ledger, id string, urls []string, bucket string) *elector {
	t.Helper()
	st, err := Open(testCtx(t, 30*time.Second), Config{Servers: urls, Options: Options{Bucket: bucket, Replicas: 3}})
	if err != nil {
		t.Fatalf("open store for %s: %v", id, err)
	}
	t.Cleanup(func() { st.Close() }) // after the elector has stopped
	timings := leasehold.Timings{LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RenewInterval: 500 * time.Millisecond, RetryPeriod: 250 * time.Millisecond}
	return &elector{Elector: l.Start(t, st, id, timings), st: st}
}

// renewals counts successful renewals across the electors.
func renewals(electors map[string]*elector) func() int {
	return func() int {
		n := 0
		for _, e := range electors {
			n += e.Renewals()
		}
		return n
	}
}

// progress waits until, after a fault, the electors renew again or a new
// term leads: the cluster keeps granting.
func progress(t *testing.T, l *storetest.Ledger, r func() int, what string) {
	t.Helper()
	_, _, terms0 := state(l)
	r0 := r()
	deadline := time.Now().Add(60 * time.Second)
	for {
		who, tok, terms := state(l)
		if who != "" && (terms > terms0 || r() >= r0+3) {
			l.Note("after %s: %s leads with token %d (%d new terms, %d renewals)", what, who, tok, terms-terms0, r()-r0)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: no leader renewing within 60s", what)
		}
		time.Sleep(50 * time.Millisecond) // polling the ledger
	}
}

func TestClusterR3KillMembers(t *testing.T) {
	if testing.Short() {
		t.Skip("three-server cluster test")
	}
	c := startCluster(t, 3)
	bucket := uniqueBucket("r3")
	l := storetest.NewLedger(t)
	electors := map[string]*elector{}
	for _, id := range []string{"a", "b", "c"} {
		electors[id] = startElector(t, l, id, c.urls(), bucket)
	}
	r := renewals(electors)
	progress(t, l, r, "start")

	// 1. Kill the server that leads the bucket's stream.
	victim := c.streamLeader("KV_" + bucket)
	l.Note("killing m%d, the leader of KV_%s", victim, bucket)
	c.servers[victim].stop()
	progress(t, l, r, fmt.Sprintf("killing the stream leader m%d", victim))
	l.Note("restarting m%d", victim)
	if err := c.servers[victim].start(); err != nil {
		t.Fatal(err)
	}
	progress(t, l, r, fmt.Sprintf("restarting m%d", victim))

	// 2. Kill the JetStream meta-leader.
	meta := c.metaLeader()
	l.Note("killing m%d, the JetStream meta-leader", meta)
	c.servers[meta].stop()
	progress(t, l, r, fmt.Sprintf("killing the meta-leader m%d", meta))
	newMeta := c.metaLeader()
	if newMeta == meta {
		t.Fatalf("the killed server m%d is still the meta-leader", meta)
	}

	// 3. The leader crashes (no release): the server of the surviving
	// two expires its key, and another elector takes over, on a higher token.
	who, tok0, terms0 := state(l)
	l.Note("crashing the leading elector %s (token %d)", who, tok0)
	electors[strings.SplitN(who, "-", 2)[0]].crash()
	deadline := time.Now().Add(60 * time.Second)
	for {
		w, tok, terms := state(l)
		if terms > terms0 && w != "" && w != who {
			l.Note("after the crash: %s leads with token %d", w, tok)
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no takeover within 60s of the leader's crash")
		}
		time.Sleep(50 * time.Millisecond) // polling the ledger
	}

	_, tok, terms := state(l)
	t.Logf("%d terms, last token %d; no two holders, tokens rising", terms, tok)
}
