package main_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientset "k8s.io/client-go/kubernetes"

	k8sstore "github.com/leasehold/leasehold/store/kubernetes"
	lhnats "github.com/leasehold/leasehold/store/nats"
	"github.com/leasehold/leasehold/store/zookeeper/zktest"
)

// TestFairRunSQLite: `leasehold run --fair` on the default kind of store.
// a holds the lease; b and then c start and queue behind it (their places
// are seen in the store's queue table, in that order); when a's command
// ends, b runs before c, each with a higher token, and the queue is empty
// at the end. a, which found the lease free with nobody queued, took it
// without writing a place: the queue table's AUTOINCREMENT counter
// (sqlite_sequence) has no row until b queues, which is the control.
func TestFairRunSQLite(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "leases.db")
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro&_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	fairRun(t, "sqlite://"+path, timingArgs, func() []string {
		return sqlHolders(t, db, `SELECT holder FROM leader_lease_queue WHERE name = 'fair-job' ORDER BY seq`)
	}, func() int {
		var n int
		if err := db.QueryRow(`SELECT seq FROM sqlite_sequence WHERE name = 'leader_lease_queue'`).Scan(&n); err != nil {
			return 0 // no row: no place was ever written
		}
		return n
	})
}

// TestFairRunEtcd: the same on etcd, whose queue is etcd's concurrency
// layout: the places are read as the place markers (in the order of their
// create revisions, which is that of the place keys).
func TestFairRunEtcd(t *testing.T) {
	host := embeddedEtcd(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{host}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	markers := "lh-fair/.leasehold/queue/fair-job "
	fairRun(t, "etcd://"+host+"/lh-fair", timingArgs, func() []string {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := cli.Get(ctx, markers, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, kv := range resp.Kvs {
			out = append(out, strings.TrimPrefix(string(kv.Key), markers))
		}
		return out
	}, nil)
}

// TestFairRunNATS: the same on NATS, whose queue is one key per place
// (=queue.NAME.=.HOLDER) in the queues' bucket beside the lease's
// (lhnats.QueueBucket, made by the first waiter): the places are the live
// values among those keys, in the order of the tickets they carry (a
// ticket of 0 is the value's own revision). a, which found the lease free
// with nobody queued, took it without writing a place (AcquireUnqueued,
// on this R1 bucket): the queues' stream stored nothing until b queued.
func TestFairRunNATS(t *testing.T) {
	host, js := embeddedJetStream(t)
	fairRun(t, "nats://"+host+"/lh-fair", timingArgs, func() []string {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		kv, err := js.KeyValue(ctx, lhnats.QueueBucket("lh-fair"))
		if err != nil {
			return nil // the bucket is made by the first waiter's Enqueue
		}
		keys, err := kv.ListKeysFiltered(ctx, "=queue.fair-job.=.*")
		if err != nil {
			t.Fatal(err)
		}
		type place struct {
			holder string
			ticket uint64
		}
		var places []place
		for key := range keys.Keys() {
			e, err := kv.Get(ctx, key)
			if err != nil {
				continue // left or expired since it was listed
			}
			var v struct {
				Holder string `json:"holder"`
				Token  uint64 `json:"token"`
			}
			if err := json.Unmarshal(e.Value(), &v); err != nil {
				t.Fatalf("place %s: %v", key, err)
			}
			if v.Token == 0 {
				v.Token = e.Revision()
			}
			places = append(places, place{v.Holder, v.Token})
		}
		sort.Slice(places, func(i, j int) bool { return places[i].ticket < places[j].ticket })
		var out []string
		for _, p := range places {
			out = append(out, p.holder)
		}
		return out
	}, func() int {
		// Every message the queues' stream ever stored: a place's write is
		// one (its revisions start at the bucket's first sequence).
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s, err := js.Stream(ctx, "KV_"+lhnats.QueueBucket("lh-fair"))
		if err != nil {
			return 0 // not made yet: nobody queued
		}
		info, err := s.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return int(info.State.LastSeq + 1 - max(info.Config.FirstSeq, 1))
	})
}

// TestFairRunKubernetes: the same on Kubernetes, whose queue is a Lease
// object beside the lease (kubernetes.QueueName) holding the places in an
// annotation; an emptied queue's object is deleted.
func TestFairRunKubernetes(t *testing.T) {
	srv := kubeServer(t)
	leases, err := clientset.NewForConfig(srv.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	fairRun(t, kubernetesURL(t, srv), kubeTimingArgs, func() []string {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		l, err := leases.CoordinationV1().Leases("default").Get(ctx, k8sstore.QueueName("fair-job"), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			t.Fatal(err)
		}
		var q struct{ Places []struct{ Holder string } }
		if err := json.Unmarshal([]byte(l.Annotations[k8sstore.AnnotationQueue]), &q); err != nil {
			t.Fatalf("queue object %s: %v", l.Name, err)
		}
		var out []string
		for _, p := range q.Places {
			out = append(out, p.Holder)
		}
		return out
	}, nil)
}

// TestFairRunZooKeeper: the same on ZooKeeper, whose queue is its own
// lock recipe's: a place is a contender node in the lease's path
// (_c_<holder hash>q<random>-lock-<seq>, whose data names the holder),
// ranked by sequence with every other contender. a, which found nobody
// queued, took the lease with a node that is not a place
// (AcquireUnqueued); the places counted are those in the path.
func TestFairRunZooKeeper(t *testing.T) {
	srv := zktest.Standalone(t, zktest.Options{})
	conn, _, err := zk.Connect([]string{srv.Addr()}, 10*time.Second, zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const lp = "/lh-fair/fair-job"
	places := func() []string {
		kids, _, err := conn.Children(lp)
		if errors.Is(err, zk.ErrNoNode) {
			return nil
		}
		if err != nil {
			t.Fatal(err)
		}
		seq := func(k string) string { return k[strings.LastIndex(k, "-lock-"):] }
		sort.Slice(kids, func(i, j int) bool { return seq(kids[i]) < seq(kids[j]) })
		var out []string
		for _, k := range kids {
			if !strings.HasPrefix(k, "_c_") || len(k) < 20 || k[19] != 'q' {
				continue // a term's node, not a place
			}
			data, _, err := conn.Get(lp + "/" + k)
			if errors.Is(err, zk.ErrNoNode) {
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			var d struct{ Holder string }
			if err := json.Unmarshal(data, &d); err != nil || d.Holder == "" {
				t.Fatalf("place %s: data %q (%v)", k, data, err)
			}
			out = append(out, d.Holder)
		}
		return out
	}
	fairRun(t, "zookeeper://"+srv.Addr()+"/lh-fair", timingArgs, places, func() int { return len(places()) })
}

// sqlHolders lists the holders query returns: the places of a SQL store's
// queue, in their order (none while the table is not made yet).
func sqlHolders(t *testing.T, db *sql.DB, query string) []string {
	rows, err := db.Query(query)
	if err != nil {
		return nil // the table is made by the first run's Open or migration
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var h string
		if err := rows.Scan(&h); err != nil {
			t.Fatal(err)
		}
		out = append(out, h)
	}
	return out
}

// fairRun: a holds the lease; b and then c start and queue behind it
// (queued lists the holders of the places, first first); when a's command
// ends, b runs before c, each with a higher token, and the queue is empty at
// the end.
// placesWritten, if set, counts the places ever written to the store's
// queue: none while a, the first, holds (it found nobody queued), some
// once b has queued.
func fairRun(t *testing.T, url string, timings []string, queued func() []string, placesWritten func() int) {
	dir := t.TempDir()
	order := filepath.Join(dir, "order")
	release := filepath.Join(dir, "go")
	// Each command appends its identity and token; a's waits for the go file.
	script := `echo "$LEASEHOLD_HOLDER $LEASEHOLD_TOKEN" >> "$ORDER"; while [ -n "$WAIT" ] && [ ! -e "$WAIT" ]; do sleep 0.05; done`
	type proc struct {
		cmd  *exec.Cmd
		done chan struct{} // closed once the process has exited
		err  error
		out  string // the file of its output
	}
	output := func(p *proc) string {
		b, _ := os.ReadFile(p.out)
		return string(b)
	}
	start := func(name string, wait string) *proc {
		args := append([]string{"run", "--fair", "--store", url, "--lease", "fair-job", "--identity", name}, timings...)
		args = append(args, "--", "sh", "-c", script)
		p := &proc{cmd: exec.Command(leaseholdBin, args...), done: make(chan struct{})}
		p.cmd.Env = append(os.Environ(), "LEASEHOLD_STORE=", "ORDER="+order, "WAIT="+wait)
		p.out = filepath.Join(dir, name+".log")
		f, err := os.Create(p.out)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close() // the process has its own copy once started
		p.cmd.Stdout, p.cmd.Stderr = f, f
		if err := p.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() {
			p.err = p.cmd.Wait()
			close(p.done)
		}()
		t.Cleanup(func() {
			select {
			case <-p.done:
			default:
				p.cmd.Process.Kill()
				<-p.done
			}
		})
		return p
	}
	lines := func() []string {
		b, _ := os.ReadFile(order)
		return strings.Fields(strings.ReplaceAll(string(b), "\n", " "))
	}
	// The holders' identities are the --identity given, with a suffix.
	names := func() []string {
		var out []string
		for _, h := range queued() {
			out = append(out, h[:strings.IndexByte(h+"-", '-')])
		}
		return out
	}
	a := start("a", release)
	waitUntil(t, 30*time.Second, "a to hold the lease", func() bool { return len(lines()) == 2 })
	if placesWritten != nil {
		if n := placesWritten(); n != 0 {
			// An attempt whose outcome is unknown (a store slow beyond the
			// renew deadline, as under CI's load) is followed by a place:
			// a then waits as any waiter.
			if out := output(a); strings.Contains(out, "acquire failed") {
				t.Logf("a queued after an attempt failed; %d places were written:\n%s", n, out)
			} else {
				t.Fatalf("a took a free lease with nobody queued, yet places were written: %d; want none\n%s", n, out)
			}
		}
	}
	b := start("b", "")
	waitUntil(t, 30*time.Second, "b to queue", func() bool { return fmt.Sprint(names()) == "[b]" })
	if placesWritten != nil {
		if n := placesWritten(); n == 0 {
			t.Fatal("control: b has queued, and no place was counted: the count cannot see a place")
		}
	}
	c := start("c", "")
	waitUntil(t, 30*time.Second, "c to queue behind b", func() bool { return fmt.Sprint(names()) == "[b c]" })
	if err := os.WriteFile(release, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []*proc{a, b, c} {
		select {
		case <-p.done:
			if p.err != nil {
				t.Fatalf("%v: %v\n%s", p.cmd.Args[:8], p.err, output(p))
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("%v did not finish\n%s", p.cmd.Args[:8], output(p))
		}
	}
	got := lines()
	if len(got) != 6 {
		t.Fatalf("order file %q, want three holders with tokens", got)
	}
	var who []string
	for i := 0; i < 6; i += 2 {
		who = append(who, got[i][:strings.IndexByte(got[i], '-')])
	}
	if fmt.Sprint(who) != "[a b c]" || !(got[1] < got[3] && got[3] < got[5]) {
		t.Fatalf("held in the order %v with tokens %s %s %s, want a, b, c (first come, first served) with rising tokens", who, got[1], got[3], got[5])
	}
	if q := names(); len(q) != 0 {
		t.Fatalf("places left in the queue: %v", q)
	}
}

// TestVerifyFair: 'leasehold verify --fair' on the default store (a new
// SQLite file in --out) runs its nodes' electors in the fair queue: the
// run passes, its summary says so, and the standbys wrote places to the
// queue table (sqlite_sequence counts the places ever written; a run
// without --fair writes none, as chaos's TestFairGroups shows with its
// control).
func TestVerifyFair(t *testing.T) {
	if testing.Short() {
		t.Skip("a chaos run of nine seconds")
	}
	dir := t.TempDir()
	code, out, errOut := leasehold(t, nil, "verify", "--fair", "--faults", "pause", "--duration", "9s", "--out", dir)
	if code != 0 || !strings.Contains(out, "leasehold verify: PASS") || !strings.Contains(out, "| fair, ") {
		t.Fatalf("verify --fair: exit %d\n%s%s", code, out, errOut)
	}
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "leases.db")+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var places int
	if err := db.QueryRow(`SELECT seq FROM sqlite_sequence WHERE name = 'leader_lease_queue'`).Scan(&places); err != nil || places == 0 {
		t.Fatalf("the fair electors' standbys wrote no place to the queue (%d, %v)\n%s", places, err, out)
	}
}

// TestFairRunPostgres: fairRun on PostgreSQL, whose queue is the places in
// <table>_queue, in the order of their seq, each new place's seq taken from
// the name's counter in <table>_qseq: a, which found nobody queued, took the
// lease without a place, through the fair acquire's lease function
// <table>_acqfair.
func TestFairRunPostgres(t *testing.T) {
	u, dbURL, schema := postgresSchema(t)
	db, err := sql.Open("pgx", dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	fairRun(t, u, timingArgs, func() []string {
		return sqlHolders(t, db, `SELECT holder FROM `+schema+`.leader_lease_queue WHERE name = 'fair-job' AND expires_at > clock_timestamp() ORDER BY seq`)
	}, func() int {
		var n int
		if err := db.QueryRow(`SELECT n FROM ` + schema + `.leader_lease_qseq WHERE name = 'fair-job'`).Scan(&n); err != nil {
			return 0 // no table or no row: no place was ever written
		}
		return n
	})
}

// TestFairStandbyHealthyPostgres: a `leasehold run --fair` on a PostgreSQL
// lease that is free but has a place queued ahead of it (another holder's,
// written by hand and live for an hour, which never takes its turn), so that
// the store answers its fair acquire store.ErrQueued and it waits in the
// queue. For three leases after it was told so, its /healthz stays 200
// (standing by) and its /metrics count the answer as queued, not as a
// store error. Before, the answer was kept as the elector's last store
// error, and the health turned 503 ("cannot reach the store") one lease
// after it queued; that befell any fair candidate told ErrQueued by a store
// that checked (a lease just released, with others queued) while it then
// waited its turn. (Until session 23 the test made the store answer so by
// dropping its acquire function: without the lease functions, the store
// answered every fair acquire ErrQueued. It now sends the fair acquire's
// statement itself, which answers ErrHeld while a leader holds.)
func TestFairStandbyHealthyPostgres(t *testing.T) {
	migrating, dbURL, schema := postgresSchema(t)
	if out, err := exec.Command(leaseholdBin, "migrate", "--store", migrating).CombinedOutput(); err != nil {
		t.Fatalf("leasehold migrate: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	// The counter's row too, so that the next place's position is after it.
	if _, err := conn.Exec(ctx, `INSERT INTO `+schema+`.leader_lease_qseq (name, n) VALUES ('job', 1);
INSERT INTO `+schema+`.leader_lease_queue (name, holder, seq, expires_at) VALUES ('job', 'ghost', 1, clock_timestamp() + interval '1 hour')`); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	args := append([]string{"--fair", "--store", migrating, "--lease", "job", "--http", "127.0.0.1:0"}, timingArgs...)
	get := func(addr, path string) (int, string) { return getURL(t, "http://"+addr+path) }
	c := startRun(t, dir, "c", nil, args...)
	addr := servedAddr(t, c)
	waitUntil(t, 20*time.Second, "c to be told others are queued", func() bool {
		_, body := get(addr, "/metrics")
		return strings.Contains(body, `leasehold_acquire_attempts_total{lease="job",result="queued"}`) &&
			!strings.Contains(body, `leasehold_acquire_attempts_total{lease="job",result="queued"} 0`)
	})
	for end := time.Now().Add(3 * 2 * time.Second); time.Now().Before(end); {
		if code, body := get(addr, "/healthz"); code != 200 || !strings.Contains(body, "standing by") {
			t.Fatalf("c's /healthz while it waits in the queue = %d %q, want 200, standing by", code, body)
		}
		time.Sleep(200 * time.Millisecond) // polling c's health over three leases
	}
	if _, body := get(addr, "/metrics"); !strings.Contains(body, `leasehold_store_errors_total{lease="job",op="acquire"} 0`) {
		t.Errorf("c's /metrics count store errors while it waits:\n%s", body)
	}
	if strings.Contains(c.log(), "acquired lease") {
		t.Fatalf("c took the lease with a place queued ahead of it; c's log:\n%s", c.log())
	}
}
