package redis_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/freeport"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store"
	lhredis "github.com/leasehold/leasehold/store/redis"
)

func TestOpenURLBadInput(t *testing.T) {
	const secret = "s3cret-Pw"
	pwFile := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pwFile, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		url, want string
	}{
		{"http://u:" + secret + "@127.0.0.1:6379/0", `scheme "http"`},
		{"redis://u:" + secret + "@/0", "no host"},
		{"redis:u:" + secret + "@127.0.0.1", "no host"},
		{"redis://u:" + secret + "@127.0.0.1:6379/zero", "database"},
		{"redis://u:" + secret + "@127.0.0.1:6379/0/1", "path"},
		{"redis://u:" + secret + "@127.0.0.1:6379/0?bogus=1", "bogus"},
		{"redis://u:" + secret + "@127.0.0.1:6379/0?prefix=", "prefix is empty"},
		{"redis://u:" + secret + "@127.0.0.1:6379/0?prefix=a{b}", "key prefix"},
		{"redis://u:" + secret + "@127.0.0.1:6379/0?prefix=has%20space", "key prefix"},
		{"redis://u:" + secret + "@127.0.0.1:6379/0?prefix=" + strings.Repeat("p", 129), "key prefix"},
		{"redis://u:" + secret + "@127.0.0.1:6379/0?ca_file=/etc/hosts", "ca_file needs the rediss scheme"},
		{"rediss://u:" + secret + "@127.0.0.1:6379/0?ca_file=/nonexistent/ca.pem", "ca_file"},
		{"rediss://u:" + secret + "@127.0.0.1:6379/0?ca_file=" + pwFile, "no PEM certificate"},
		{"redis://u:" + secret + "@127.0.0.1:6379/0?password_file=" + pwFile, "both a password and password_file"},
		{"redis://u@127.0.0.1:6379/0?password_file=/nonexistent/pw", "password_file"},
		{"redis://u:" + secret + "@127.0.0.1:6379/0?dial_timeout=soon", "dial_timeout"},
	}
	for _, c := range cases {
		u, err := url.Parse(c.url)
		if err != nil {
			t.Fatalf("test URL %q: %v", c.url, err)
		}
		_, err = lhredis.OpenURL(testCtx(t), u)
		if !errors.Is(err, store.ErrInvalid) {
			t.Errorf("OpenURL(%s): err = %v, want ErrInvalid", u.Redacted(), err)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("OpenURL(%s): err = %q, want it to mention %q", u.Redacted(), err, c.want)
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("OpenURL(%s): err = %q shows the password", u.Redacted(), err)
		}
	}
	// A string that is not a URL at all: url.Parse would quote it whole.
	_, err := lhredis.Open(testCtx(t), "redis://u:"+secret+"@[::1")
	if !errors.Is(err, store.ErrInvalid) || strings.Contains(err.Error(), secret) {
		t.Errorf("Open of an unparsable URL: err = %v, want ErrInvalid without the password", err)
	}
	if _, err := lhredis.OpenURL(testCtx(t), nil); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("OpenURL(nil): err = %v, want ErrInvalid", err)
	}
	if _, err := lhredis.New(nil, lhredis.Options{}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("New(nil client): err = %v, want ErrInvalid", err)
	}
	if _, err := lhredis.New(goredis.NewClient(&goredis.Options{}), lhredis.Options{Prefix: "x*"}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("New with prefix x*: err = %v, want ErrInvalid", err)
	}
}

