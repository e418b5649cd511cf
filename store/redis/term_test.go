package redis_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store"
	lhredis "github.com/leasehold/leasehold/store/redis"
)

// TestExactTermByTokenPrefix: the scripts find a term's token as the prefix
// "token:" of its record. A term whose token's digits begin the live token's
// (1 and 12), of the same holder, can neither renew nor release the live
// term; metadata with colons survives a renewal, and the renewed TTL is
// recorded.
func TestExactTermByTokenPrefix(t *testing.T) {
	addr := redisAddr(t)
	st := openStore(t, storeURL(addr, freshPrefix(t, addr))+"&tokens=counter") // tokens 1 and 12 prefix each other
	ctx := testCtx(t)
	const md = "addr=10.0.0.1:8080:x"
	var first, live store.Record
	for i := 0; i < 12; i++ {
		rec, err := st.Acquire(ctx, "job", "node-a", time.Minute, md)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = rec
		}
		live = rec
	}
	if first.Token != 1 || live.Token != 12 {
		t.Fatalf("tokens %d and %d, want 1 and 12", first.Token, live.Token)
	}
	for _, tok := range []int64{1, 2, 11, 13, 120} {
		stale := store.Term{Name: "job", Holder: "node-a", Token: tok}
		if _, err := st.Renew(ctx, stale, time.Minute); !errors.Is(err, store.ErrNotHeld) {
			t.Errorf("Renew(%v) while %v is live: err = %v, want ErrNotHeld", stale, live.Term, err)
		}
		if err := st.Release(ctx, stale); !errors.Is(err, store.ErrNotHeld) {
			t.Errorf("Release(%v) while %v is live: err = %v, want ErrNotHeld", stale, live.Term, err)
		}
	}
	r, err := st.Renew(ctx, live.Term, 2*time.Minute)
	if err != nil || r.Metadata != md || r.TTL != 2*time.Minute || r.Remaining != 2*time.Minute {
		t.Fatalf("Renew of the live term = %+v, %v; want metadata %q, TTL and Remaining 2m", r, err, md)
	}
	g, err := st.Get(ctx, "job")
	if err != nil || g.Term != live.Term || g.Metadata != md || g.TTL != 2*time.Minute || g.Remaining <= time.Minute {
		t.Fatalf("Get after the renewal = %+v, %v; want %v with metadata %q, TTL 2m", g, err, live.Term, md)
	}
	if err := st.Release(ctx, live.Term); err != nil {
		t.Fatalf("Release of the live term: %v", err)
	}
	if g, err := st.Get(ctx, "job"); err != nil || g.Holder != "" || g.Token != 12 {
		t.Fatalf("Get after the release = %+v, %v; want free with the last token 12", g, err)
	}
}

