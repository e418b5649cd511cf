package etcd

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/freeport"

	"go.etcd.io/etcd/server/v3/embed"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/storetest"
)

// The tests in this file run a three-member etcd cluster inside the test
// process, on loopback, and fail members under leasehold electors: the member
// a client talks to stops, the raft leader crashes, a minority is cut off.
// Throughout, a ledger checks that no two electors ever lead at once and that
// every new leader's token is above the last one.

type cluster struct {
	members []*member
	part    *partition // nil without proxies
	closing sync.WaitGroup
}

// clusterOpts: etcd's default timings (100 ms heartbeat, 1 s election
// timeout), so etcd's minimum lease TTL is 2 s.
func clusterOpts() memberOpts { return memberOpts{tickMs: 100, electionMs: 1000} }

// startCluster starts n members on loopback. With proxies, every member's
// peer traffic passes through a peerProxy, so that members can be cut off.
func startCluster(t *testing.T, n int, proxies bool) *cluster {
	t.Helper()
	c := &cluster{}
	if proxies {
		c.part = newPartition()
	}
	clientPorts := make([]int, n)
	peerPorts := make([]int, n)
	adv := make([]string, n)
	proxyOf := make([]*peerProxy, n)
	var initial []string
	for i := 0; i < n; i++ {
		clientPorts[i], peerPorts[i] = freeport.ForTest(t), freeport.ForTest(t)
		real := fmt.Sprintf("http://127.0.0.1:%d", peerPorts[i])
		adv[i] = real
		if proxies {
			proxyOf[i] = startPeerProxy(t, c.part, real)
			adv[i] = proxyOf[i].url()
		}
		initial = append(initial, fmt.Sprintf("m%d=%s", i, adv[i]))
	}
	token := uniquePrefix("cluster")
	for i := 0; i < n; i++ {
		cfg := newMemberConfig(t, fmt.Sprintf("m%d", i), clusterOpts(), clientPorts[i], peerPorts[i], adv[i])
		cfg.InitialCluster = strings.Join(initial, ",")
		cfg.InitialClusterToken = strings.TrimSuffix(token, "/")
		e, err := embed.StartEtcd(cfg)
		if err != nil {
			t.Fatalf("start member %d: %v", i, err)
		}
		c.members = append(c.members, &member{name: cfg.Name, cfg: cfg, etcd: e,
			clientURL: fmt.Sprintf("http://127.0.0.1:%d", clientPorts[i]), peerURL: adv[i], proxy: proxyOf[i]})
	}
	t.Cleanup(c.stopAll)
	for i, m := range c.members {
		select {
		case <-m.etcd.Server.ReadyNotify():
		case err := <-m.etcd.Err():
			t.Fatalf("member %d failed: %v", i, err)
		case <-time.After(30 * time.Second):
			t.Fatalf("member %d not ready within 30s", i)
		}
		if m.proxy != nil {
			m.proxy.setDest(m.id())
		}
	}
	return c
}

func (m *member) id() string { return m.etcd.Server.MemberID().String() }

// crash stops a member's raft node at once, without the leadership transfer
// a graceful stop makes, then closes its listeners in the background (which
// waits a few seconds for the requests in flight): to its clients and peers
// the member hangs, then goes away.
func (c *cluster) crash(i int) {
	m := c.members[i]
	if m.stopped {
		return
	}
	m.stopped = true
	m.etcd.Server.HardStop()
	c.closing.Add(1)
	go func() {
		defer c.closing.Done()
		m.etcd.Close()
	}()
}

func (c *cluster) stopAll() {
	var wg sync.WaitGroup
	for _, m := range c.members {
		if !m.stopped {
			wg.Add(1)
			go func() { defer wg.Done(); m.etcd.Server.HardStop() }()
		}
	}
	wg.Wait()
	for i := range c.members {
		c.crash(i)
	}
	c.closing.Wait()
}

// endpoints returns the client URLs of the members at idx (all if none).
func (c *cluster) endpoints(idx ...int) []string {
	if len(idx) == 0 {
		for i := range c.members {
			idx = append(idx, i)
		}
	}
	var out []string
	for _, i := range idx {
		out = append(out, c.members[i].clientURL)
	}
	return out
}

