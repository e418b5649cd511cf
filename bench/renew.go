package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold/store"
	lhpg "github.com/leasehold/leasehold/store/postgres"
)

// The renewal cost of many leases held by one process, on PostgreSQL: the
// same terms renewed once with one statement per lease (store.Renew, 16 in
// flight, as leasehold.Keeper does on a store without store.BatchRenewer)
// and with one batched statement (store.BatchRenewer.RenewMany, as Keeper
// does on PostgreSQL). The store's cost is measured on the server: the CPU
// time (utime+stime in /proc/<pid>/stat) of the PostgreSQL backend processes
// serving the bench's own connections, found by their application_name.
// pg_stat_statements would be finer, but it needs shared_preload_libraries
// and a server restart, which the bench does not do to a shared server.

const perLeaseParallel = 16

type renewEnv struct {
	pool *pgxpool.Pool
	st   *lhpg.Store
	pids []int
	// terms by size: the first n of all.
	terms []store.Term
}

func (e *pgEnv) openRenew(ctx context.Context, maxN int) (*renewEnv, error) {
	app := "lhbench-renew-" + randHex(4)
	dsn, err := withParams(e.dsn, "application_name", app,
		"pool_max_conns", strconv.Itoa(perLeaseParallel), "pool_min_conns", strconv.Itoa(perLeaseParallel))
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return nil, err
	}
	re := &renewEnv{pool: pool}
	// Open every connection now, so that the backends are known.
	var conns []*pgxpool.Conn
	for range perLeaseParallel {
		c, err := pool.Acquire(ctx)
		if err != nil {
			pool.Close()
			return nil, err
		}
		conns = append(conns, c)
	}
	for _, c := range conns {
		c.Release()
	}
	rows, err := e.pool.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE application_name = $1`, app)
	if err != nil {
		pool.Close()
		return nil, err
	}
	for rows.Next() {
		var pid int
		rows.Scan(&pid)
		re.pids = append(re.pids, pid)
	}
	rows.Close()
	re.st, err = lhpg.New(ctx, pool, lhpg.Options{Schema: e.schema, NoWatch: true})
	if err != nil {
		pool.Close()
		return nil, err
	}
	// Acquire the leases once (held for the whole run), 16 at a time.
	re.terms = make([]store.Term, maxN)
	holder := "bench-renew-" + randHex(4)
	var wg sync.WaitGroup
	errs := make(chan error, perLeaseParallel)
	next := make(chan int)
	for range perLeaseParallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				rec, err := re.st.Acquire(ctx, fmt.Sprintf("renew/%05d", i), holder, time.Hour, "")
				if err != nil {
					select {
					case errs <- err:
					default:
					}
					continue
				}
				re.terms[i] = rec.Term
			}
		}()
	}
	for i := range maxN {
		next <- i
	}
	close(next)
	wg.Wait()
	select {
	case err := <-errs:
		re.close()
		return nil, fmt.Errorf("acquire the renewal leases: %w", err)
	default:
	}
	return re, nil
}

func (re *renewEnv) close() {
	re.st.Close()
	re.pool.Close()
}

var clkTck = 100.0 // USER_HZ on Linux

// backendCPU is the summed utime+stime of the backends, in seconds; ok is
// false where /proc cannot be read (the server is not on this machine).
func (re *renewEnv) backendCPU() (float64, bool) {
	var ticks float64
	for _, pid := range re.pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return 0, false
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			return 0, false
		}
		f := strings.Fields(s[i+1:])
		// fields after ")": state(3) ... utime is field 14, stime 15 (1-based).
		if len(f) < 13 {
			return 0, false
		}
		ut, _ := strconv.ParseFloat(f[11], 64)
		st, _ := strconv.ParseFloat(f[12], 64)
		ticks += ut + st
	}
	return ticks / clkTck, true
}

// renewCost is one measurement.
type renewCost struct {
	Leases       int     `json:"leases"`
	Statements   int     `json:"statements"`
	Seconds      float64 `json:"seconds"`
	BackendCPU   float64 `json:"backend_cpu_s"` // -1 if unknown
	LeasesPerSec float64 `json:"leases_per_s"`
	StmtPerSec   float64 `json:"statements_per_s"`
	// CPUPerKLease is backend CPU milliseconds per 1,000 leases renewed.
	CPUPerKLease float64 `json:"cpu_ms_per_1000_leases"`
	Failed       int     `json:"failed"`
}

// perLease renews terms one statement each, perLeaseParallel at a time,
// repeating the whole set until at least minDur has passed.
func (re *renewEnv) measure(ctx context.Context, terms []store.Term, batch bool, minDur time.Duration) renewCost {
	c := renewCost{}
	cpu0, ok := re.backendCPU()
	start := time.Now()
	for time.Since(start) < minDur || c.Leases == 0 {
		if batch {
			_, errs, err := re.st.RenewMany(ctx, terms, time.Hour)
			c.Statements++
			if err != nil {
				c.Failed += len(terms)
			} else {
				for _, e := range errs {
					if e != nil {
						c.Failed++
					}
				}
			}
		} else {
			var wg sync.WaitGroup
			var mu sync.Mutex
			sem := make(chan struct{}, perLeaseParallel)
			for _, t := range terms {
				sem <- struct{}{}
				wg.Add(1)
				go func() {
					defer func() { <-sem; wg.Done() }()
					if _, err := re.st.Renew(ctx, t, time.Hour); err != nil {
						mu.Lock()
						c.Failed++
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			c.Statements += len(terms)
		}
		c.Leases += len(terms)
	}
	c.Seconds = time.Since(start).Seconds()
	cpu1, ok1 := re.backendCPU()
	c.BackendCPU = -1
	if ok && ok1 {
		c.BackendCPU = cpu1 - cpu0
		c.CPUPerKLease = c.BackendCPU * 1000 / float64(c.Leases) * 1000
	}
	c.LeasesPerSec = float64(c.Leases) / c.Seconds
	c.StmtPerSec = float64(c.Statements) / c.Seconds
	return c
}
