package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/leasehold/leasehold/store/kubernetes/kubetest"
)

func parseURL(s string) (string, error) {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return "", fmt.Errorf("not a postgres URL")
	}
	return u.Hostname(), nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

type envs struct {
	redis *redisEnv
	pg    *pgEnv
	my    *myEnv
	etcd  *etcdEnv
	zk    *zkEnv
	kube  *kubeEnv
	nats  *natsEnv
	renew *renewEnv
	fence *fenceEnv
	cmd   *cmdTools // the command hand-off's binaries
}

func (e *envs) close() {
	if e.cmd != nil {
		e.cmd.close()
	}
	if e.fence != nil {
		e.fence.close()
	}
	if e.renew != nil {
		e.renew.close()
	}
	if e.redis != nil {
		e.redis.close()
	}
	if e.pg != nil {
		e.pg.close()
	}
	if e.my != nil {
		e.my.close()
	}
	if e.etcd != nil {
		e.etcd.close()
	}
	if e.nats != nil {
		e.nats.close()
	}
	if e.zk != nil {
		e.zk.close()
	}
	if e.kube != nil {
		e.kube.close()
	}
}

func runAll(ctx context.Context, o options, args []string) (*Results, error) {
	r := newResults()
	r.Started = time.Now().UTC().Format(time.RFC3339)
	r.Command = "go run . " + strings.Join(args, " ")
	r.FailoverLeaseMs = ms(o.failTTL)
	if o.stores["kubernetes"] && o.kubeFailTTL != o.failTTL {
		r.FailoverLeaseMsByStore = map[string]float64{"kubernetes": ms(o.kubeFailTTL)}
	}
	machine(r)
	runID := randHex(4)
	var e envs
	defer e.close()
	missing := func(store string, err error) error {
		msg := fmt.Sprintf("SKIP %s: %v", store, err)
		logf("%s", msg)
		r.Machine["skipped "+store] = err.Error()
		if o.requireStore {
			return fmt.Errorf("%s (and -require-all is set)", msg)
		}
		return nil
	}
	octx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	var libs []*lib
	if o.stores["redis"] {
		re, err := openRedis(octx, o.redisAddr, runID)
		if err != nil {
			if err := missing("redis", err); err != nil {
				return nil, err
			}
		} else {
			e.redis = re
			r.Machine["redis"] = re.version(octx)
			libs = append(libs, re.floorLib())
			libs = append(libs, re.libs(o.handoffTTL)...)
			libs = append(libs, fairLibs("redis", re.st, o.handoffTTL, "pub/sub watch")...)
			libs = append(libs, lhTryLib("redis", re.st, o.handoffTTL))
		}
	}
	if o.stores["postgres"] {
		pe, err := openPostgres(octx, o.pgDSN, runID)
		if err != nil {
			if err := missing("postgres", err); err != nil {
				return nil, err
			}
		} else {
			e.pg = pe
			r.Machine["postgres"] = pe.version(octx)
			libs = append(libs, pe.floorLib())
			libs = append(libs, pe.libs(o.handoffTTL, o.pglockLease)...)
			libs = append(libs, fairLibs("postgres", pe.st, o.handoffTTL, "LISTEN/NOTIFY watch")...)
			libs = append(libs, lhTryLib("postgres", pe.st, o.handoffTTL))
		}
	}
	if o.stores["mysql"] {
		me, err := openMySQL(octx, o.myDSN, runID)
		if err == nil {
			var ls []*lib
			if ls, err = me.libs(octx, o.handoffTTL); err == nil {
				e.my = me
				r.Machine["mysql"] = me.version(octx)
				libs = append(libs, me.floorLib())
				libs = append(libs, ls...)
				libs = append(libs, lhTryLib("mysql", me.st, o.handoffTTL))
			} else {
				me.close()
			}
		}
		if err != nil {
			if err := missing("mysql", err); err != nil {
				return nil, err
			}
		}
	}
	if o.stores["etcd"] {
		ee, err := startEtcd(octx, o.etcdFsync, runID)
		if err != nil {
			if err := missing("etcd", err); err != nil {
				return nil, err
			}
		} else {
			e.etcd = ee
			r.Machine["etcd"] = ee.version()
			libs = append(libs, ee.floorLib())
			libs = append(libs, ee.libs(o.handoffTTL)...)
			libs = append(libs, fairLibs("etcd", ee.st, o.handoffTTL, "watch from the next revision")...)
			libs = append(libs, lhTryLib("etcd", ee.st, o.handoffTTL))
			if o.scenarios["cmd"] {
				logf("building leasehold and etcdctl %s for the command hand-off", etcdctlVersion)
				if e.cmd, err = buildCmdTools(octx); err != nil {
					logf("command hand-off skipped: %v", err)
					r.fail(scCmdHandoff, "build")
				}
			}
		}
	}
	if o.stores["nats"] {
		ne, err := startNATS(octx, runID)
		if err != nil {
			if err := missing("nats", err); err != nil {
				return nil, err
			}
		} else {
			e.nats = ne
			r.Machine["nats"] = ne.version()
			libs = append(libs, ne.floorLib())
			libs = append(libs, ne.libs(o.handoffTTL)...)
			libs = append(libs, fairLibs("nats", ne.st, o.handoffTTL, "KV watch")...)
			libs = append(libs, lhTryLib("nats", ne.st, o.handoffTTL))
		}
	}
	if o.stores["zookeeper"] {
		ze, err := startZooKeeper(octx, runID)
		if err != nil {
			if err := missing("zookeeper", err); err != nil {
				return nil, err
			}
		} else {
			e.zk = ze
			r.Machine["zookeeper"] = ze.version()
			libs = append(libs, ze.floorLib())
			libs = append(libs, ze.libs(o.handoffTTL)...)
			libs = append(libs, ze.fairLibs(o.handoffTTL)...)
			libs = append(libs, lhTryLib("zookeeper", ze.st, o.handoffTTL))
		}
	}
	if o.stores["kubernetes"] {
		bin, err := kubetest.BinDir()
		if err != nil {
			if err := missing("kubernetes", err); err != nil {
				return nil, err
			}
		} else {
			start := time.Now()
			ke, err := startKube(octx, bin, runID)
			if err != nil {
				if err := missing("kubernetes", err); err != nil {
					return nil, err
				}
			} else {
				e.kube = ke
				logf("kube-apiserver ready after %v", time.Since(start).Round(time.Millisecond))
				r.Machine["kubernetes"] = ke.version
				libs = append(libs, ke.floorLib())
				libs = append(libs, ke.libs(o.kubeTTL)...)
				libs = append(libs, ke.fairLibs(o.kubeTTL)...)
			}
		}
	}
	if len(libs) == 0 {
		return nil, fmt.Errorf("no store to run on")
	}
	for _, l := range libs {
		r.Config[l.key()] = l.config
	}
	if e.pg != nil && o.scenarios["renew"] && len(o.renewSizes) > 0 {
		maxN := 0
		for _, n := range o.renewSizes {
			maxN = max(maxN, n)
		}
		start := time.Now()
		re, err := e.pg.openRenew(octx, maxN)
		if err != nil {
			logf("renew scenario: %v", err)
			r.fail("renew", "postgres")
		} else {
			e.renew = re
			logf("renewal scenario: %d leases acquired in %v; %d backends measured", maxN, time.Since(start).Round(time.Millisecond), len(re.pids))
		}
	}
	if e.pg != nil && o.scenarios["fence"] {
		fe, err := e.pg.openFence(octx)
		if err != nil {
			logf("fence scenario: %v", err)
			r.fail("fence", "postgres")
		} else {
			e.fence = fe
		}
	}

	began := time.Now()
	for round := 0; round < o.rounds && ctx.Err() == nil; round++ {
		rs := time.Now()
		runRound(ctx, r, o, &e, libs, round)
		logf("round %d/%d done in %v", round+1, o.rounds, time.Since(rs).Round(time.Millisecond))
	}
	r.Machine["duration"] = time.Since(began).Round(time.Second).String()
	if o.diag > 0 && ctx.Err() == nil {
		var b strings.Builder
		runDiag(ctx, &b, &e, o.diag)
		if e.kube != nil {
			kubeHandoffDiag(ctx, &b, e.kube, o.kubeTTL, o.earlyMax, o.diag)
		}
		r.Diag = b.String()
	}
	return r, ctx.Err()
}