// leader waits until the running members agree on a raft leader and returns
// its index.
func (c *cluster) leader(t *testing.T) int {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		lead, agreed := uint64(0), true
		for _, m := range c.members {
			if m.stopped {
				continue
			}
			l := uint64(m.etcd.Server.Leader())
			if lead == 0 {
				lead = l
			}
			if l == 0 || l != lead {
				agreed = false
			}
		}
		if agreed && lead != 0 {
			for i, m := range c.members {
				if !m.stopped && uint64(m.etcd.Server.MemberID()) == lead {
					return i
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the cluster has no agreed raft leader within 30s")
		}
		time.Sleep(20 * time.Millisecond) // polling the servers' state
	}
}

// elector is one leasehold elector running in the background, on its own
// store handle.
type elector struct {
	*storetest.Elector
	st *Store
}

func clusterTimings() leasehold.Timings {
	return leasehold.Timings{
		LeaseDuration: 3 * time.Second,
		RenewDeadline: 2 * time.Second,
		RenewInterval: 500 * time.Millisecond,
		RetryPeriod:   250 * time.Millisecond,
	}
}

func startElector(t *testing.T, l *storetest.Ledger, id, prefix string, endpoints []string) *elector {
	t.Helper()
	st := openStore(t, prefix, endpoints...)
	return &elector{Elector: l.Start(t, st, id, clusterTimings()), st: st}
}

// TestClusterClientMemberStops: two electors, each with a client on all three
// members; a member they talk to (round-robin) stops mid-lease. The lease
// survives through the other two, or the holder steps down before a rival
// leads.
func TestClusterClientMemberStops(t *testing.T) {
	if testing.Short() {
		t.Skip("three-member cluster test")
	}
	c := startCluster(t, 3, false)
	l := storetest.NewLedger(t)
	prefix := uniquePrefix("stop")
	a := startElector(t, l, "a", prefix, c.endpoints())
	storetest.WaitFor(t, 20*time.Second, "a leads", func() bool { who, _ := l.Leading(); return who != "" })
	b := startElector(t, l, "b", prefix, c.endpoints())
	_, tok0 := l.Leading()
	lead := c.leader(t)
	victim := (lead + 1) % 3
	before := a.Renewals() + b.Renewals()
	l.Note("stopping member %d (a follower); raft leader is member %d", victim, lead)
	c.crash(victim)
	// Liveness: the holder renews through the remaining members, or a new
	// term leads and renews; either way the cluster keeps granting.
	storetest.WaitFor(t, 20*time.Second, "renewals continue or a new term leads after the member stopped", func() bool {
		return progressed(l, tok0, a, b, before)
	})
	who, tok := l.Leading()
	l.Note("after the stop: %s leads with token %d; a renewed %d times since", who, tok, a.Renewals()-before)
	checkLive(t, l, c.endpoints(lead, 3-lead-victim), prefix, who, tok)
}

// progressed reports whether, since the electors had made before renewals in
// all, the term tok0 renewed four more times, or a newer term leads and
// renewed twice.
func progressed(l *storetest.Ledger, tok0 int64, a, b *elector, before int) bool {
	who, tok := l.Leading()
	switch {
	case who == "":
		return false
	case tok == tok0:
		return a.Renewals()+b.Renewals() >= before+4
	default:
		return a.Renewals()+b.Renewals() >= before+2
	}
}

// checkLive reads the lease through the given members and checks that the
// term the ledger says leads is the live term in etcd.
func checkLive(t *testing.T, l *storetest.Ledger, endpoints []string, prefix, who string, tok int64) {
	t.Helper()
	st := openStore(t, prefix, endpoints...)
	r, err := st.Get(testCtx(t, 10*time.Second), "leader")
	if err != nil {
		t.Fatalf("Get through the remaining members: %v", err)
	}
	if cw, ct := l.Leading(); cw != who || ct != tok {
		return // the lead moved meanwhile; the ledger checked that move
	}
	if !r.Live() || r.Holder != who || r.Token != tok {
		t.Fatalf("etcd says %+v while %s leads with token %d", r, who, tok)
	}
}

// TestClusterLeaderCrashes: the raft leader crashes mid-lease. etcd elects a
// new leader and extends every lease by an election timeout; the holder
// either renews through the new leader or steps down before a rival leads,
// and the cluster keeps granting with higher tokens.
func TestClusterLeaderCrashes(t *testing.T) {
	if testing.Short() {
		t.Skip("three-member cluster test")
	}
	c := startCluster(t, 3, false)
	l := storetest.NewLedger(t)
	prefix := uniquePrefix("lead")
	a := startElector(t, l, "a", prefix, c.endpoints())
	storetest.WaitFor(t, 20*time.Second, "a leads", func() bool { who, _ := l.Leading(); return who != "" })
	b := startElector(t, l, "b", prefix, c.endpoints())
	_, tok0 := l.Leading()
	lead := c.leader(t)
	before := a.Renewals() + b.Renewals()
	l.Note("crashing the raft leader, member %d", lead)
	c.crash(lead)
	newLead := c.leader(t)
	l.Note("new raft leader: member %d", newLead)
	storetest.WaitFor(t, 30*time.Second, "a term leads and renews after the leader change", func() bool {
		return progressed(l, tok0, a, b, before)
	})
	who, tok := l.Leading()
	l.Note("after the leader change: %s leads with token %d", who, tok)
	var rest []int
	for i := range c.members {
		if i != lead {
			rest = append(rest, i)
		}
	}
	checkLive(t, l, c.endpoints(rest...), prefix, who, tok)
}

// TestClusterMinorityCutOff: one member is cut off from the other two by the
// peer proxies (raft traffic both ways). The holder's client talks only to
// that member; the rival's client talks to the other two. The holder cannot
// renew (a linearizable read needs the majority), steps down at its
// safeUntil, and only then does the rival lead, once etcd expired the lease.
// Run with the cut-off member a follower, and the raft leader itself (which
// still believes it leads, and answers keep-alives locally, until it notices
// it lost its quorum).
func TestClusterMinorityCutOff(t *testing.T) {
	if testing.Short() {
		t.Skip("three-member cluster test")
	}
	for _, which := range []string{"follower", "leader"} {
		t.Run(which, func(t *testing.T) {
			c := startCluster(t, 3, true)
			lead := c.leader(t)
			cut := lead
			if which == "follower" {
				cut = (lead + 1) % 3
			}
			var rest []int
			for i := range c.members {
				if i != cut {
					rest = append(rest, i)
				}
			}
			l := storetest.NewLedger(t)
			prefix := uniquePrefix("cut")
			h := startElector(t, l, "h", prefix, c.endpoints(cut))
			storetest.WaitFor(t, 20*time.Second, "h leads", func() bool { who, _ := l.Leading(); return who != "" })
			hWho, hTok := l.Leading()
			storetest.WaitFor(t, 10*time.Second, "h renews", func() bool { return h.Renewals() >= 2 })
			startElector(t, l, "r", prefix, c.endpoints(rest...))
			l.Note("cutting off member %d (%s); the holder's client talks only to it", cut, which)
			c.part.isolate(c.members[cut].id())
			storetest.WaitFor(t, 30*time.Second, "the rival leads", func() bool {
				who, _ := l.Leading()
				return strings.HasPrefix(who, "r-")
			})
			rWho, rTok := l.Leading()
			if rTok <= hTok {
				t.Fatalf("rival token %d not above the cut-off holder's %d", rTok, hTok)
			}
			checkLive(t, l, c.endpoints(rest...), prefix, rWho, rTok)
			// Heal: the cut-off member catches up, and the old term's renewal
			// through it is refused.
			c.part.heal()
			old := store.Term{Name: "leader", Holder: hWho, Token: hTok}
			hst := openStore(t, prefix, c.endpoints(cut)...)
			storetest.WaitFor(t, 30*time.Second, "the old term's renewal is refused after healing", func() bool {
				_, err := hst.Renew(testCtx(t, 3*time.Second), old, 3*time.Second)
				return errors.Is(err, store.ErrNotHeld)
			})
		})
	}
}
