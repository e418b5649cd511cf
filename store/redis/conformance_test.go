package redis_test

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/store"
	lhredis "github.com/leasehold/leasehold/store/redis"
	"github.com/leasehold/leasehold/store/storetest"
)

// conformanceMinTTL is the TTL the suite waits out; Redis honours 1 ms.
const conformanceMinTTL = 50 * time.Millisecond

// TestConformance runs the store contract's suite against the real Redis,
// each subtest under its own key prefix, each handle with its own client, as
// separate processes would.
func TestConformance(t *testing.T) {
	addr := redisAddr(t)
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T) func() (store.Store, error) {
			prefix := freshPrefix(t, addr)
			u, err := url.Parse(storeURL(addr, prefix))
			if err != nil {
				t.Fatal(err)
			}
			return func() (store.Store, error) {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				return lhredis.OpenURL(ctx, u)
			}
		},
		MinTTL: conformanceMinTTL,
		Losses: []storetest.Loss{{
			// An eviction, or a restart or FLUSHALL as far as this lease is
			// concerned (TestTokenSurvivesLoss does those on its own server):
			// the lease's keys, counter included, are gone.
			Name:     "lease keys deleted",
			Lose:     loseLeaseKeys(addr),
			Survives: true,
		}},
	})
}

// TestConformanceCounterTokens runs the suite with tokens=counter, whose
// README claim is weaker: the counter starts again after a loss, and only a
// handle that saw the old tokens refuses to go below them.
func TestConformanceCounterTokens(t *testing.T) {
	addr := redisAddr(t)
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T) func() (store.Store, error) {
			u, err := url.Parse(storeURL(addr, freshPrefix(t, addr)) + "&tokens=counter")
			if err != nil {
				t.Fatal(err)
			}
			return func() (store.Store, error) {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				return lhredis.OpenURL(ctx, u)
			}
		},
		MinTTL: conformanceMinTTL,
		Losses: []storetest.Loss{{Name: "lease keys deleted", Lose: loseLeaseKeys(addr), Survives: false}},
	})
}

// loseLeaseKeys deletes every key of the lease, as the admin user.
func loseLeaseKeys(addr string) func(t *testing.T, open func() (store.Store, error), name string) error {
	return func(t *testing.T, open func() (store.Store, error), name string) error {
		st, err := open()
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		lock := st.(*lhredis.Store).LockKey(name)
		if err := admin(t, addr).Del(testCtx(t), lock, lock+":token", lock+":term").Err(); err != nil {
			t.Fatalf("delete the keys of %q: %v", name, err)
		}
		return nil
	}
}

// aclCommands is the least a leasehold user needs, and what the README
// gives. The scripts' own commands are checked by Redis against the ACL too.
var aclCommands = []string{
	"-@all",
	"+ping", "+hello", "+auth",
	"+eval", "+evalsha",
	"+get", "+set", "+incr", "+del", "+pexpire", "+pttl", "+time",
	"+publish", "+subscribe", "+unsubscribe",
	"+scan",
	"+zadd", "+zrem", "+zrank", "+zscore", "+zrangebyscore",
}

// aclUser creates a Redis ACL user limited to keys and channels under
// prefix, with aclCommands, and deletes it when the test ends. It returns
// the user's name and password.
func aclUser(t *testing.T, addr, prefix string) (user, password string) {
	t.Helper()
	c := admin(t, addr)
	user = "lhtest-" + randHex(6)
	password = "pw-" + randHex(12)
	rules := []any{"ACL", "SETUSER", user, "reset", "on", ">" + password,
		"resetkeys", "~" + prefix + "*", "resetchannels", "&" + prefix + "*"}
	for _, r := range aclCommands {
		rules = append(rules, r)
	}
	ctx := testCtx(t)
	if err := c.Do(ctx, rules...).Err(); err != nil {
		t.Fatalf("ACL SETUSER: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := c.Do(ctx, "ACL", "DELUSER", user).Err(); err != nil {
			t.Errorf("cleanup: ACL DELUSER %s: %v", user, err)
		}
	})
	return user, password
}

// TestConformanceRestrictedACL runs the suite as a Redis ACL user that may
// touch only its prefix's keys and channels and run only aclCommands: the
// README's restricted user works, and the store needs nothing more.
func TestConformanceRestrictedACL(t *testing.T) {
	addr := redisAddr(t)
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T) func() (store.Store, error) {
			prefix := freshPrefix(t, addr)
			user, password := aclUser(t, addr, prefix)
			u, err := url.Parse(storeURL(addr, prefix))
			if err != nil {
				t.Fatal(err)
			}
			u.User = url.UserPassword(user, password)
			return func() (store.Store, error) {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				return lhredis.OpenURL(ctx, u)
			}
		},
		MinTTL: conformanceMinTTL,
	})
}

// TestRestrictedACLIsRestricted checks that the ACL above really confines
// the user: it cannot read or write a key outside its prefix, nor run
// FLUSHALL or CONFIG.
func TestRestrictedACLIsRestricted(t *testing.T) {
	addr := redisAddr(t)
	prefix := freshPrefix(t, addr)
	user, password := aclUser(t, addr, prefix)
	other := freshPrefix(t, addr)
	ctx := testCtx(t)
	if err := admin(t, addr).Set(ctx, other+"secret", "x", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(storeURL(addr, prefix))
	u.User = url.UserPassword(user, password)
	st := openStore(t, u.String())
	c := st.Client()
	if err := c.Get(ctx, other+"secret").Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Errorf("GET outside the prefix as the restricted user: err = %v, want NOPERM", err)
	}
	for _, cmd := range [][]any{{"FLUSHALL"}, {"CONFIG", "GET", "requirepass"}, {"SET", other + "x", "1"}} {
		if err := c.Do(ctx, cmd...).Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
			t.Errorf("%v as the restricted user: err = %v, want NOPERM", cmd, err)
		}
	}
	// The same user's store under another prefix cannot take a lease.
	u2, _ := url.Parse(storeURL(addr, other))
	u2.User = url.UserPassword(user, password)
	st2 := openStore(t, u2.String())
	if _, err := st2.Acquire(ctx, "job", "node-a", time.Minute, ""); err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Errorf("Acquire under a prefix the user may not touch: err = %v, want NOPERM", err)
	}
}
