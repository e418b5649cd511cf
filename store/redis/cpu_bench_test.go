package redis_test

import (
	"context"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold"
	lhredis "github.com/leasehold/leasehold/store/redis"
)

// BenchmarkCycleCPU runs one client's uncontended lock+unlock cycles and
// reports, besides the wall time, what each cycle cost in CPU: the test
// process's (client-cpu-ns/op, getrusage of the whole process) and the
// Redis server's (server-cpu-ns/op, INFO cpu's used_cpu_user+sys of the
// server process; server-cmd/op, the commands its scripts ran, from INFO
// commandstats). CPU is what a loaded 2-core machine makes scarce, and it
// varies much less with the load than the wall time does. Use a Redis that
// nothing else talks to (LEASEHOLD_REDIS_ADDR) for the server's figures.
//
// lock-events is what the bench program's cycles scenario runs: a Lock
// with an OnEvent, Acquire then Release. lock is the same without OnEvent;
// store is store.Acquire + store.Release; redislock is redislock's two
// scripts.
func BenchmarkCycleCPU(b *testing.B) {
	b.Run("lock-events", func(b *testing.B) {
		benchCycleCPU(b, func(st *lhredis.Store) func(ctx context.Context) error {
			lk, err := leasehold.NewLock(st, "bench", leasehold.Config{Identity: "bench", OnEvent: func(leasehold.Event) {}})
			if err != nil {
				b.Fatal(err)
			}
			return lockCycle(lk)
		})
	})
	b.Run("lock", func(b *testing.B) {
		benchCycleCPU(b, func(st *lhredis.Store) func(ctx context.Context) error {
			lk, err := leasehold.NewLock(st, "bench", leasehold.Config{Identity: "bench"})
			if err != nil {
				b.Fatal(err)
			}
			return lockCycle(lk)
		})
	})
	b.Run("store", func(b *testing.B) {
		benchCycleCPU(b, func(st *lhredis.Store) func(ctx context.Context) error {
			return func(ctx context.Context) error {
				rec, err := st.Acquire(ctx, "bench", "node-a", 30*time.Second, "")
				if err != nil {
					return err
				}
				return st.Release(ctx, rec.Term)
			}
		})
	})
	b.Run("redislock", func(b *testing.B) {
		benchCycleCPU(b, func(st *lhredis.Store) func(ctx context.Context) error {
			c := st.Client()
			key := []string{st.LockKey("bench-redislock")}
			const ttl = "30000"
			i := 0
			return func(ctx context.Context) error {
				i++
				value := "node-a." + strconv.Itoa(i)
				if err := redislockObtain.Run(ctx, c, key, value, len(value), ttl).Err(); err != nil {
					return err
				}
				return redislockRelease.Run(ctx, c, key, value).Err()
			}
		})
	})
}

func lockCycle(lk *leasehold.Lock) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		h, err := lk.Acquire(ctx)
		if err != nil {
			return err
		}
		return h.Release(ctx)
	}
}

func benchCycleCPU(b *testing.B, newCycle func(*lhredis.Store) func(context.Context) error) {
	addr := redisAddr(b)
	st := openStore(b, storeURL(addr, freshPrefix(b, addr)))
	adm := admin(b, addr)
	cycle := newCycle(st)
	ctx := context.Background()
	for range 100 { // scripts loaded, connections made
		if err := cycle(ctx); err != nil {
			b.Fatal(err)
		}
	}
	srv0, cmd0 := serverCPU(b, adm)
	cli0 := processCPU()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := cycle(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	cli1 := processCPU()
	srv1, cmd1 := serverCPU(b, adm)
	b.ReportMetric(float64(cli1-cli0)/float64(b.N), "client-cpu-ns/op")
	b.ReportMetric(float64(srv1-srv0)/float64(b.N), "server-cpu-ns/op")
	b.ReportMetric(float64(cmd1-cmd0)/float64(b.N), "server-cmd/op")
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// serverCPU is the server's CPU time and the number of commands it ran
// (scripts' commands included, INFO and EVALSHA themselves not).
func serverCPU(b *testing.B, c *goredis.Client) (time.Duration, int64) {
	info, err := c.Info(context.Background(), "cpu", "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	var cpu float64
	var cmds int64
	for _, line := range strings.Split(info, "\r\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch {
		case k == "used_cpu_user" || k == "used_cpu_sys":
			f, _ := strconv.ParseFloat(v, 64)
			cpu += f
		case strings.HasPrefix(k, "cmdstat_") && k != "cmdstat_info" && k != "cmdstat_evalsha" && k != "cmdstat_eval":
			calls, _, _ := strings.Cut(strings.TrimPrefix(v, "calls="), ",")
			n, _ := strconv.ParseInt(calls, 10, 64)
			cmds += n
		}
	}
	return time.Duration(cpu * float64(time.Second)), cmds
}