// TestCorruptCounterGrantsNothing: a counter that is not an integer (written
// by something else) makes Acquire fail without granting: the lock key set
// by the script's SET NX is taken back.
func TestCorruptCounterGrantsNothing(t *testing.T) {
	addr := redisAddr(t)
	st := openStore(t, storeURL(addr, freshPrefix(t, addr)))
	ctx := testCtx(t)
	c := admin(t, addr)
	if err := c.Set(ctx, st.LockKey("job")+":token", "not-a-number", 0).Err(); err != nil {
		t.Fatal(err)
	}
	_, err := st.Acquire(ctx, "job", "node-a", time.Minute, "")
	if err == nil || errors.Is(err, store.ErrHeld) || !strings.Contains(err.Error(), "not an integer") {
		t.Fatalf("Acquire over a corrupt counter: err = %v, want Redis's \"not an integer\" error", err)
	}
	if n, err := c.Exists(ctx, st.LockKey("job"), st.LockKey("job")+":term").Result(); err != nil || n != 0 {
		t.Fatalf("after the failed Acquire, %d of the lock and term keys exist (%v); want none", n, err)
	}
	// The script wrote the clock over the counter and read it back in one
	// command (SET ... GET): it must have put the value back.
	if v, err := c.Get(ctx, st.LockKey("job")+":token").Result(); err != nil || v != "not-a-number" {
		t.Fatalf("after the failed Acquire the counter holds %q (%v); want it as it was, \"not-a-number\"", v, err)
	}
	// A counter Lua's numbers cannot hold exactly is refused the same way.
	if err := c.Set(ctx, st.LockKey("job")+":token", "9007199254740992", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Acquire(ctx, "job", "node-a", time.Minute, ""); err == nil || !strings.Contains(err.Error(), "not an integer") {
		t.Fatalf("Acquire over a counter of 2^53: err = %v, want the \"not an integer\" error", err)
	}
	if v, err := c.Get(ctx, st.LockKey("job")+":token").Result(); err != nil || v != "9007199254740992" {
		t.Fatalf("after the refused Acquire the counter holds %q (%v); want 9007199254740992", v, err)
	}
}

// TestServerTimeRegress: with tokens=server_time (the default) a counter
// below the floor the caller has seen is a regress even when the clock is
// above the counter (here the floor is an hour ahead of the clock): the
// Acquire grants nothing, leaves the lock free and raises the counter to
// the floor; the next Acquire's token is the floor plus one.
func TestServerTimeRegress(t *testing.T) {
	addr := redisAddr(t)
	c := admin(t, addr)
	ctx := testCtx(t)
	now, err := c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	floor := now.UnixMicro() + int64(time.Hour/time.Microsecond)
	st := openStore(t, storeURL(addr, freshPrefix(t, addr))+"&token_floor="+strconv.FormatInt(floor, 10))
	if err := c.Set(ctx, st.LockKey("job")+":token", 5, 0).Err(); err != nil {
		t.Fatal(err)
	}
	var re *lhredis.TokenRegressError
	if _, err := st.Acquire(ctx, "job", "node-a", time.Minute, ""); !errors.As(err, &re) || re.Seen != floor || re.Found != 5 {
		t.Fatalf("Acquire over counter 5 with floor %d: err = %v, want TokenRegressError (seen %d, found 5)", floor, err, floor)
	}
	if n, err := c.Exists(ctx, st.LockKey("job"), st.LockKey("job")+":term").Result(); err != nil || n != 0 {
		t.Fatalf("after the regress, %d of the lock and term keys exist (%v); want none", n, err)
	}
	if v, err := c.Get(ctx, st.LockKey("job")+":token").Int64(); err != nil || v != floor {
		t.Fatalf("after the regress the counter is %d (%v); want the floor %d", v, err, floor)
	}
	rec, err := st.Acquire(ctx, "job", "node-a", time.Minute, "")
	if err != nil || rec.Token != floor+1 {
		t.Fatalf("Acquire after the regress = %+v, %v; want token %d", rec, err, floor+1)
	}
}

// commandCounter is a go-redis hook that counts the commands a client sends,
// by name, pipelined ones included.
type commandCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *commandCounter) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (c *commandCounter) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		c.add(cmd)
		return next(ctx, cmd)
	}
}

func (c *commandCounter) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		c.add(cmds...)
		return next(ctx, cmds)
	}
}

func (c *commandCounter) add(cmds ...goredis.Cmder) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, cmd := range cmds {
		c.n[cmd.Name()]++
	}
}

// take returns the counts since the last take, by command name.
func (c *commandCounter) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.n
	c.n = map[string]int{}
	return n
}

func countCommands(t *testing.T, st *lhredis.Store) *commandCounter {
	t.Helper()
	cl, ok := st.Client().(*goredis.Client)
	if !ok {
		t.Fatalf("client is %T, want *redis.Client", st.Client())
	}
	cc := &commandCounter{n: map[string]int{}}
	cl.AddHook(cc)
	return cc
}

func wantOne(t *testing.T, what string, got map[string]int) {
	t.Helper()
	if len(got) != 1 || got["evalsha"] != 1 {
		t.Errorf("%s sent %v, want exactly one EVALSHA", what, got)
	}
}

