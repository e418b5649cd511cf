package schedtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/registry"
)

// Real time: a 2s period, skews of more than a period each way, 8 periods.
var base = Options{
	Skews:   []time.Duration{0, 2500 * time.Millisecond, -4500 * time.Millisecond, 300 * time.Millisecond},
	Every:   2 * time.Second,
	Periods: 8,
	Timings: leasehold.Timings{LeaseDuration: 1500 * time.Millisecond, RenewDeadline: time.Second, RenewInterval: 400 * time.Millisecond, RetryPeriod: 200 * time.Millisecond},
}

func suffix() string {
	var b [4]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func opener(rawURL string) func(t *testing.T) store.Store {
	return func(t *testing.T) store.Store {
		u, err := url.Parse(rawURL)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		st, err := registry.Open(ctx, u)
		if err != nil {
			t.Fatalf("open %s: %v", store.RedactURL(u), err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}
}

func TestSQLite(t *testing.T) {
	o := base
	o.Open = opener("sqlite://" + filepath.Join(t.TempDir(), "leases.db"))
	Check(t, o)
}

func TestPostgreSQL(t *testing.T) {
	addr := testenv.RequireTCP(t, "PostgreSQL", "127.0.0.1:5432", "start PostgreSQL on 127.0.0.1:5432 (user postgres, database test)")
	dsn := "postgres://postgres@" + addr + "/test"
	schema := "lh_sched_" + suffix()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		testenv.Missing(t, "PostgreSQL database test", err.Error())
	}
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if c, err := pgx.Connect(ctx, dsn); err == nil {
			c.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE")
			c.Close(ctx)
		}
	})
	o := base
	o.Open = opener(dsn + "?schema=" + schema + "&create_if_missing=true")
	Check(t, o)
}

func TestRedis(t *testing.T) {
	addr := testenv.RequireTCP(t, "Redis", "127.0.0.1:6379", "start Redis on 127.0.0.1:6379")
	o := base
	o.Open = opener("redis://" + addr + "/0?prefix=lh-sched-" + suffix() + ":")
	Check(t, o)
}
