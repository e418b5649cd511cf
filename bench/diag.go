package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/etcd/etcdv3client"
	lhpg "github.com/leasehold/leasehold/store/postgres"
	lhredis "github.com/leasehold/leasehold/store/redis"
)

// -diag: where leasehold's time goes on each store. For one client on an
// uncontended lock it runs cycles of
//
//	store: store.Acquire + store.Release (the store alone, no Lock)
//	try:   Lock.TryAcquire + Held.Release
//	lock:  Lock.Acquire + Held.Release (what the cycles scenario measures)
//
// on a store handle whose client counts every request it sends, by kind,
// and prints the time and the requests per cycle. On PostgreSQL it also runs
// the store alone with the lease table's trigger (NOTIFY and history)
// disabled, on the bench's own schema, to price the trigger.

type counter struct {
	mu sync.Mutex
	m  map[string]int
}

func newCounter() *counter { return &counter{m: map[string]int{}} }

func (c *counter) inc(k string) {
	c.mu.Lock()
	c.m[k]++
	c.mu.Unlock()
}

func (c *counter) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.m
	c.m = map[string]int{}
	return m
}

func perCycle(m map[string]int, n int) string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	var parts []string
	for _, k := range ks {
		parts = append(parts, fmt.Sprintf("%s %.2f", k, float64(m[k])/float64(n)))
	}
	return strings.Join(parts, ", ")
}

type diagRow struct {
	store, what string
	n           int
	perCycle    time.Duration
	requests    string
}

func diagCycles(ctx context.Context, st store.Store, c *counter, name string, n int) (rows []diagRow) {
	run := func(what string, f func() error) {
		c.take()
		start := time.Now()
		done := 0
		for ; done < n && ctx.Err() == nil; done++ {
			if err := f(); err != nil {
				logf("diag %s: %v", what, err)
				break
			}
		}
		el := time.Since(start)
		m := c.take()
		if done > 0 {
			rows = append(rows, diagRow{what: what, n: done, perCycle: el / time.Duration(done), requests: perCycle(m, done)})
		}
	}
	lk, err := leasehold.NewLock(st, name, leasehold.Config{Identity: "diag"})
	if err != nil {
		logf("diag: %v", err)
		return nil
	}
	holder := "diag-" + randHex(4)
	run("store.Acquire + store.Release", func() error {
		rec, err := st.Acquire(ctx, name, holder, 15*time.Second, "")
		if err != nil {
			return err
		}
		return st.Release(ctx, rec.Term)
	})
	run("Lock.TryAcquire + Release", func() error {
		h, err := lk.TryAcquire(ctx)
		if err != nil {
			return err
		}
		return h.Release(ctx)
	})
	run("Lock.Acquire + Release", func() error {
		h, err := lk.Acquire(ctx)
		if err != nil {
			return err
		}
		return h.Release(ctx)
	})
	// Contention: 8 Locks on one name for one second; requests per cycle.
	c.take()
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		cycles int
	)
	end := time.Now().Add(time.Second)
	cctx, cancel := context.WithDeadline(ctx, end.Add(5*time.Second))
	for i := range 8 {
		l, err := leasehold.NewLock(st, name+"-k", leasehold.Config{Identity: fmt.Sprintf("k%d", i)})
		if err != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				h, err := l.Acquire(cctx)
				if err != nil {
					return
				}
				mu.Lock()
				cycles++
				mu.Unlock()
				h.Release(cctx)
			}
		}()
	}
	wg.Wait()
	cancel()
	if m := c.take(); cycles > 0 {
		rows = append(rows, diagRow{what: "8 x Lock.Acquire + Release on one lock (contention, 1 s)", n: cycles, perCycle: time.Second / time.Duration(cycles), requests: perCycle(m, cycles)})
	}
	return rows
}

// redis: a go-redis hook counts commands (scripts by their name).
type redisCount struct{ c *counter }

func (h redisCount) DialHook(next goredis.DialHook) goredis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		h.c.inc("dial")
		return next(ctx, network, addr)
	}
}
func (h redisCount) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		h.c.inc(cmd.Name())
		return next(ctx, cmd)
	}
}
func (h redisCount) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		h.c.inc("pipeline")
		return next(ctx, cmds)
	}
}

// pgx: a tracer counts statements by their first word.
type pgCount struct{ c *counter }

func (t pgCount) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	w := strings.Fields(d.SQL)
	k := "?"
	if len(w) > 0 {
		k = strings.ToUpper(w[0])
	}
	t.c.inc(k)
	return ctx
}
func (t pgCount) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// etcd: wrappers of the client's KV and Lease APIs count requests.
type etcdKVCount struct {
	clientv3.KV
	c *counter
}

func (k etcdKVCount) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	k.c.inc("Get")
	return k.KV.Get(ctx, key, opts...)
}
func (k etcdKVCount) Put(ctx context.Context, key, val string, opts ...clientv3.OpOption) (*clientv3.PutResponse, error) {
	k.c.inc("Put")
	return k.KV.Put(ctx, key, val, opts...)
}
func (k etcdKVCount) Delete(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.DeleteResponse, error) {
	k.c.inc("Delete")
	return k.KV.Delete(ctx, key, opts...)
}
func (k etcdKVCount) Txn(ctx context.Context) clientv3.Txn {
	k.c.inc("Txn")
	return k.KV.Txn(ctx)
}