// TestOneRequestPerCall: each store call is one EVALSHA (no EVAL with the
// script's source, no separate reads), and leasehold's Lock adds none: a
// free lock is taken with one request and given back with one, whether by
// TryAcquire or Acquire (which subscribes only after a refusal).
func TestOneRequestPerCall(t *testing.T) {
	addr := redisAddr(t)
	st := openStore(t, storeURL(addr, freshPrefix(t, addr)))
	ctx := testCtx(t)
	// Load the scripts (a server that has not seen one answers NOSCRIPT and
	// go-redis sends it once with EVAL), then count.
	rec, err := st.Acquire(ctx, "warm", "w", time.Minute, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Renew(ctx, rec.Term, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := st.Release(ctx, rec.Term); err != nil {
		t.Fatal(err)
	}
	cc := countCommands(t, st)

	rec, err = st.Acquire(ctx, "job", "node-a", time.Minute, "m")
	if err != nil {
		t.Fatal(err)
	}
	wantOne(t, "store.Acquire", cc.take())
	if _, err := st.Acquire(ctx, "job", "node-b", time.Minute, ""); !errors.Is(err, store.ErrHeld) {
		t.Fatalf("Acquire of a held lease: err = %v, want ErrHeld", err)
	}
	wantOne(t, "a refused store.Acquire", cc.take())
	if _, err := st.Renew(ctx, rec.Term, time.Minute); err != nil {
		t.Fatal(err)
	}
	wantOne(t, "store.Renew", cc.take())
	if err := st.Release(ctx, rec.Term); err != nil {
		t.Fatal(err)
	}
	wantOne(t, "store.Release", cc.take())

	lk, err := leasehold.NewLock(st, "lock", leasehold.Config{Identity: "a"})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		h, err := lk.TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		wantOne(t, "Lock.TryAcquire of a free lock", cc.take())
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
		wantOne(t, "Held.Release", cc.take())
		h, err = lk.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		wantOne(t, "Lock.Acquire of a free lock", cc.take())
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
		wantOne(t, "Held.Release", cc.take())
	}
}

// TestRenewManyAfterScriptFlush: RenewMany pipelines EVALSHA; on a server
// whose script cache was flushed (a restart does that too) the commands that
// answered NOSCRIPT, which ran nothing, are sent again with EVAL, once, and
// every term is renewed. It runs on its own redis-server, since SCRIPT FLUSH
// would touch other tests' clients.
func TestRenewManyAfterScriptFlush(t *testing.T) {
	srv := newRedisServer(t)
	st := openStore(t, storeURL(srv.Addr(), "lhtest:flush:"))
	ctx := testCtx(t)
	var terms []store.Term
	for _, name := range []string{"a", "b", "c"} {
		rec, err := st.Acquire(ctx, name, "node-a", time.Minute, "m-"+name)
		if err != nil {
			t.Fatal(err)
		}
		terms = append(terms, rec.Term)
	}
	stale := store.Term{Name: "a", Holder: "node-a", Token: terms[0].Token + 5}
	batch := append(terms[:len(terms):len(terms)], stale)
	check := func(what string) {
		t.Helper()
		recs, errs, err := st.RenewMany(ctx, batch, 2*time.Minute)
		if err != nil {
			t.Fatalf("%s: RenewMany: %v", what, err)
		}
		for i, tm := range terms {
			if errs[i] != nil || recs[i].Term != tm || recs[i].Metadata != "m-"+tm.Name || recs[i].TTL != 2*time.Minute {
				t.Errorf("%s: RenewMany of %v = %+v, %v; want renewed for 2m with its metadata", what, tm, recs[i], errs[i])
			}
		}
		if !errors.Is(errs[len(terms)], store.ErrNotHeld) {
			t.Errorf("%s: RenewMany of the stale term %v: err = %v, want ErrNotHeld", what, stale, errs[len(terms)])
		}
	}
	cc := countCommands(t, st)
	if err := st.Client().ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	cc.take()
	check("after SCRIPT FLUSH")
	// (go-redis drops the connection of a pipeline whose first reply is an
	// error and dials a new one: HELLO and CLIENT SETINFO are not counted.)
	if got := cc.take(); got["evalsha"] != 4 || got["eval"] != 4 {
		t.Errorf("after SCRIPT FLUSH RenewMany sent %v, want 4 EVALSHA (refused) then 4 EVAL", got)
	}
	check("with the script cached")
	if got := cc.take(); got["evalsha"] != 4 || len(got) != 1 {
		t.Errorf("with the script cached RenewMany sent %v, want 4 EVALSHA only", got)
	}
}
