// Command bench runs leasehold and its peer libraries side by side on the
// same servers, interleaved, over several rounds, and prints medians, p99,
// the ratios between them and whether leasehold meets the targets of issue
// 10. It is its own module, so the peers never enter leasehold's go.mod.
//
//	cd bench && go run . -rounds 5
//	cd bench && go run . -quick                       # smoke test, under a minute
//	cd bench && go run . -stores redis,postgres -scenarios handoff,cycles
//	cd bench && go run . -from results.json -svg ../docs/bench-handoff.svg   # redraw
//
// Servers: Redis at 127.0.0.1:6379 and PostgreSQL at 127.0.0.1:5432 (each
// run uses its own key prefix and schema and removes them), an embedded etcd
// started in this process, a ZooKeeper server started from the installed
// package (store/zookeeper/zktest), and a real kube-apiserver started from the
// binaries of hack/kube-apiserver/build.sh (or $LEASEHOLD_KUBE_BIN) when they
// are there. A store whose server is missing is skipped, loudly.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"
)

type options struct {
	rounds       int
	handoffs     int
	long         time.Duration
	earlyMax     time.Duration
	handoffTTL   time.Duration
	kubeTTL      time.Duration
	pglockLease  time.Duration
	failovers    int
	failTTL      time.Duration
	failPhase    time.Duration // the failover holder acquires after a random wait up to this
	kubeFailTTL  time.Duration // failTTL on Kubernetes
	cycleTime    time.Duration
	contendTime  time.Duration
	contenders   int
	renewSizes   []int
	fenceWrites  int
	stores       map[string]bool
	scenarios    map[string]bool
	redisAddr    string
	pgDSN        string
	myDSN        string
	etcdFsync    bool
	jsonOut      string
	svgOut       string
	from         string
	quick        bool
	starveBound  int
	requireStore bool
	diag         int
}

var allStores = []string{"redis", "postgres", "mysql", "etcd", "zookeeper", "nats", "kubernetes"}
var allScenarios = []string{"handoff", "early", "failover", "cycles", "contention", "renew", "fence", "cmd"}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...)
}

