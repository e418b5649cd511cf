package leasehold_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/memstore"
)

func TestTimingsDefaults(t *testing.T) {
	got := leasehold.Timings{}.WithDefaults()
	if got != leasehold.DefaultTimings() {
		t.Fatalf("zero Timings with defaults = %+v, want %+v", got, leasehold.DefaultTimings())
	}
	scaled := leasehold.Timings{LeaseDuration: 3 * time.Second}.WithDefaults()
	if scaled.RenewDeadline != 2*time.Second || scaled.RenewInterval != time.Second || scaled.RetryPeriod != 400*time.Millisecond {
		t.Fatalf("3s lease scaled to %+v", scaled)
	}
	if err := scaled.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestTimingsValidateNamesTheRule(t *testing.T) {
	s := time.Second
	cases := []struct {
		t    leasehold.Timings
		want string
	}{
		{leasehold.Timings{LeaseDuration: 10 * s, RenewDeadline: 10 * s, RenewInterval: 3 * s, RetryPeriod: s}, "leaseDuration 10s must be greater than renewDeadline 10s"},
		{leasehold.Timings{LeaseDuration: 15 * s, RenewDeadline: 5 * s, RenewInterval: 5 * s, RetryPeriod: s}, "renewDeadline 5s must be greater than renewInterval 5s"},
		{leasehold.Timings{LeaseDuration: 15 * s, RenewDeadline: 10 * s, RenewInterval: -s, RetryPeriod: s}, "renewInterval -1s must be > 0"},
		{leasehold.Timings{LeaseDuration: -s}, "leaseDuration -1s is negative"},
		{leasehold.Timings{RetryPeriod: -s}, "retryPeriod -1s must be > 0"},
		{leasehold.Timings{RetryPeriod: 10 * s}, "retryPeriod 10s must be less than renewDeadline 10s"},
		{leasehold.Timings{Jitter: 1.5}, "jitter 1.5 must be in [0, 1]"},
		{leasehold.Timings{Jitter: -0.1}, "jitter -0.1 must be in [0, 1]"},
		{leasehold.Timings{Jitter: math.NaN()}, "jitter NaN must be in [0, 1]"},
		{leasehold.Timings{Jitter: math.Inf(1)}, "jitter +Inf must be in [0, 1]"},
		{leasehold.Timings{LeaseDuration: 25 * time.Hour}, "leaseDuration 25h0m0s is above the maximum 24h0m0s"},
		{leasehold.Timings{LeaseDuration: 1 << 62}, "is above the maximum 24h0m0s"},
		{leasehold.Timings{WindDown: 5 * s}, "windDown 5s must be less than renewDeadline - renewInterval = 5s"},
		{leasehold.Timings{WindDown: -s}, "windDown -1s is negative"},
		{leasehold.Timings{Jitter: leasehold.NoJitter, WindDown: 5 * s}, "windDown 5s must be less than"}, // NoJitter skips no later rule
	}
	for _, c := range cases {
		err := c.t.Validate()
		if !errors.Is(err, leasehold.ErrInvalidConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate(%+v) = %v, want ErrInvalidConfig with %q", c.t, err, c.want)
		}
	}
}

func TestNewElectorRefusesBadConfig(t *testing.T) {
	st := memstore.New()
	cases := []struct {
		name string
		cfg  leasehold.Config
		want string
	}{
		{"", leasehold.Config{Identity: "a"}, "lease name is empty"},
		{"bad name", leasehold.Config{Identity: "a"}, "allowed are letters"},
		{"x", leasehold.Config{}, "identity is empty"},
		{"x", leasehold.Config{Identity: "has space"}, "printable ASCII without spaces"},
		{"x", leasehold.Config{Identity: "a", Metadata: strings.Repeat("m", 2000)}, "metadata is 2000 bytes"},
		{"x", leasehold.Config{Identity: "a", Timings: leasehold.Timings{Jitter: 2}}, "jitter 2"},
	}
	for _, c := range cases {
		_, err := leasehold.NewElector(st, c.name, c.cfg)
		if !errors.Is(err, leasehold.ErrInvalidConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("NewElector(%q, %+v) = %v, want ErrInvalidConfig with %q", c.name, c.cfg, err, c.want)
		}
	}
	if _, err := leasehold.NewElector(nil, "x", leasehold.Config{Identity: "a"}); !errors.Is(err, leasehold.ErrInvalidConfig) {
		t.Errorf("nil store: %v", err)
	}
	if _, err := leasehold.NewLock(st, "", leasehold.Config{Identity: "a"}); !errors.Is(err, leasehold.ErrInvalidConfig) {
		t.Errorf("lock with empty name: %v", err)
	}
}

func TestIdentitiesAreUnique(t *testing.T) {
	seen := map[string]bool{}
	for i := 0; i < 1000; i++ {
		id, err := leasehold.NewIdentity("node")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(id, "node-") || seen[id] {
			t.Fatalf("identity %q: want node-<random>, unique", id)
		}
		seen[id] = true
	}
}

func TestNoJitterIsValid(t *testing.T) {
	if err := (leasehold.Timings{Jitter: leasehold.NoJitter}).Validate(); err != nil {
		t.Fatalf("NoJitter refused: %v", err)
	}
}

// limitedStore declares limits, as the Kubernetes store does (one-second
// resolution of client-go's comparison).
type limitedStore struct {
	*memstore.Store
	limits store.Limits
}

func (l limitedStore) Limits() store.Limits { return l.limits }

// Elector, Lock and Keeper all refuse timings below a store's declared limits,
// naming the rule; the same timings pass on a store without limits.
func TestConstructorsRefuseTimingsBelowStoreLimits(t *testing.T) {
	lim := limitedStore{memstore.New(), store.Limits{MinLeaseDuration: time.Second, TimeResolution: time.Second}}
	build := map[string]func(store.Store, leasehold.Timings) error{
		"elector": func(st store.Store, tm leasehold.Timings) error {
			_, err := leasehold.NewElector(st, "x", leasehold.Config{Identity: "a", Timings: tm})
			return err
		},
		"lock": func(st store.Store, tm leasehold.Timings) error {
			_, err := leasehold.NewLock(st, "x", leasehold.Config{Identity: "a", Timings: tm})
			return err
		},
		"keeper": func(st store.Store, tm leasehold.Timings) error {
			k, err := leasehold.NewKeeper(st, leasehold.Config{Identity: "a", Timings: tm})
			if err == nil {
				k.Close()
			}
			return err
		},
	}
	cases := []struct {
		tm   leasehold.Timings
		want string // "" means accepted
	}{
		{leasehold.Timings{LeaseDuration: 900 * time.Millisecond}, "leaseDuration 900ms is below this store's minimum 1s"},
		// 2s lease: renew deadline 1.333s, margin 667ms, not above the 1s resolution.
		{leasehold.Timings{LeaseDuration: 2 * time.Second}, "leaseDuration - renewDeadline = 666.666667ms must exceed this store's time resolution 1s"},
		{leasehold.Timings{LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RenewInterval: time.Second, RetryPeriod: 500 * time.Millisecond}, "must exceed this store's time resolution 1s"},
		{leasehold.Timings{LeaseDuration: 4 * time.Second}, ""},
		{leasehold.Timings{}, ""},
	}
	for name, b := range build {
		for _, c := range cases {
			err := b(lim, c.tm)
			switch {
			case c.want == "" && err != nil:
				t.Errorf("%s %+v: %v, want accepted", name, c.tm, err)
			case c.want != "" && (!errors.Is(err, leasehold.ErrInvalidConfig) || !strings.Contains(err.Error(), c.want)):
				t.Errorf("%s %+v: %v, want ErrInvalidConfig with %q", name, c.tm, err, c.want)
			}
			if err := b(memstore.New(), c.tm); err != nil {
				t.Errorf("%s %+v on a store without limits: %v", name, c.tm, err)
			}
		}
	}
}