// rotate returns libs starting at offset i, so that no library always runs
// first in a round.
func rotate(libs []*lib, i int) []*lib {
	if len(libs) == 0 {
		return nil
	}
	i %= len(libs)
	return append(append([]*lib(nil), libs[i:]...), libs[:i]...)
}

func runRound(ctx context.Context, r *Results, o options, e *envs, libs []*lib, round int) {
	order := rotate(libs, round)
	tag := func(sc string, l *lib) string {
		return fmt.Sprintf("%s-%s-r%d-%s", sc, strings.NewReplacer(" ", "-", "(", "", ")", "").Replace(l.name), round, randHex(3))
	}
	if o.scenarios["handoff"] {
		for _, l := range order {
			if l.kind == "try" {
				continue
			}
			runHandoff(ctx, r, scHandoff, l, tag("h", l), o.handoffs, func(int) time.Duration { return o.long })
		}
	}
	if o.scenarios["early"] {
		for _, l := range order {
			if l.kind == "try" {
				continue
			}
			runHandoff(ctx, r, scEarly, l, tag("e", l), o.handoffs, func(int) time.Duration {
				return time.Duration(rand.Int64N(int64(o.earlyMax)))
			})
		}
	}
	if o.scenarios["failover"] {
		for i := 0; i < o.failovers; i++ {
			for _, l := range order {
				if l.kind == "try" || (l.kind == "floor" && l.store != "etcd") {
					continue
				}
				// zk.Lock has no renewal to stop (its session is its
				// lease, kept by the client library), and neither has
				// leasehold's: a "crash" stops the Store's calls, while
				// the client keeps its session alive. No failover there.
				if l.store == "zookeeper" {
					continue
				}
				runFailover(ctx, r, l, tag("f", l), o.failTTLFor(l.store), o.failPhase)
			}
		}
	}
	if o.scenarios["cycles"] {
		for _, l := range order {
			if l.kind == "elector" {
				continue
			}
			if l.store == "kubernetes" {
				continue
			}
			runCycles(ctx, r, l, tag("c", l), o.cycleTime)
		}
	}
	if o.scenarios["contention"] {
		for _, l := range order {
			if l.kind != "lock" {
				continue
			}
			cr := runContention(ctx, r, l, tag("k", l), o.contenders, o.contendTime)
			if cr != nil {
				r.mu.Lock()
				r.Contention[l.key()] = append(r.Contention[l.key()], cr)
				r.mu.Unlock()
			}
		}
	}
	if e.renew != nil && o.scenarios["renew"] {
		for _, n := range o.renewSizes {
			terms := e.renew.terms[:n]
			// Interleave: alternate which method goes first.
			methods := []bool{false, true}
			if round%2 == 1 {
				methods = []bool{true, false}
			}
			for _, batch := range methods {
				minDur := 300 * time.Millisecond
				if !batch {
					minDur = 0 // one pass: it takes long enough
				}
				c := e.renew.measure(ctx, terms, batch, minDur)
				name := "one statement per lease"
				if batch {
					name = "one batched statement"
				}
				addRenew(r, fmt.Sprintf("%d/%s", n, name), c)
			}
		}
	}
	if e.cmd != nil && e.etcd != nil {
		runCmdHandoffs(ctx, r, e.cmd, e.etcd, o.handoffs, cmdStandbyWait, round)
	}
	if e.fence != nil && o.scenarios["fence"] {
		for i := 0; i < o.fenceWrites && ctx.Err() == nil; i++ {
			kinds := rotateStrings(fenceKinds, i)
			for _, k := range kinds {
				d, err := e.fence.write(ctx, k, 1+rand.IntN(100))
				if err != nil {
					r.fail("fence", k)
					logf("fence %s: %v", k, err)
					continue
				}
				r.add("fence", k, ms(d))
			}
		}
	}
}

func rotateStrings(s []string, i int) []string {
	i %= len(s)
	return append(append([]string(nil), s[i:]...), s[:i]...)
}

func addRenew(r *Results, key string, c renewCost) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.Renew[key] = append(r.Renew[key], c)
}
