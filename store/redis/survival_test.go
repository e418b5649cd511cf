package redis_test

import (
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/store"
	lhredis "github.com/leasehold/leasehold/store/redis"
)

// grantReleased grants and releases n terms of name on st, and returns the
// last token.
func grantReleased(t *testing.T, st *lhredis.Store, name string, n int) int64 {
	t.Helper()
	ctx := testCtx(t)
	var last int64
	for i := 0; i < n; i++ {
		rec, err := st.Acquire(ctx, name, "node-a", time.Minute, "")
		if err != nil {
			t.Fatal(err)
		}
		if rec.Token <= last {
			t.Fatalf("token %d after %d", rec.Token, last)
		}
		last = rec.Token
		if err := st.Release(ctx, rec.Term); err != nil {
			t.Fatal(err)
		}
	}
	return last
}

// TestTokenSurvivesLoss (issue 13, hole 1): after Redis loses the counter —
// FLUSHALL, or a restart without persistence — a process that saw nothing
// before is still granted a token above every token granted before the loss,
// because the token is never below the server's clock in microseconds.
// Before, it was granted 1 again, a token an old holder may still carry.
func TestTokenSurvivesLoss(t *testing.T) {
	srv := newRedisServer(t)
	losses := map[string]func(t *testing.T){
		"FLUSHALL": func(t *testing.T) {
			if err := admin(t, srv.Addr()).FlushAll(testCtx(t)).Err(); err != nil {
				t.Fatal(err)
			}
		},
		"restart without persistence": func(t *testing.T) {
			srv.Kill()
			srv.Start()
		},
	}
	for what, lose := range losses {
		t.Run(what, func(t *testing.T) {
			u := storeURL(srv.Addr(), "lhtest:survive:"+strings.ReplaceAll(what, " ", "-")+":")
			before := openStore(t, u)
			last := grantReleased(t, before, "job", 3)
			lose(t)
			fresh := openStore(t, u) // a process started after the loss
			rec, err := fresh.Acquire(testCtx(t), "job", "node-fresh", time.Minute, "")
			if err != nil {
				t.Fatalf("Acquire after %s: %v", what, err)
			}
			if rec.Token <= last {
				t.Fatalf("after %s a new process was granted token %d, not above %d granted before", what, rec.Token, last)
			}
			if err := fresh.Release(testCtx(t), rec.Term); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestTokenCounterModeDoesNotSurviveLoss is the documented limit of
// tokens=counter, and the control that the loss above is real: the same
// FLUSHALL makes a new process's token start again at 1.
func TestTokenCounterModeDoesNotSurviveLoss(t *testing.T) {
	srv := newRedisServer(t)
	u := storeURL(srv.Addr(), "lhtest:counter:") + "&tokens=counter"
	last := grantReleased(t, openStore(t, u), "job", 3)
	if last != 3 {
		t.Fatalf("counter tokens: last %d, want 3", last)
	}
	if err := admin(t, srv.Addr()).FlushAll(testCtx(t)).Err(); err != nil {
		t.Fatal(err)
	}
	rec, err := openStore(t, u).Acquire(testCtx(t), "job", "node-fresh", time.Minute, "")
	if err != nil || rec.Token != 1 {
		t.Fatalf("tokens=counter after FLUSHALL: %+v, %v; want token 1 (the counter starts again)", rec, err)
	}
}

// TestTokenRisesWhenCounterAboveClock: a counter above the server's clock (a
// clock stepped back, or a token_floor far ahead) is still raised by one per
// grant: the token is max(counter+1, clock), never the clock alone.
func TestTokenRisesWhenCounterAboveClock(t *testing.T) {
	addr := redisAddr(t)
	st := openStore(t, storeURL(addr, freshPrefix(t, addr)))
	ctx := testCtx(t)
	now, err := admin(t, addr).Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	ahead := now.UnixMicro() + int64(time.Hour/time.Microsecond)
	if err := admin(t, addr).Set(ctx, st.LockKey("job")+":token", ahead, 0).Err(); err != nil {
		t.Fatal(err)
	}
	for i := int64(1); i <= 3; i++ {
		rec, err := st.Acquire(ctx, "job", "node-a", time.Minute, "")
		if err != nil || rec.Token != ahead+i {
			t.Fatalf("grant %d with the counter an hour ahead of the clock: %+v, %v; want token %d", i, rec, err, ahead+i)
		}
	}
}

// TestTokenNotBelowServerClock: a grant's token is at least the server's
// clock in microseconds, read by the script (TIME), and the counter follows.
func TestTokenNotBelowServerClock(t *testing.T) {
	addr := redisAddr(t)
	st := openStore(t, storeURL(addr, freshPrefix(t, addr)))
	ctx := testCtx(t)
	before, err := admin(t, addr).Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	rec, err := st.Acquire(ctx, "job", "node-a", time.Minute, "")
	if err != nil {
		t.Fatal(err)
	}
	after, err := admin(t, addr).Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	if rec.Token < before.UnixMicro() || rec.Token > after.UnixMicro() {
		t.Fatalf("token %d, want the server's clock in µs, between %d and %d", rec.Token, before.UnixMicro(), after.UnixMicro())
	}
	if n, err := admin(t, addr).Get(ctx, st.LockKey("job")+":token").Int64(); err != nil || n != rec.Token {
		t.Fatalf("counter = %d, %v; want the token %d", n, err, rec.Token)
	}
}

// TestTokenURLParameters (issue 13, hole 1: Options.Floor could not be set
// from a URL): tokens= and token_floor= are read, and a bad value is refused
// with store.ErrInvalid naming the parameter.
func TestTokenURLParameters(t *testing.T) {
	addr := redisAddr(t)
	ctx := testCtx(t)
	st := openStore(t, storeURL(addr, freshPrefix(t, addr))+"&tokens=counter&token_floor=41")
	var re *lhredis.TokenRegressError
	if _, err := st.Acquire(ctx, "job", "node-a", time.Minute, ""); !errors.As(err, &re) || re.Seen != 41 || re.Found != 0 {
		t.Fatalf("first Acquire with token_floor=41 on an empty counter: err = %v, want TokenRegressError (seen 41, found 0)", err)
	}
	if rec, err := st.Acquire(ctx, "job", "node-a", time.Minute, ""); err != nil || rec.Token != 42 {
		t.Fatalf("second Acquire with token_floor=41: %+v, %v; want token 42", rec, err)
	}
	for _, q := range []string{"tokens=server_time", "tokens=counter", "token_floor=0", "token_floor=9007199254740992"} {
		u, _ := url.Parse(storeURL(addr, "p:") + "&" + q)
		if _, _, err := lhredis.ParseOptions(u); err != nil {
			t.Errorf("%s: %v", q, err)
		}
	}
	for _, q := range []string{"tokens=clock", "tokens=", "token_floor=-1", "token_floor=abc", "token_floor=", "token_floor=9007199254740993", "token_floor=1e6"} {
		u, _ := url.Parse(storeURL(addr, "p:") + "&" + q)
		_, _, err := lhredis.ParseOptions(u)
		param, _, _ := strings.Cut(q, "=")
		if !errors.Is(err, store.ErrInvalid) || !strings.Contains(err.Error(), param+"=") {
			t.Errorf("%s: err = %v, want ErrInvalid naming %s", q, err, param)
		}
		if _, err := lhredis.Open(ctx, u.String()); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("Open with %s: err = %v, want ErrInvalid", q, err)
		}
	}
	c := admin(t, addr)
	if _, err := lhredis.New(c, lhredis.Options{Tokens: lhredis.Tokens(7)}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("New with Tokens(7): err = %v, want ErrInvalid", err)
	}
}
