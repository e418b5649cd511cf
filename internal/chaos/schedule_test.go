package chaos

import (
	"context"
	"errors"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store"
)

func planConfig(seed uint64) scheduleConfig {
	return scheduleConfig{Seed: seed, Faults: AllFaults, Span: 60 * time.Second, Nodes: 3, Timings: testTimings(), Slack: time.Second, MaxDrift: 0.2}
}

func TestPlanIsReproducibleAndSpaced(t *testing.T) {
	a, err := planFaults(planConfig(42))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := planFaults(planConfig(42))
	if !reflect.DeepEqual(a, b) {
		t.Fatal("the same seed gave two schedules")
	}
	c, _ := planFaults(planConfig(43))
	if reflect.DeepEqual(a, c) {
		t.Fatal("two seeds gave the same schedule")
	}
	if len(a) < 3 {
		t.Fatalf("only %d faults in 60s", len(a))
	}
	tm := testTimings()
	quiet := failoverBound(tm, time.Second)
	for i, p := range a {
		if p.At+p.Duration+quiet > 60*time.Second {
			t.Errorf("fault %d (%v) does not heal a quiet period before the end", i, p)
		}
		if i > 0 && a[i-1].At+a[i-1].Duration+quiet > p.At {
			t.Errorf("fault %d (%v) starts within the quiet period of %v", i, p, a[i-1])
		}
		switch p.Kind {
		case faultPause, faultBlackhole:
			if p.Duration <= tm.LeaseDuration {
				t.Errorf("%v is not longer than the lease", p)
			}
		case faultClock:
			if p.Rate < 0.8 || p.Rate > 1.2 || p.Step < 0 {
				t.Errorf("%v is outside the drift bounds", p)
			}
		}
	}
}

func TestPlanTakesEveryKindBeforeRepeating(t *testing.T) {
	pc := planConfig(7)
	pc.Faults = []string{faultPause, faultKill, faultTwin}
	p, err := planFaults(pc)
	if err != nil {
		t.Fatal(err)
	}
	if len(p) < 3 {
		t.Fatalf("only %d faults", len(p))
	}
	seen := map[string]bool{}
	for _, f := range p[:3] {
		seen[f.Kind] = true
	}
	if len(seen) != 3 {
		t.Fatalf("the first three faults are %v %v %v", p[0].Kind, p[1].Kind, p[2].Kind)
	}
}

func TestPlanEveryKindEventually(t *testing.T) {
	seen := map[string]bool{}
	for seed := uint64(1); seed <= 20; seed++ {
		p, err := planFaults(planConfig(seed))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range p {
			seen[f.Kind] = true
		}
	}
	for _, k := range AllFaults {
		if !seen[k] {
			t.Errorf("fault %s never planned in 20 seeds", k)
		}
	}
}

func TestParseFaults(t *testing.T) {
	got, err := ParseFaults("pause, kill,pause")
	if err != nil || !reflect.DeepEqual(got, []string{"pause", "kill"}) {
		t.Fatalf("ParseFaults = %v, %v", got, err)
	}
	if got, _ := ParseFaults("all"); len(got) != len(AllFaults) {
		t.Fatalf("all = %v", got)
	}
	_, err = ParseFaults("pause,meteor")
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), `unknown fault "meteor"`) || !strings.Contains(err.Error(), "blackhole") {
		t.Fatalf("unknown fault: %v", err)
	}
	if _, err := ParseFaults(" , "); !errors.Is(err, ErrInvalid) {
		t.Fatalf("empty list: %v", err)
	}
}

func noOpen(context.Context, *url.URL) (store.Store, error) { return nil, errors.New("not opened") }

// Bad input to the harness is refused before anything starts, with a
// message that names what was wrong.
func TestValidateRejectsBadInput(t *testing.T) {
	good := Config{StoreURL: "sqlite:///tmp/x.db", Open: noOpen, NodeCommand: []string{"node"}, Seed: 1}
	if _, err := Validate(good); err != nil {
		t.Fatalf("good config: %v", err)
	}
	cases := []struct {
		name string
		mod  func(c *Config)
		want string
	}{
		{"unknown fault", func(c *Config) { c.Faults = []string{"meteor"} }, `unknown fault "meteor"`},
		{"network fault on a file", func(c *Config) { c.Faults = []string{faultBlackhole} }, `fault "blackhole" needs a store reached over the network`},
		{"too short", func(c *Config) { c.Duration = 3 * time.Second }, "too short"},
		{"bad timings", func(c *Config) {
			c.Timings = leasehold.Timings{LeaseDuration: time.Second, RenewDeadline: 2 * time.Second, RenewInterval: 100 * time.Millisecond}
		}, "leaseDuration 1s must be greater than renewDeadline 2s"},
		{"impossible drift", func(c *Config) { c.MaxDrift = 0.4 }, "--max-drift 0.4 is impossible with these timings"},
		{"think past wind-down", func(c *Config) { c.Think = time.Second }, "--think 1s must be in [0, wind-down 400ms)"},
		{"one node", func(c *Config) { c.Nodes = 1 }, "--nodes 1"},
		{"unknown scheme", func(c *Config) { c.StoreURL = "consul://127.0.0.1:8500" }, "cannot run against consul://"},
		{"remote store", func(c *Config) { c.StoreURL = "redis://10.1.2.3:6379" }, `store host "10.1.2.3" is not a loopback address`},
		{"no host", func(c *Config) { c.StoreURL = "postgres:///db" }, "names no host:port"},
		{"postgres register on redis", func(c *Config) { c.StoreURL = "redis://127.0.0.1:6379"; c.Register = registerPostgres }, "--register postgres needs a PostgreSQL store"},
		{"unknown register", func(c *Config) { c.Register = "etcd" }, `--register "etcd"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := good
			tc.mod(&c)
			_, err := Validate(c)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want ErrInvalid mentioning %q", err, tc.want)
			}
		})
	}
}

func TestStoreURLRewriting(t *testing.T) {
	u, d, eps, err := parseStoreURL("postgres://u:secret@127.0.0.1:5432/db?schema=s&table=t&sslmode=disable", false)
	if err != nil || d.Reach != store.ReachNetwork || !reflect.DeepEqual(eps, []string{"127.0.0.1:5432"}) {
		t.Fatalf("parse: %v %v %v", d, eps, err)
	}
	if s := redact(u); strings.Contains(s, "secret") {
		t.Fatalf("redact: %s", s)
	}
	plain := plainPostgres(u)
	if strings.Contains(plain, "schema=") || strings.Contains(plain, "table=") || !strings.Contains(plain, "sslmode=disable") {
		t.Fatalf("plainPostgres: %s", plain)
	}
	_, _, eps, err = parseStoreURL("etcd://127.0.0.1:2379,localhost:2380/p", false)
	if err != nil || len(eps) != 2 {
		t.Fatalf("etcd endpoints %v %v", eps, err)
	}
	if _, _, eps, _ := parseStoreURL("redis://127.0.0.1/0", false); eps[0] != "127.0.0.1:6379" {
		t.Fatalf("default port: %v", eps)
	}
	p1, _ := newProxy("127.0.0.1:1")
	p2, _ := newProxy("127.0.0.1:2")
	defer p1.Close()
	defer p2.Close()
	eu, _ := url.Parse("etcd://127.0.0.1:1,127.0.0.1:2/p?dial_timeout=1s")
	got := proxiedURL(eu, []*proxy{p1, p2})
	if got != "etcd://"+p1.Addr()+","+p2.Addr()+"/p?dial_timeout=1s" {
		t.Fatalf("proxiedURL = %s", got)
	}
}
