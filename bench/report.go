package main

import (
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"sort"
	"strings"
	"text/tabwriter"
)

// storeOrder and libOrder fix the order of rows.
var storeOrder = map[string]int{"redis": 0, "postgres": 1, "etcd": 2, "kubernetes": 3}

func splitKey(k string) (store, name string) {
	i := strings.IndexByte(k, '/')
	if i < 0 {
		return "", k
	}
	return k[:i], k[i+1:]
}

func libRank(name string) int {
	switch {
	case name == floorName:
		return 0
	case strings.HasPrefix(name, "leasehold"):
		return 1
	}
	return 2
}

func sortKeys(ks []string) {
	sort.SliceStable(ks, func(i, j int) bool {
		si, ni := splitKey(ks[i])
		sj, nj := splitKey(ks[j])
		if storeOrder[si] != storeOrder[sj] {
			return storeOrder[si] < storeOrder[sj]
		}
		if libRank(ni) != libRank(nj) {
			return libRank(ni) < libRank(nj)
		}
		if ni != nj {
			return ni < nj
		}
		// The same library on two stores storeOrder ranks alike (mysql,
		// nats, zookeeper): by store, so the order never follows the input's.
		return si < sj
	})
}

func isLeasehold(name string) bool { return strings.HasPrefix(name, "leasehold") }

// kindOf guesses a library's kind from its name, for results read from JSON.
func kindOf(name string) string {
	switch {
	case name == floorName:
		return "floor"
	case name == "leasehold (TryAcquire)":
		return "try"
	case strings.HasPrefix(name, "leasehold elector"), name == "etcd Election", name == "client-go":
		return "elector"
	}
	return "lock"
}

// baseline is the leasehold library a peer on store compares with: the one
// of the same kind, else any leasehold on that store.
func baseline(keys []string, store, kind string) string {
	any := ""
	for _, k := range keys {
		s, n := splitKey(k)
		if s != store || !isLeasehold(n) {
			continue
		}
		if kindOf(n) == kind {
			return k
		}
		if any == "" {
			any = k
		}
	}
	return any
}

type target struct {
	met  bool
	text string
	// spread, when set, says that the check's ratio is within the run's
	// spread: its 95 % bootstrap interval holds the target, so the run
	// cannot tell met from missed (met still says which side its p50s fell
	// on).
	spread string
}

// ratioTarget is a check of the ratio of two p50s, median(num) /
// median(den), against limit; the check's own comparison decides met.
type ratioTarget struct {
	num, den []float64
	limit    float64
	what     string // the ratio's name in the report, e.g. "leasehold / floor"
}

// spread says, when the ratio's 95 % bootstrap interval holds the limit,
// that the check is within the run's spread; "" otherwise. seedText seeds
// the bootstrap (the target's text), so the same samples always give the
// same interval.
func (rt ratioTarget) spread(seedText string) string {
	h := fnv.New64a()
	h.Write([]byte(seedText))
	lo, hi := ratioInterval(rt.num, rt.den, h.Sum64())
	if lo <= rt.limit && rt.limit <= hi {
		ratio := median(rt.num) / median(rt.den)
		return fmt.Sprintf("within the run's spread: %s %s, 95 %% interval %s-%s holds the target %s", rt.what, fmtRatio(ratio), fmtRatio(lo), fmtRatio(hi), fmtRatio(rt.limit))
	}
	return ""
}