func parseSet(s string, all []string) (map[string]bool, error) {
	m := map[string]bool{}
	if s == "all" || s == "" {
		for _, a := range all {
			m[a] = true
		}
		return m, nil
	}
	for _, x := range strings.Split(s, ",") {
		x = strings.TrimSpace(x)
		ok := false
		for _, a := range all {
			ok = ok || a == x
		}
		if !ok {
			return nil, fmt.Errorf("unknown %q (want some of %s)", x, strings.Join(all, ","))
		}
		m[x] = true
	}
	return m, nil
}

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	o := options{}
	fs.IntVar(&o.rounds, "rounds", 3, "rounds; each round runs every scenario for every library, interleaved")
	fs.IntVar(&o.handoffs, "handoffs", 8, "hand-offs per library per round, for each of the two release timings (8: 40 samples a row in 5 rounds, few enough checks left within the run's spread)")
	fs.DurationVar(&o.long, "long", 150*time.Millisecond, "release this long after the waiter started (the 'long after' case)")
	fs.DurationVar(&o.earlyMax, "early", 50*time.Millisecond, "release at a random point this soon after the waiter started (the 'right after' case)")
	fs.DurationVar(&o.handoffTTL, "ttl", 15*time.Second, "lease of the hand-off, cycles and contention scenarios (leasehold's default)")
	fs.DurationVar(&o.kubeTTL, "kube-ttl", 4500*time.Millisecond, "lease on Kubernetes for the hand-off scenario (above 3 s: the store refuses a margin, lease - renew deadline, of 1 s or less); client-go's retry period is 2/15 of it (its defaults are 15 s and 2 s)")
	fs.DurationVar(&o.pglockLease, "pglock-lease", time.Second, "pglock's lease in the hand-off and contention scenarios (a pglock waiter polls once per lease; its default is 20 s)")
	fs.IntVar(&o.failovers, "failovers", 1, "crash failovers per library per round")
	fs.DurationVar(&o.failPhase, "fail-phase", 500*time.Millisecond, "before each crash failover the holder waits a random time up to this long, so that its renewals and crash fall at a random phase of a server's periodic expiry check (etcd revokes expired leases every 500 ms; 0: no wait, the phase then follows the previous sample's)")
	fs.DurationVar(&o.failTTL, "fail-ttl", time.Second, "lease of the failover scenario, for every library (on Kubernetes: -kube-fail-ttl)")
	fs.DurationVar(&o.kubeFailTTL, "kube-fail-ttl", 4*time.Second, "lease of the failover scenario on Kubernetes, for every library there (above 3 s: the store refuses a margin, lease - renew deadline, of 1 s or less; whole seconds: a Lease records leaseDurationSeconds, so 3.5 s is kept as 4 s)")
	fs.DurationVar(&o.cycleTime, "cycle-time", time.Second, "duration of the single-client cycles run per library per round")
	fs.DurationVar(&o.contendTime, "contend-time", 1500*time.Millisecond, "duration of the contention run per library per round")
	fs.IntVar(&o.contenders, "contenders", 8, "contenders on one lock")
	fs.IntVar(&o.starveBound, "starve-bound", 0, "a contender starves if it waits more cycles than this for its turn (0: the fair-lottery bound, see the report)")
	renew := fs.String("renew", "1000,10000", "lease counts of the renewal-cost scenario")
	fs.IntVar(&o.fenceWrites, "fence-writes", 100, "writes of each kind per round in the fence scenario")
	storesFlag := fs.String("stores", "all", "stores to run: "+strings.Join(allStores, ","))
	scenFlag := fs.String("scenarios", "all", "scenarios to run: "+strings.Join(allScenarios, ","))
	fs.StringVar(&o.redisAddr, "redis", envOr("LEASEHOLD_REDIS_ADDR", "127.0.0.1:6379"), "Redis address (loopback only)")
	fs.StringVar(&o.pgDSN, "pg", envOr("LEASEHOLD_BENCH_PG", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"), "PostgreSQL URL (loopback only); never printed")
	fs.StringVar(&o.myDSN, "mysql", envOr("LEASEHOLD_BENCH_MYSQL", "root@tcp(127.0.0.1:3306)/"), "MySQL/MariaDB go-sql-driver DSN without a database (loopback only); never printed")
	fs.BoolVar(&o.etcdFsync, "etcd-fsync", true, "fsync in the embedded etcd (as a real member does)")
	fs.StringVar(&o.jsonOut, "json", "", "write every sample to this JSON file")
	fs.StringVar(&o.svgOut, "svg", "", "write the hand-off and failover chart to this SVG file")
	fs.StringVar(&o.from, "from", "", "read samples from this JSON file instead of running (to redraw the report and chart)")
	fs.BoolVar(&o.quick, "quick", false, "smoke test: one short round, Kubernetes skipped, under a minute")
	fs.IntVar(&o.diag, "diag", 0, "after the rounds, count the requests and time of this many leasehold cycles per store (where the time goes)")
	fs.BoolVar(&o.requireStore, "require-all", false, "fail instead of skipping a store whose server is missing")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var err error
	if o.stores, err = parseSet(*storesFlag, allStores); err != nil {
		logf("-stores: %v", err)
		return 2
	}
	if o.scenarios, err = parseSet(*scenFlag, allScenarios); err != nil {
		logf("-scenarios: %v", err)
		return 2
	}
	if *scenFlag == "all" || *scenFlag == "" {
		// The command hand-off builds two binaries first (leasehold and
		// etcdctl): it runs when asked for by name, -scenarios cmd.
		delete(o.scenarios, "cmd")
	}
	for _, s := range strings.Split(*renew, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 100000 {
			logf("-renew: %q is not a lease count in 1..100000", s)
			return 2
		}
		o.renewSizes = append(o.renewSizes, n)
	}
	if o.quick {
		o.rounds = 1
		o.handoffs = 2
		o.failovers = 1
		o.cycleTime = 300 * time.Millisecond
		o.contendTime = 500 * time.Millisecond
		o.fenceWrites = 20
		o.renewSizes = []int{1000}
		if *storesFlag == "all" {
			delete(o.stores, "kubernetes")
		}
	}
	if o.rounds < 1 || o.handoffs < 0 || o.failovers < 0 || o.contenders < 2 {
		logf("bad counts: -rounds >= 1, -handoffs >= 0, -failovers >= 0, -contenders >= 2")
		return 2
	}
	if err := loopbackOnly(o); err != nil {
		logf("%v", err)
		return 2
	}

	var r *Results
	if o.from != "" {
		r, err = readResults(o.from)
		if err != nil {
			logf("read %s: %v", o.from, err)
			return 1
		}
	} else {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		r, err = runAll(ctx, o, args)
		if err != nil {
			logf("%v", err)
			return 1
		}
		if o.jsonOut != "" {
			if err := r.writeJSON(o.jsonOut); err != nil {
				logf("write %s: %v", o.jsonOut, err)
				return 1
			}
		}
	}
	report(os.Stdout, r, o)
	if o.svgOut != "" {
		if err := os.WriteFile(o.svgOut, []byte(chart(r)), 0o644); err != nil {
			logf("write %s: %v", o.svgOut, err)
			return 1
		}
	}
	if v := totalViolations(r); v > 0 {
		logf("%d mutual exclusion violations observed", v)
		return 1
	}
	return 0
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func loopbackOnly(o options) error {
	host := o.redisAddr
	if i := strings.LastIndexByte(host, ':'); i >= 0 {
		host = host[:i]
	}
	if !isLoopback(host) {
		return fmt.Errorf("-redis %s is not a loopback address", o.redisAddr)
	}
	u, err := parseURL(o.pgDSN)
	if err != nil || !isLoopback(u) {
		return fmt.Errorf("-pg must be a postgres:// URL on a loopback host")
	}
	if cfg, err := mysql.ParseDSN(o.myDSN); err != nil || cfg.Net != "tcp" || !isLoopback(strings.Split(cfg.Addr, ":")[0]) {
		return fmt.Errorf("-mysql must be a go-sql-driver DSN with a loopback tcp address")
	}
	return nil
}

func totalViolations(r *Results) int {
	n := 0
	for _, m := range r.Violations {
		for _, v := range m {
			n += v
		}
	}
	return n
}

func cmdOut(name string, args ...string) string {
	b, err := exec.Command(name, args...).Output()
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(b))
}

func machine(r *Results) {
	r.Machine["nproc"] = strconv.Itoa(runtime.NumCPU())
	r.Machine["go"] = runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH
	r.Machine["kernel"] = cmdOut("uname", "-sr")
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "model name") {
				if i := strings.IndexByte(line, ':'); i >= 0 {
					r.Machine["cpu"] = strings.TrimSpace(line[i+1:])
				}
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		line := strings.SplitN(string(b), "\n", 2)[0]
		r.Machine["memory"] = strings.Join(strings.Fields(line)[1:], " ")
	}
}

// failTTLFor is the failover scenario's lease on store s.
func (o options) failTTLFor(s string) time.Duration {
	if s == "kubernetes" {
		return o.kubeFailTTL
	}
	return o.failTTL
}
