package chaos

import (
	"os"
	"strings"
	"testing"
	"time"

	"path/filepath"

	"github.com/leasehold/leasehold/store/zookeeper/zktest"
)

// TestChaosSoak is the long run, off by default. Run it with
//
//	LEASEHOLD_CHAOS_SOAK=10m go test ./internal/chaos -run TestChaosSoak -v -timeout 3h
//
// for every fault kind on each store (10 minutes of faults per store), or
// choose stores with LEASEHOLD_CHAOS_SOAK_STORES=sqlite,postgres,redis,etcd,kubernetes,
// and keep the reports with LEASEHOLD_CHAOS_OUT=DIR. A given
// LEASEHOLD_CHAOS_SEED repeats a schedule.
func TestChaosSoak(t *testing.T) {
	v := os.Getenv("LEASEHOLD_CHAOS_SOAK")
	if v == "" {
		t.Skip("the soak runs only with LEASEHOLD_CHAOS_SOAK=DURATION (e.g. 10m)")
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("LEASEHOLD_CHAOS_SOAK=%q is not a positive duration", v)
	}
	stores := map[string]bool{"sqlite": true, "postgres": true, "redis": true, "etcd": true, "zookeeper": true, "kubernetes": true}
	if s := os.Getenv("LEASEHOLD_CHAOS_SOAK_STORES"); s != "" {
		stores = map[string]bool{}
		for _, name := range strings.Split(s, ",") {
			stores[strings.TrimSpace(name)] = true
		}
	}
	if stores["sqlite"] {
		t.Run("sqlite", func(t *testing.T) {
			c := baseConfig(t, "sqlite://"+filepath.Join(t.TempDir(), "leases.db"), d)
			runClean(t, c)
		})
	}
	if stores["postgres"] {
		t.Run("postgres", func(t *testing.T) {
			runClean(t, baseConfig(t, pgURL(t), d))
		})
	}
	if stores["redis"] {
		t.Run("redis", func(t *testing.T) {
			r := startRedis(t)
			c := baseConfig(t, r.URL(), d)
			c.StoreControl = r
			runClean(t, c)
		})
	}
	if stores["etcd"] {
		t.Run("etcd", func(t *testing.T) {
			m := startEtcd(t)
			c := baseConfig(t, m.URL(), d)
			c.StoreControl = m
			runClean(t, c)
		})
	}
	if stores["zookeeper"] {
		t.Run("zookeeper", func(t *testing.T) {
			srv := zktest.Standalone(t, zktest.Options{})
			c := baseConfig(t, "zookeeper://"+srv.Addr()+"/chaos", d)
			c.StoreControl = zkServer{srv}
			runClean(t, c)
		})
	}
	if stores["kubernetes"] {
		t.Run("kubernetes", func(t *testing.T) {
			c := baseConfig(t, startKube(t), d)
			c.AllowRemote = true // the test's own kube-apiserver, on 127.0.0.1
			runClean(t, c)       // the faults that need no proxy
		})
	}
}