func TestWrongPassword(t *testing.T) {
	addr := redisAddr(t)
	prefix := freshPrefix(t, addr)
	user, password := aclUser(t, addr, prefix)
	wrong := password + "-wrong"
	u, _ := url.Parse(storeURL(addr, prefix))
	u.User = url.UserPassword(user, wrong)
	_, err := lhredis.OpenURL(testCtx(t), u)
	if err == nil {
		t.Fatal("OpenURL with a wrong password succeeded")
	}
	if !goredis.IsAuthError(err) {
		t.Errorf("err = %v, want an authentication error (WRONGPASS)", err)
	}
	if strings.Contains(err.Error(), wrong) {
		t.Errorf("err = %q shows the password", err)
	}
	if !strings.Contains(err.Error(), user+":xxxxx@") {
		t.Errorf("err = %q, want the redacted URL naming the user", err)
	}

	// The right password from password_file works.
	pwFile := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pwFile, []byte(password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	u.User = url.User(user)
	q := u.Query()
	q.Set("password_file", pwFile)
	u.RawQuery = q.Encode()
	st := openStore(t, u.String())
	if _, err := st.Acquire(testCtx(t), "job", "node-a", time.Minute, ""); err != nil {
		t.Fatalf("Acquire with the password from password_file: %v", err)
	}
}

func TestUnreachable(t *testing.T) {
	port := freeport.ForTest(t) // closed: nothing listens there
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := lhredis.Open(ctx, fmt.Sprintf("redis://u:pw-unreachable@127.0.0.1:%d/0?dial_timeout=2s", port))
	if err == nil {
		t.Fatal("Open of a closed port succeeded")
	}
	if errors.Is(err, store.ErrInvalid) || ctx.Err() != nil {
		t.Errorf("err = %v (ctx %v), want a connection error before the deadline", err, ctx.Err())
	}
	if !strings.Contains(err.Error(), "connection refused") || strings.Contains(err.Error(), "pw-unreachable") {
		t.Errorf("err = %q, want connection refused, without the password", err)
	}
}

// TestLockKeyIsPlainHolder: the lock key holds exactly the holder string,
// with a PX expiry, in the {name} hash slot with the counter.
func TestLockKeyIsPlainHolder(t *testing.T) {
	addr := redisAddr(t)
	prefix := freshPrefix(t, addr)
	st := openStore(t, storeURL(addr, prefix))
	ctx := testCtx(t)
	rec, err := st.Acquire(ctx, "job", "node-a.x1", 30*time.Second, "meta")
	if err != nil {
		t.Fatal(err)
	}
	c := admin(t, addr)
	key := prefix + "{job}"
	if st.LockKey("job") != key {
		t.Errorf("LockKey = %q, want %q", st.LockKey("job"), key)
	}
	if v, err := c.Get(ctx, key).Result(); err != nil || v != "node-a.x1" {
		t.Errorf("GET %s = %q, %v; want the plain holder string", key, v, err)
	}
	if ttl, err := c.PTTL(ctx, key).Result(); err != nil || ttl <= 0 || ttl > 30*time.Second {
		t.Errorf("PTTL %s = %v, %v; want a PX expiry of at most 30s", key, ttl, err)
	}
	if n, err := c.Get(ctx, key+":token").Int64(); err != nil || n != rec.Token {
		t.Errorf("counter = %d, %v; want %d", n, err, rec.Token)
	}
	if ttl, err := c.PTTL(ctx, key+":token").Result(); err != nil || ttl != -1 {
		t.Errorf("counter PTTL = %v, %v; want no expiry (-1)", ttl, err)
	}
	// The term's record expires with the lock: the same PX, set in one script.
	if v, err := c.Get(ctx, key+":term").Result(); err != nil || v != fmt.Sprintf("%d:30000:meta", rec.Token) {
		t.Errorf("GET %s:term = %q, %v; want \"token:ttl:metadata\"", key, v, err)
	}
	// Compared as absolute expiry times (PEXPIRETIME), which do not move
	// between the two reads as PTTLs do. Redis 7.2 and later freeze the
	// clock for a script, so the two are equal; 7.0 counts each PX from
	// its own command, so the term's, set after the lock's, may be a few
	// milliseconds later. It must never be earlier: a held lock always has
	// its term record.
	lockAt, err1 := c.PExpireTime(ctx, key).Result()
	termAt, err2 := c.PExpireTime(ctx, key+":term").Result()
	if err1 != nil || err2 != nil || termAt < lockAt || termAt > lockAt+time.Second {
		t.Errorf("PEXPIRETIME of the term record %d ms (%v), of the lock %d ms (%v); want the term's at or just after the lock's", termAt.Milliseconds(), err2, lockAt.Milliseconds(), err1)
	}
	// Redis Cluster hashes only the part inside the first {...} of a key.
	for _, k := range []string{key, key + ":token", key + ":term", key + ":events"} {
		if tag := hashTag(k); tag != "job" {
			t.Errorf("key %q hashes on %q, want the lease name %q: the lease's keys must share a slot", k, tag, "job")
		}
	}
}

// hashTag is the part of k that Redis Cluster hashes (the cluster spec's rule).
func hashTag(k string) string {
	if i := strings.IndexByte(k, '{'); i >= 0 {
		if j := strings.IndexByte(k[i+1:], '}'); j > 0 {
			return k[i+1 : i+1+j]
		}
	}
	return k
}

// TestForeignHolder: a lock key set by another library (SET NX PX with its
// own value) is a live term to leasehold, with token 0, and excludes it.
func TestForeignHolder(t *testing.T) {
	addr := redisAddr(t)
	prefix := freshPrefix(t, addr)
	st := openStore(t, storeURL(addr, prefix))
	ctx := testCtx(t)
	c := admin(t, addr)
	if err := c.SetNX(ctx, st.LockKey("job"), "foreign-value", 30*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	rec, err := st.Acquire(ctx, "job", "node-a", time.Minute, "")
	if !errors.Is(err, store.ErrHeld) || rec.Holder != "foreign-value" || rec.Token != 0 || !rec.Live() {
		t.Fatalf("Acquire over a foreign lock = %+v, %v; want ErrHeld with the foreign holder, token 0, live", rec, err)
	}
	g, err := st.Get(ctx, "job")
	if err != nil || g.Holder != "foreign-value" || !g.Live() {
		t.Fatalf("Get of a foreign lock = %+v, %v", g, err)
	}
	// A foreign key without expiry is held for good.
	if err := c.Set(ctx, st.LockKey("forever"), "foreign-value", 0).Err(); err != nil {
		t.Fatal(err)
	}
	rec, err = st.Acquire(ctx, "forever", "node-a", time.Minute, "")
	if !errors.Is(err, store.ErrHeld) || !rec.Live() {
		t.Fatalf("Acquire over a foreign lock without expiry = %+v, %v; want ErrHeld, live", rec, err)
	}
	// An operator can end it.
	fr, err := st.ForceRelease(ctx, "forever")
	if err != nil || fr.Holder != "foreign-value" {
		t.Fatalf("ForceRelease of the foreign lock = %+v, %v", fr, err)
	}
	if _, err := st.Acquire(ctx, "forever", "node-a", time.Minute, ""); err != nil {
		t.Fatalf("Acquire after ForceRelease: %v", err)
	}
}

func TestListAndForceRelease(t *testing.T) {
	addr := redisAddr(t)
	prefix := freshPrefix(t, addr)
	st := openStore(t, storeURL(addr, prefix))
	other := openStore(t, storeURL(addr, freshPrefix(t, addr)))
	ctx := testCtx(t)
	if _, err := other.Acquire(ctx, "elsewhere", "node-z", time.Minute, ""); err != nil {
		t.Fatal(err)
	}
	if recs, err := st.List(ctx); err != nil || len(recs) != 0 {
		t.Fatalf("List of an empty prefix = %+v, %v; want nothing (another prefix's lease is not listed)", recs, err)
	}
	a, err := st.Acquire(ctx, "shard/2", "node-a", time.Minute, "m2")
	if err != nil {
		t.Fatal(err)
	}
	b, err := st.Acquire(ctx, "shard/1", "node-b", time.Minute, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Release(ctx, b.Term); err != nil {
		t.Fatal(err)
	}
	recs, err := st.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || recs[0].Name != "shard/1" || recs[1].Name != "shard/2" {
		t.Fatalf("List = %+v, want shard/1 then shard/2", recs)
	}
	if recs[0].Live() || recs[0].Token != b.Token || recs[1].Term != a.Term || recs[1].Metadata != "m2" || !recs[1].Live() {
		t.Fatalf("List = %+v, want shard/1 free with token %d and shard/2 held by %v", recs, b.Token, a.Term)
	}

	fr, err := st.ForceRelease(ctx, "shard/2")
	if err != nil || fr.Term != a.Term {
		t.Fatalf("ForceRelease = %+v, %v; want the live term %v", fr, err, a.Term)
	}
	if _, err := st.Renew(ctx, a.Term, time.Minute); !errors.Is(err, store.ErrNotHeld) {
		t.Fatalf("the evicted holder's Renew: err = %v, want ErrNotHeld", err)
	}
	if _, err := st.ForceRelease(ctx, "shard/2"); !errors.Is(err, store.ErrNotHeld) {
		t.Fatalf("ForceRelease of a free lease: err = %v, want ErrNotHeld", err)
	}
	if _, err := st.ForceRelease(ctx, "never"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("ForceRelease of a lease never granted: err = %v, want ErrNotFound", err)
	}
	next, err := st.Acquire(ctx, "shard/2", "node-c", time.Minute, "")
	if err != nil || next.Token <= a.Token {
		t.Fatalf("Acquire after ForceRelease = %+v, %v; want a token above %d", next, err, a.Token)
	}
}

// TestTokenRegressDetected simulates Redis losing the counter (as a restart
// without fsync does) by deleting it, and checks that a handle that saw a
// token refuses to grant a smaller one, raises the counter, and says so.
func TestTokenRegressDetected(t *testing.T) {
	addr := redisAddr(t)
	prefix := freshPrefix(t, addr)
	u := storeURL(addr, prefix) + "&tokens=counter" // the regress a handle sees, without the clock's help
	st := openStore(t, u)
	ctx := testCtx(t)
	var last store.Record
	for i := 0; i < 3; i++ {
		rec, err := st.Acquire(ctx, "job", "node-a", time.Minute, "")
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Release(ctx, rec.Term); err != nil {
			t.Fatal(err)
		}
		last = rec
	}
	c := admin(t, addr)
	counterKey := st.LockKey("job") + ":token"
	if err := c.Del(ctx, counterKey).Err(); err != nil {
		t.Fatal(err)
	}

	var re *lhredis.TokenRegressError
	if _, err := st.Get(ctx, "job"); !errors.As(err, &re) || re.Seen != last.Token || re.Found != 0 {
		t.Fatalf("Get after the counter was lost: err = %v, want a TokenRegressError (seen %d, found 0)", err, last.Token)
	}

	// A handle that knows nothing (a process started after the loss) cannot
	// tell: it is granted token 1. This is the documented limit.
	fresh := openStore(t, u)
	low, err := fresh.Acquire(ctx, "job", "node-fresh", time.Minute, "")
	if err != nil || low.Token != 1 {
		t.Fatalf("fresh handle's Acquire = %+v, %v; want token 1 (it has nothing to compare with)", low, err)
	}
	// The handle that saw token 3 finds a live term with a lower token: it
	// is held (ErrHeld), and the regress is reported with it.
	_, err = st.Acquire(ctx, "job", "node-b", time.Minute, "")
	if !errors.Is(err, store.ErrHeld) || !errors.As(err, &re) || re.Seen != last.Token || re.Found != 1 {
		t.Fatalf("Acquire over the low term: err = %v, want ErrHeld and a TokenRegressError (seen %d, found 1)", err, last.Token)
	}
	if n, err := c.Get(ctx, counterKey).Int64(); err != nil || n != last.Token {
		t.Fatalf("counter after detection = %d, %v; want raised to %d", n, err, last.Token)
	}
	if err := fresh.Release(ctx, low.Term); err != nil {
		t.Fatal(err)
	}

	// Lose it again while free: the handle refuses to grant, and raises.
	if err := c.Del(ctx, counterKey).Err(); err != nil {
		t.Fatal(err)
	}
	_, err = st.Acquire(ctx, "job", "node-b", time.Minute, "")
	if !errors.Is(err, lhredis.ErrTokenRegress) || !errors.As(err, &re) || !re.Granted || errors.Is(err, store.ErrHeld) {
		t.Fatalf("Acquire after the counter was lost: err = %v, want a TokenRegressError and no grant", err)
	}
	if exists, err := c.Exists(ctx, st.LockKey("job")).Result(); err != nil || exists != 0 {
		t.Fatalf("lock key after a refused Acquire: exists = %d, %v; want nothing granted", exists, err)
	}
	next, err := st.Acquire(ctx, "job", "node-b", time.Minute, "")
	if err != nil || next.Token != last.Token+1 {
		t.Fatalf("Acquire after the regress was reported = %+v, %v; want token %d", next, err, last.Token+1)
	}
}

// TestFloor: Options.Floor lets a process that starts after a loss detect it
// (here the floor plays the fenced resource's highest accepted token).
func TestFloor(t *testing.T) {
	addr := redisAddr(t)
	prefix := freshPrefix(t, addr)
	ctx := testCtx(t)
	c := goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	floorErr := errors.New("resource unreachable")
	var fail bool
	st, err := lhredis.New(c, lhredis.Options{Prefix: prefix, CloseClient: true, Tokens: lhredis.TokensCounter, Floor: func(ctx context.Context, name string) (int64, error) {
		if fail {
			return 0, floorErr
		}
		return 10, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	fail = true
	if _, err := st.Acquire(ctx, "job", "node-a", time.Minute, ""); !errors.Is(err, floorErr) {
		t.Fatalf("Acquire with a failing Floor: err = %v, want it wrapped", err)
	}
	if _, err := st.Get(ctx, "job"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("after a failed Floor, Get: err = %v, want ErrNotFound (nothing written)", err)
	}
	fail = false
	var re *lhredis.TokenRegressError
	if _, err := st.Acquire(ctx, "job", "node-a", time.Minute, ""); !errors.As(err, &re) || re.Seen != 10 || re.Found != 0 {
		t.Fatalf("first Acquire with Floor 10 on an empty counter: err = %v, want TokenRegressError (seen 10, found 0)", err)
	}
	rec, err := st.Acquire(ctx, "job", "node-a", time.Minute, "")
	if err != nil || rec.Token != 11 {
		t.Fatalf("second Acquire = %+v, %v; want token 11", rec, err)
	}
}

// TestWatchWakesLockOnRelease: a waiter in Lock.Acquire whose retry period
// is far longer than the test's deadline acquires soon after the holder
// releases: only the pub/sub wake can explain it.
func TestWatchWakesLockOnRelease(t *testing.T) {
	addr := redisAddr(t)
	prefix := freshPrefix(t, addr)
	a := openStore(t, storeURL(addr, prefix))
	b := openStore(t, storeURL(addr, prefix))
	timings := leasehold.Timings{LeaseDuration: 10 * time.Minute, RetryPeriod: 2 * time.Minute}
	lkA, err := leasehold.NewLock(a, "job", leasehold.Config{Identity: "a", Timings: timings})
	if err != nil {
		t.Fatal(err)
	}
	waiting := make(chan struct{}, 1)
	lkB, err := leasehold.NewLock(b, "job", leasehold.Config{Identity: "b", Timings: timings, OnEvent: func(e leasehold.Event) {
		if e.Kind == leasehold.EventAcquireAttempt && errors.Is(e.Err, store.ErrHeld) {
			select {
			case waiting <- struct{}{}:
			default:
			}
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	held, err := lkA.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *leasehold.Lease, 1)
	errc := make(chan error, 1)
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	go func() {
		h, err := lkB.Acquire(wctx)
		if err != nil {
			errc <- err
			return
		}
		got <- h
	}()
	<-waiting // B tried once, was refused, and now waits (watching)
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case h := <-got:
		if h.Token() <= held.Token() {
			t.Errorf("B's token %d, want above A's %d", h.Token(), held.Token())
		}
		h.Release(ctx)
	case err := <-errc:
		t.Fatalf("waiter not woken by the release (retry period 2m): %v", err)
	}
}

// TestWaiterWakesAtExpiry: a holder that vanishes without releasing (a
// crash) is replaced as soon as its key's PTTL runs out, not a retry period
// later: the waiter sleeps exactly Record.Remaining.
func TestWaiterWakesAtExpiry(t *testing.T) {
	addr := redisAddr(t)
	prefix := freshPrefix(t, addr)
	a := openStore(t, storeURL(addr, prefix))
	b := openStore(t, storeURL(addr, prefix))
	ctx := testCtx(t)
	crashed, err := a.Acquire(ctx, "job", "crashed-node", 300*time.Millisecond, "")
	if err != nil {
		t.Fatal(err)
	}
	lk, err := leasehold.NewLock(b, "job", leasehold.Config{Identity: "b",
		Timings: leasehold.Timings{LeaseDuration: 10 * time.Minute, RetryPeriod: 2 * time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	h, err := lk.Acquire(wctx)
	if err != nil {
		t.Fatalf("waiter did not take over the expired lease (retry period 2m): %v", err)
	}
	defer h.Release(ctx)
	if h.Token() <= crashed.Token {
		t.Errorf("takeover token %d, want above %d", h.Token(), crashed.Token)
	}
}

// TestTLS runs a lease over rediss:// against a redis-server with TLS, whose
// certificate is signed by a CA made for the test and trusted via ca_file.
func TestTLS(t *testing.T) {
	dir := t.TempDir()
	caFile, certFile, keyFile := writeTestPKI(t, dir)
	port := freeport.ForTest(t)
	srv := newRedisServer(t, "--tls-port", strconv.Itoa(port), "--tls-cert-file", certFile, "--tls-key-file", keyFile,
		"--tls-ca-cert-file", caFile, "--tls-auth-clients", "no")
	tlsAddr := fmt.Sprintf("127.0.0.1:%d", port)
	ctx := testCtx(t)

	st := openStore(t, "rediss://"+tlsAddr+"/0?prefix=lhtest:tls:&ca_file="+url.QueryEscape(caFile))
	rec, err := st.Acquire(ctx, "job", "node-a", time.Minute, "")
	if err != nil {
		t.Fatalf("Acquire over TLS: %v", err)
	}
	if err := st.Release(ctx, rec.Term); err != nil {
		t.Fatalf("Release over TLS: %v", err)
	}
	if _, err := st.Watch(ctx, "job"); err != nil {
		t.Fatalf("Watch over TLS: %v", err)
	}

	// cacert, etcd's spelling of ca_file, is the same parameter.
	alias := openStore(t, "rediss://"+tlsAddr+"/0?prefix=lhtest:tls:&cacert="+url.QueryEscape(caFile))
	if _, err := alias.Get(ctx, "job"); err != nil {
		t.Errorf("Get over TLS with cacert=: %v", err)
	}
	// server_name is applied: a name the certificate does not hold fails.
	if _, err := lhredis.Open(ctx, "rediss://"+tlsAddr+"/0?ca_file="+url.QueryEscape(caFile)+"&server_name=other.example"); err == nil || !strings.Contains(err.Error(), "other.example") {
		t.Errorf("rediss:// with server_name=other.example: err = %v, want a certificate error naming it", err)
	}
	// Without the CA the server's certificate is not trusted.
	if _, err := lhredis.Open(ctx, "rediss://"+tlsAddr+"/0"); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("rediss:// without the test CA: err = %v, want a certificate error", err)
	}
	// Plain redis:// to the TLS port fails rather than talking in clear.
	if _, err := lhredis.Open(ctx, "redis://"+tlsAddr+"/0?dial_timeout=2s&read_timeout=2s"); err == nil {
		t.Errorf("redis:// to the TLS port succeeded")
	}
	_ = srv
}

// TestTLSClientCertificate connects to a server that requires a client
// certificate (tls-auth-clients yes) with cert_file and key_file, the TLS
// parameters every store spells the same way.
func TestTLSClientCertificate(t *testing.T) {
	dir := t.TempDir()
	caFile, certFile, keyFile := writeTestPKI(t, dir)
	port := freeport.ForTest(t)
	newRedisServer(t, "--tls-port", strconv.Itoa(port), "--tls-cert-file", certFile, "--tls-key-file", keyFile,
		"--tls-ca-cert-file", caFile, "--tls-auth-clients", "yes")
	base := fmt.Sprintf("rediss://127.0.0.1:%d/0?prefix=lhtest:mtls:&ca_file=%s", port, url.QueryEscape(caFile))
	ctx := testCtx(t)

	st := openStore(t, base+"&cert_file="+url.QueryEscape(certFile)+"&key_file="+url.QueryEscape(keyFile))
	if _, err := st.Acquire(ctx, "job", "node-a", time.Minute, ""); err != nil {
		t.Fatalf("Acquire with a client certificate: %v", err)
	}
	// Negative control: the server refuses a client without one.
	if st, err := lhredis.Open(ctx, base+"&dial_timeout=2s&read_timeout=2s"); err == nil {
		st.Close()
		t.Fatal("a client without a certificate was let in: the test proves nothing")
	}
	// A certificate without its key is bad input.
	u, _ := url.Parse(base + "&cert_file=" + url.QueryEscape(certFile))
	if _, err := lhredis.OpenURL(ctx, u); !errors.Is(err, store.ErrInvalid) || !strings.Contains(err.Error(), "key_file") {
		t.Errorf("cert_file without key_file: err = %v, want ErrInvalid naming key_file", err)
	}
	// TLS parameters need the rediss scheme.
	u, _ = url.Parse(fmt.Sprintf("redis://127.0.0.1:%d/0?cert_file=%s&key_file=%s", port, url.QueryEscape(certFile), url.QueryEscape(keyFile)))
	if _, err := lhredis.OpenURL(ctx, u); !errors.Is(err, store.ErrInvalid) || !strings.Contains(err.Error(), "cert_file, key_file need the rediss scheme") {
		t.Errorf("cert_file on redis://: err = %v, want ErrInvalid saying it needs rediss", err)
	}
}