func report(w io.Writer, r *Results, o options) {
	var targets []target
	addT := func(met bool, format string, args ...any) {
		targets = append(targets, target{met: met, text: fmt.Sprintf(format, args...)})
	}
	addR := func(met bool, rt ratioTarget, format string, args ...any) {
		text := fmt.Sprintf(format, args...)
		targets = append(targets, target{met: met, text: text, spread: rt.spread(text)})
	}
	fmt.Fprintf(w, "leasehold side-by-side benchmark, started %s\n", r.Started)
	fmt.Fprintf(w, "command: %s\n", r.Command)
	var mk []string
	for k := range r.Machine {
		mk = append(mk, k)
	}
	sort.Strings(mk)
	for _, k := range mk {
		fmt.Fprintf(w, "  %-12s %s\n", k+":", r.Machine[k])
	}
	fmt.Fprintf(w, "\nlibraries and settings:\n")
	ck := make([]string, 0, len(r.Config))
	for k := range r.Config {
		ck = append(ck, k)
	}
	sortKeys(ck)
	for _, k := range ck {
		fmt.Fprintf(w, "  %-30s %s\n", k, r.Config[k])
	}

	// Hand-off.
	floorP50 := map[string]float64{}
	for _, sc := range []string{scHandoff, scEarly} {
		keys := r.keys(sc)
		if len(keys) == 0 {
			continue
		}
		sortKeys(keys)
		if sc == scHandoff {
			fmt.Fprintf(w, "\n== Hand-off after release: the waiter is already blocked; the release comes %v after it started. ms from the release call to the waiter's acquire returning\n", o.long)
		} else {
			fmt.Fprintf(w, "\n== Hand-off, release right after the waiter started (at a random point of the first %v). ms\n", o.earlyMax)
		}
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "store\tlibrary\tn\tp50\tp99\tmax\tp50 / leasehold's\tp50 / floor\t")
		if sc == scEarly {
			fmt.Fprintf(tw, "p50 / its 'long after' p50\t")
		}
		fmt.Fprintln(tw)
		for _, k := range keys {
			s, n := splitKey(k)
			xs := r.get(sc, k)
			p50 := median(xs)
			if sc == scHandoff && n == floorName {
				floorP50[s] = p50
			}
			ratio := math.NaN()
			if !isLeasehold(n) && n != floorName {
				if b := baseline(keys, s, kindOf(n)); b != "" {
					ratio = p50 / median(r.get(sc, b))
				}
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t", s, n, len(xs), fmtMs(p50), fmtMs(quantile(xs, 0.99)), fmtMs(maxOf(xs)),
				fmtRatio(ratio), fmtRatio(p50/floorP50[s]))
			if sc == scEarly {
				fmt.Fprintf(tw, "%s\t", fmtRatio(p50/median(r.get(scHandoff, k))))
			}
			fmt.Fprintln(tw)
		}
		tw.Flush()
		// Targets.
		for _, k := range keys {
			s, n := splitKey(k)
			if !isLeasehold(n) {
				continue
			}
			p50 := median(r.get(sc, k))
			what := "hand-off p50"
			if sc == scEarly {
				what = "hand-off p50 with the release right after the waiter started"
			}
			if fl, ok := floorP50[s]; ok {
				addR(p50 <= 1.5*fl, ratioTarget{num: r.get(sc, k), den: r.get(scHandoff, s+"/"+floorName), limit: 1.5, what: "leasehold / floor"},
					"%s %s: %s %s ms <= 1.5 x the store's floor %s ms = %s ms", s, n, what, fmtMs(p50), fmtMs(fl), fmtMs(1.5*fl))
			}
			for _, pk := range keys {
				ps, pn := splitKey(pk)
				if ps != s || isLeasehold(pn) || pn == floorName {
					continue
				}
				pp := median(r.get(sc, pk))
				addR(p50 < pp, ratioTarget{num: r.get(sc, pk), den: r.get(sc, k), limit: 1, what: pn + " / leasehold"},
					"%s %s: %s %s ms ahead of %s's %s ms (%s)", s, n, what, fmtMs(p50), pn, fmtMs(pp), fmtRatio(pp/p50))
			}
		}
	}

	// Failover.
	if keys := r.keys(scFailover); len(keys) > 0 {
		sortKeys(keys)
		leaseNote := fmt.Sprintf("lease %v for every library", msDuration(r.FailoverLeaseMs))
		if v, ok := r.FailoverLeaseMsByStore["kubernetes"]; ok {
			leaseNote += fmt.Sprintf(" (on Kubernetes %v, the shortest whole-second lease the store accepts at scaled timings)", msDuration(v))
		}
		fmt.Fprintf(w, "\n== Crash failover: the holder stops renewing (crash) without releasing; %s. ms from the answer to its last successful renewal to the waiter's acquire returning\n", leaseNote)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "store\tlibrary\tn\tp50\tp99\tmax\tp50 - lease\tmax - lease\tp50 / leasehold's\t")
		for _, k := range keys {
			s, n := splitKey(k)
			xs := r.get(scFailover, k)
			ttl := r.failoverLeaseMs(s)
			p50 := median(xs)
			ratio := math.NaN()
			if !isLeasehold(n) && n != floorName {
				if b := baseline(keys, s, kindOf(n)); b != "" {
					ratio = p50 / median(r.get(scFailover, b))
				}
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t\n", s, n, len(xs), fmtMs(p50), fmtMs(quantile(xs, 0.99)), fmtMs(maxOf(xs)),
				fmtMs(p50-ttl), fmtMs(maxOf(xs)-ttl), fmtRatio(ratio))
		}
		tw.Flush()
		for _, k := range keys {
			s, n := splitKey(k)
			if !isLeasehold(n) {
				continue
			}
			xs := r.get(scFailover, k)
			ttl := r.failoverLeaseMs(s)
			addT(maxOf(xs) <= ttl+50, "%s %s: crash failover (every sample) <= lease %v + 50 ms: max %s ms, p50 %s ms", s, n, msDuration(ttl), fmtMs(maxOf(xs)), fmtMs(median(xs)))
			if fl := r.get(scFailover, s+"/"+floorName); len(fl) > 0 {
				addT(median(xs) <= median(fl)+50, "%s %s: crash failover p50 %s ms <= the store's own expiry (a bare etcd lease's failover, p50 %s ms) + 50 ms", s, n, fmtMs(median(xs)), fmtMs(median(fl)))
			}
		}
	}

	// Cycles.
	if keys := r.keys(scCycles); len(keys) > 0 {
		sortKeys(keys)
		fmt.Fprintf(w, "\n== Lock+unlock cycles per second, one client, uncontended (median of the rounds)\n")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "store\tlibrary\trounds\tmedian\tmin\tmax\tleasehold's / this\t")
		for _, k := range keys {
			s, n := splitKey(k)
			xs := r.get(scCycles, k)
			ratio := math.NaN()
			if !isLeasehold(n) {
				if b := baseline(keys, s, "lock"); b != "" {
					ratio = median(r.get(scCycles, b)) / median(xs)
				}
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t\n", s, n, len(xs), fmtRate(median(xs)), fmtRate(quantile(xs, 0)), fmtRate(maxOf(xs)), fmtRatio(ratio))
		}
		tw.Flush()
		for _, k := range keys {
			s, n := splitKey(k)
			if !isLeasehold(n) || kindOf(n) != "lock" {
				continue
			}
			lh := median(r.get(scCycles, k))
			best, bestName, bestKey := 0.0, "", ""
			for _, pk := range keys {
				ps, pn := splitKey(pk)
				if ps == s && !isLeasehold(pn) && pn != floorName {
					if v := median(r.get(scCycles, pk)); v > best {
						best, bestName, bestKey = v, pn, pk
					}
				}
			}
			if bestName != "" {
				addR(lh >= best, ratioTarget{num: r.get(scCycles, k), den: r.get(scCycles, bestKey), limit: 1, what: "leasehold / " + bestName},
					"%s %s: single-client cycles/s %s >= best peer's (%s) %s", s, n, fmtRate(lh), bestName, fmtRate(best))
			}
		}
	}

	// Contention.
	if keys := r.keys(scContention); len(keys) > 0 {
		sortKeys(keys)
		fmt.Fprintf(w, "\n== %d contenders on one lock, each acquiring and releasing in a loop for %v per round\n", o.contenders, o.contendTime)
		fmt.Fprintf(w, "   share: a contender's acquisitions / its fair share. wait: the most cycles of others a contender sat through before its next turn.\n")
		fmt.Fprintf(w, "   repeat: the largest fraction of turns (over the rounds) taken by the contender that had the previous turn (a fair lottery: 1/%d).\n", o.contenders)
		fmt.Fprintf(w, "   starved: never acquired, share < 0.25, or wait > bound; bound = %s\n", boundText(o))
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "store\tlibrary\trounds\tcycles/s\tmin share\trepeat\tmax wait\tbound\tstarved (worst round)\tcounts (last round)\t")
		for _, k := range keys {
			s, n := splitKey(k)
			xs := r.get(scContention, k)
			minShare, maxWait, starved, bound := 1.0, 0, 0, 0
			repeat := 0.0
			var last []int
			for _, cr := range r.Contention[k] {
				repeat = math.Max(repeat, cr.Repeat)
				minShare = math.Min(minShare, cr.MinShare)
				maxWait = max(maxWait, cr.MaxWait)
				b := waitBound(o, cr.Cycles, len(cr.Counts))
				bound = max(bound, b)
				st := 0
				fair := float64(cr.Cycles) / float64(len(cr.Counts))
				for _, c := range cr.Counts {
					if c == 0 || float64(c) < 0.25*fair {
						st++
					}
				}
				if cr.MaxWait > b && st == 0 {
					st = 1
				}
				starved = max(starved, st)
				last = cr.Counts
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%.2f\t%.2f\t%d\t%d\t%d of %d\t%v\t\n", s, n, len(xs), fmtRate(median(xs)), minShare, repeat, maxWait, bound, starved, o.contenders, last)
			if isLeasehold(n) {
				addT(starved == 0 && len(r.Contention[k]) > 0, "%s %s: no contender starves among %d (min share %.2f, max wait %d cycles, bound %d)", s, n, o.contenders, minShare, maxWait, bound)
			}
		}
		tw.Flush()
	}

	// Renewals.
	if len(r.Renew) > 0 {
		fmt.Fprintf(w, "\n== Renewal cost of many leases held by one process, PostgreSQL (median of the rounds). Store CPU: utime+stime of the PostgreSQL backends serving the bench's connections (/proc/<pid>/stat)\n")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "leases\tmethod\trounds\tleases/s\tstatements/s\tstore CPU ms per 1000 leases\tstore CPU s per s\tfailed\t")
		var rk []string
		for k := range r.Renew {
			rk = append(rk, k)
		}
		sort.Slice(rk, func(i, j int) bool {
			var ni, nj int
			fmt.Sscanf(rk[i], "%d/", &ni)
			fmt.Sscanf(rk[j], "%d/", &nj)
			if ni != nj {
				return ni < nj
			}
			return rk[i] > rk[j]
		})
		cpuPer := map[string]float64{}
		for _, k := range rk {
			cs := r.Renew[k]
			var lps, sps, cpu, load []float64
			failed := 0
			for _, c := range cs {
				lps = append(lps, c.LeasesPerSec)
				sps = append(sps, c.StmtPerSec)
				if c.BackendCPU >= 0 {
					cpu = append(cpu, c.CPUPerKLease)
					load = append(load, c.BackendCPU/c.Seconds)
				}
				failed += c.Failed
			}
			cpuPer[k] = median(cpu)
			n, m, _ := strings.Cut(k, "/")
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%d\t\n", n, m, len(cs), fmtRate(median(lps)), fmtRate(median(sps)), fmtMs(median(cpu)), fmtMs(median(load)), failed)
		}
		tw.Flush()
		for _, n := range []string{"1000", "10000"} {
			per, ok1 := cpuPer[n+"/one statement per lease"]
			bat, ok2 := cpuPer[n+"/one batched statement"]
			if ok1 && ok2 && n == "10000" {
				addT(bat*10 <= per, "postgres: renewing 10,000 leases in one batch costs the store %s ms CPU per 1000 leases, <= 1/10 of one statement per lease (%s ms): %s lower",
					fmtMs(bat), fmtMs(per), fmtRatio(per/bat))
			}
		}
	}

	// Fence.
	if keys := r.keys("fence"); len(keys) > 0 {
		fmt.Fprintf(w, "\n== A fenced write against the same write unfenced, PostgreSQL (one UPDATE of one row, committed), ms\n")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "write\tn\tp50\tp99\tp50 / unfenced\t")
		base := map[string]string{fwTx: fwTx, fwClaim: fwTx, fwClaimLease: fwTx, fwPipelined: fwTx, fwBatchTx: fwTx, fwAuto: fwAuto, fwDirect: fwAuto, fwBatch: fwAuto}
		for _, k := range fenceKinds {
			xs := r.get("fence", k)
			if len(xs) == 0 {
				continue
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t\n", k, len(xs), fmtMs(median(xs)), fmtMs(quantile(xs, 0.99)), fmtRatio(median(xs)/median(r.get("fence", base[k]))))
		}
		tw.Flush()
		if u, f := r.get("fence", fwTx), r.get("fence", fwClaim); len(u) > 0 && len(f) > 0 {
			ratio := median(f) / median(u)
			addR(ratio <= 1.15, ratioTarget{num: f, den: u, limit: 1.15, what: "fenced / unfenced"}, "postgres: a fenced write (tx + Claim) p50 %s ms is %s the unfenced one's %s ms (target <= 1.15x)", fmtMs(median(f)), fmtRatio(ratio), fmtMs(median(u)))
		}
		if u, f := r.get("fence", fwTx), r.get("fence", fwPipelined); len(u) > 0 && len(f) > 0 {
			ratio := median(f) / median(u)
			addR(ratio <= 1.15, ratioTarget{num: f, den: u, limit: 1.15, what: "fenced / unfenced"}, "postgres: a fenced write (tx + QueueClaim, the recommended form in a transaction) p50 %s ms is %s the unfenced one's %s ms (target <= 1.15x)", fmtMs(median(f)), fmtRatio(ratio), fmtMs(median(u)))
		}
		if u, f := r.get("fence", fwAuto), r.get("fence", fwBatch); len(u) > 0 && len(f) > 0 {
			ratio := median(f) / median(u)
			addR(ratio <= 1.15, ratioTarget{num: f, den: u, limit: 1.15, what: "fenced / unfenced"}, "postgres: a fenced write (one batch: QueueClaim + write, the recommended form for a lone write) p50 %s ms is %s the unfenced autocommit write's %s ms (target <= 1.15x)", fmtMs(median(f)), fmtRatio(ratio), fmtMs(median(u)))
		}
		if u, f := r.get("fence", fwAuto), r.get("fence", fwDirect); len(u) > 0 && len(f) > 0 {
			ratio := median(f) / median(u)
			addR(ratio <= 1.15, ratioTarget{num: f, den: u, limit: 1.15, what: "fenced / unfenced"}, "postgres: a fenced write (direct form) p50 %s ms is %s the unfenced one's %s ms (target <= 1.15x)", fmtMs(median(f)), fmtRatio(ratio), fmtMs(median(u)))
		}
	}

	reportCmdHandoff(w, r)

	// Errors and violations.
	if len(r.Errors) > 0 {
		fmt.Fprintf(w, "\nfailed samples:")
		for sc, m := range r.Errors {
			for k, v := range m {
				fmt.Fprintf(w, " %s %s: %d;", sc, k, v)
			}
		}
		fmt.Fprintln(w)
	}
	if v := totalViolations(r); v > 0 {
		fmt.Fprintf(w, "\nMUTUAL EXCLUSION VIOLATIONS: %v\n", r.Violations)
	} else {
		fmt.Fprintf(w, "\nmutual exclusion: no violation observed\n")
	}

	if r.Diag != "" {
		fmt.Fprint(w, r.Diag)
	}

	fmt.Fprintf(w, "\n== Targets (issue 10)\n")
	met, spreadMet, spreadMissed := 0, 0, 0
	for _, t := range targets {
		mark := "MISSED"
		if t.met {
			mark = "met   "
			met++
		}
		if t.spread == "" {
			fmt.Fprintf(w, "  [%s] %s\n", mark, t.text)
			continue
		}
		if t.met {
			spreadMet++
		} else {
			spreadMissed++
		}
		fmt.Fprintf(w, "  [%s] %s; %s\n", mark, t.text, t.spread)
	}
	fmt.Fprintf(w, "  %d of %d targets met\n", met, len(targets))
	if n := spreadMet + spreadMissed; n > 0 {
		fmt.Fprintf(w, "  %d of the %d are within the run's spread (%d met, %d missed at the p50s): the 95 %% bootstrap interval of the check's ratio of p50s holds its target, so this run cannot tell met from missed\n", n, len(targets), spreadMet, spreadMissed)
	}
}

// waitBound is the most cycles a contender may wait for its turn before it
// counts as starved: -starve-bound if set, else the wait that a fair lottery
// (each cycle won by one of k contenders at random) exceeds anywhere in a run
// of c cycles with probability about 0.1%: c * ((k-1)/k)^w = 0.001.
func waitBound(o options, c, k int) int {
	if o.starveBound > 0 {
		return o.starveBound
	}
	if c < 1 || k < 2 {
		return 0
	}
	return int(math.Ceil(math.Log(1000*float64(c)) / math.Log(float64(k)/float64(k-1))))
}

func boundText(o options) string {
	if o.starveBound > 0 {
		return fmt.Sprintf("%d cycles (-starve-bound)", o.starveBound)
	}
	return "the wait a fair random lottery exceeds with probability 0.1% over the round's cycles (ln(1000 c) / ln(k/(k-1)); a FIFO queue would wait at most k-1)"
}