type etcdLeaseCount struct {
	clientv3.Lease
	c *counter
}

func (l etcdLeaseCount) Grant(ctx context.Context, ttl int64) (*clientv3.LeaseGrantResponse, error) {
	l.c.inc("LeaseGrant")
	return l.Lease.Grant(ctx, ttl)
}
func (l etcdLeaseCount) Revoke(ctx context.Context, id clientv3.LeaseID) (*clientv3.LeaseRevokeResponse, error) {
	l.c.inc("LeaseRevoke")
	return l.Lease.Revoke(ctx, id)
}
func (l etcdLeaseCount) KeepAliveOnce(ctx context.Context, id clientv3.LeaseID) (*clientv3.LeaseKeepAliveResponse, error) {
	l.c.inc("LeaseKeepAliveOnce")
	return l.Lease.KeepAliveOnce(ctx, id)
}
func (l etcdLeaseCount) TimeToLive(ctx context.Context, id clientv3.LeaseID, opts ...clientv3.LeaseOption) (*clientv3.LeaseTimeToLiveResponse, error) {
	l.c.inc("LeaseTimeToLive")
	return l.Lease.TimeToLive(ctx, id, opts...)
}

type etcdWatchCount struct {
	clientv3.Watcher
	c *counter
}

func (w etcdWatchCount) Watch(ctx context.Context, key string, opts ...clientv3.OpOption) clientv3.WatchChan {
	w.c.inc("Watch")
	return w.Watcher.Watch(ctx, key, opts...)
}

func runDiag(ctx context.Context, w io.Writer, e *envs, n int) {
	var rows []diagRow
	add := func(storeName string, rs []diagRow) {
		for _, r := range rs {
			r.store = storeName
			rows = append(rows, r)
		}
	}
	name := "diag-" + randHex(3)
	if e.redis != nil {
		c := newCounter()
		cl := goredis.NewClient(&goredis.Options{Addr: e.redis.addr, MaxRetries: -1, ContextTimeoutEnabled: true})
		cl.AddHook(redisCount{c})
		st, err := lhredis.New(cl, lhredis.Options{Prefix: e.redis.prefix})
		if err == nil {
			add("redis", diagCycles(ctx, st, c, name, n))
			st.Close()
		}
		cl.Close()
	}
	if e.pg != nil {
		c := newCounter()
		cfg, err := pgxpool.ParseConfig(e.pg.dsn)
		if err == nil {
			cfg.ConnConfig.Tracer = pgCount{c}
			pool, err := pgxpool.NewWithConfig(ctx, cfg)
			if err == nil {
				st, err := lhpg.New(ctx, pool, lhpg.Options{Schema: e.pg.schema})
				if err == nil {
					add("postgres", diagCycles(ctx, st, c, name, n))
					// The same store calls with the table's triggers off.
					tbl := e.pg.schema + ".leader_lease"
					if _, err := e.pg.pool.Exec(ctx, `ALTER TABLE `+tbl+` DISABLE TRIGGER USER`); err == nil {
						rs := diagCycles(ctx, st, c, name+"-notrigger", n)
						e.pg.pool.Exec(context.Background(), `ALTER TABLE `+tbl+` ENABLE TRIGGER USER`)
						if len(rs) > 0 {
							rs[0].what += ", trigger (NOTIFY + history) disabled"
							add("postgres", rs[:1])
						}
					} else {
						logf("diag: disable trigger: %v", err)
					}
					st.Close()
				}
				pool.Close()
			}
		}
	}
	if e.etcd != nil {
		c := newCounter()
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{e.etcd.url}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err == nil {
			cli.KV = etcdKVCount{cli.KV, c}
			cli.Lease = etcdLeaseCount{cli.Lease, c}
			cli.Watcher = etcdWatchCount{cli.Watcher, c}
			st, err := etcdv3client.New(cli, e.etcd.prefix+"diag/")
			if err == nil {
				add("etcd", diagCycles(ctx, st, c, name, n))
				// Background revocations are counted when they land:
				// wait for them before closing.
				st.Close()
				if m := c.take(); len(m) > 0 {
					rows = append(rows, diagRow{store: "etcd", what: "(after the runs: background requests)", n: 1, requests: perCycle(m, 1)})
				}
			}
			cli.Close()
		}
	}
	fmt.Fprintf(w, "\n== Where leasehold's time goes: one client, uncontended lock, %d cycles each; requests per cycle as counted by the client\n", n)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "store\tcalls\tcycles\tper cycle\tcycles/s\trequests per cycle\t")
	for _, r := range rows {
		rate := "-"
		if r.perCycle > 0 {
			rate = fmtRate(float64(time.Second) / float64(r.perCycle))
		}
		per := "-"
		if r.perCycle > 0 {
			per = fmtMs(ms(r.perCycle)) + " ms"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t\n", r.store, r.what, r.n, per, rate, r.requests)
	}
	tw.Flush()
}
