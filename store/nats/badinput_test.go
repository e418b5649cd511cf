package nats

import (
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leasehold/leasehold/store"
)

func TestConfigFromURL(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	os.WriteFile(tokenFile, []byte("s3cret-token\n"), 0o600)
	good := []struct {
		raw  string
		want func(Config) bool
	}{
		{"nats://127.0.0.1:4222/leases", func(c Config) bool {
			return c.Bucket == "leases" && c.Servers[0] == "nats://127.0.0.1:4222" && c.Replicas == 1 && !c.NoCreate && c.TLS == nil
		}},
		{"nats://a:1,b:2/leases?replicas=3&storage=memory&marker_ttl=1h&create=false", func(c Config) bool {
			return len(c.Servers) == 2 && c.Servers[1] == "nats://b:2" && c.Replicas == 3 && c.MemoryStorage && c.MarkerTTL == time.Hour && c.NoCreate
		}},
		{"nats://app:pw@h:4222/b", func(c Config) bool { return c.User == "app" && c.Password == "pw" }},
		{"nats://h/b?token_file=" + tokenFile, func(c Config) bool { return c.Token == "s3cret-token" }},
		{"nats://h/?bucket=b&tls=true", func(c Config) bool { return c.Bucket == "b" && c.TLS != nil }},
		{"nats://h/b?creds_file=/x.creds", func(c Config) bool { return c.CredsFile == "/x.creds" }},
		{"nats://h/b?nkey_file=/x.nk", func(c Config) bool { return c.NKeySeedFile == "/x.nk" }},
	}
	for _, c := range good {
		u, _ := url.Parse(c.raw)
		cfg, err := ConfigFromURL(u)
		if err != nil || !c.want(cfg) {
			t.Errorf("%s: %+v, %v", c.raw, cfg, err)
		}
	}
	bad := []struct{ raw, want string }{
		{"redis://h/b", `scheme "redis" is not nats`},
		{"nats://h", "no bucket"},
		{"nats://h/a.b", `bucket name "a.b"`},
		{"nats://h/b?replicas=2", "replicas 2"},
		{"nats://h/b?replicas=9", "replicas=9"},
		{"nats://h/b?storage=tape", "storage=tape"},
		{"nats://h/b?bogus=1", `"bogus"`},
		{"nats://h/b?marker_ttl=10ms", "marker TTL 10ms"},
		{"nats://secrettoken@h/b", "needs a user and a password"},
		{"nats://h/b?token_file=" + filepath.Join(dir, "missing"), "token_file"},
		{"nats://h/b?ca_file=" + filepath.Join(dir, "missing.pem"), "ca_file"},
		{"nats://h/a?bucket=b", "named twice"},
	}
	for _, c := range bad {
		u, _ := url.Parse(c.raw)
		_, err := ConfigFromURL(u)
		if !errors.Is(err, store.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want ErrInvalid saying %q", c.raw, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "secrettoken") {
			t.Errorf("%s: the error shows the token: %v", c.raw, err)
		}
	}
	// A password in the URL never shows in an error.
	u, _ := url.Parse("nats://app:hunter2@h/b?bogus=1")
	if _, err := ConfigFromURL(u); err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("error for a URL with a password: %v", err)
	}
	u, _ = url.Parse("nats://h/b?token=tok-value&bogus=1")
	if _, err := ConfigFromURL(u); err == nil || strings.Contains(err.Error(), "tok-value") {
		t.Errorf("error for a URL with token=: %v", err)
	}
}

func TestOpenBadInput(t *testing.T) {
	srv := shared(t)
	ctx := testCtx(t, 20*time.Second)
	cases := []struct {
		cfg  Config
		want string
	}{
		{Config{Options: Options{Bucket: "b"}}, "no servers"},
		{Config{Servers: []string{srv.url()}}, "no bucket"},
		{Config{Servers: []string{srv.url()}, Options: Options{Bucket: "a b"}}, "bucket name"},
		{Config{Servers: []string{srv.url()}, Options: Options{Bucket: "b"}, User: "u"}, "a user needs a password"},
		{Config{Servers: []string{srv.url()}, Options: Options{Bucket: "b"}, User: "u", Password: "p", Token: "t"}, "one way to authenticate"},
		{Config{Servers: []string{srv.url()}, Options: Options{Bucket: "b"}, NKeySeedFile: "/nonexistent.nk"}, "NKey seed file"},
		{Config{Servers: []string{srv.url()}, Options: Options{Bucket: "b"}, CredsFile: "/nonexistent.creds"}, "credentials file"},
	}
	for _, c := range cases {
		_, err := Open(ctx, c.cfg)
		if !errors.Is(err, store.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Open(%+v): %v, want ErrInvalid saying %q", c.cfg, err, c.want)
		}
	}
	if _, err := New(ctx, nil, Options{Bucket: "b"}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("New with a nil connection: %v", err)
	}
	// create=false on a missing bucket.
	_, err := Open(ctx, Config{Servers: []string{srv.url()}, Options: Options{Bucket: uniqueBucket("missing"), NoCreate: true}})
	if !errors.Is(err, ErrBucketConfig) || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("Open with NoCreate on a missing bucket: %v", err)
	}
}

// A bucket the store did not make is checked: one on which leases would not
// be safe is refused, naming what is wrong.
func TestOpenRefusesUnsuitableBucket(t *testing.T) {
	srv := shared(t)
	js, err := jetstream.New(connect(t, srv.url()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t, 30*time.Second)
	cases := []struct {
		cfg  jetstream.KeyValueConfig
		want string
	}{
		{jetstream.KeyValueConfig{}, "per-key TTLs are off"},
		{jetstream.KeyValueConfig{LimitMarkerTTL: time.Hour, TTL: time.Hour}, "bucket-wide TTL"},
	}
	for _, c := range cases {
		c.cfg.Bucket = uniqueBucket("unsuitable")
		if _, err := js.CreateKeyValue(ctx, c.cfg); err != nil {
			t.Fatalf("make bucket: %v", err)
		}
		_, err := Open(ctx, Config{Servers: []string{srv.url()}, Options: Options{Bucket: c.cfg.Bucket}})
		if !errors.Is(err, ErrBucketConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Open on a bucket made with %+v: %v, want ErrBucketConfig saying %q", c.cfg, err, c.want)
		}
	}
	// Negative control: the same kind of bucket with a marker TTL and no
	// bucket TTL, made by the nats tool's path, is accepted.
	b := uniqueBucket("suitable")
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: b, LimitMarkerTTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	st := openStore(t, srv.url(), b)
	if _, err := st.Acquire(ctx, "job", "a", 5*time.Second, ""); err != nil {
		t.Fatalf("Acquire on a KV bucket made by hand with a marker TTL: %v", err)
	}
}

// A value that is not a leasehold record (put by another tool) is held,
// never taken over; names with dots map to valid keys and back.
func TestForeignValueAndKeys(t *testing.T) {
	srv := shared(t)
	bucket := uniqueBucket("foreign")
	st := openStore(t, srv.url(), bucket)
	ctx := testCtx(t, 20*time.Second)
	if _, err := st.kv.Put(ctx, "job", []byte("hello")); err != nil {
		t.Fatal(err)
	}
	rec, err := st.Acquire(ctx, "job", "a", 5*time.Second, "")
	if !errors.Is(err, store.ErrHeld) || !strings.Contains(err.Error(), "not a leasehold record") || rec.Holder != foreignHolder {
		t.Fatalf("Acquire over a foreign value: %+v, %v", rec, err)
	}
	if _, err := st.Renew(ctx, store.Term{Name: "job", Holder: "a", Token: rec.Token}, 5*time.Second); !errors.Is(err, store.ErrNotHeld) {
		t.Fatalf("Renew of a foreign value: %v", err)
	}
	for _, name := range []string{"a.b", "a..b", "a.", "a...", "x/y.z", "shard-1"} {
		k := keyOf(name)
		if nameOf(k) != name || strings.HasSuffix(k, ".") || strings.Contains(k, "..") {
			t.Errorf("keyOf(%q) = %q, back %q", name, k, nameOf(k))
		}
		r, err := st.Acquire(ctx, name, "a", 5*time.Second, "")
		if err != nil {
			t.Fatalf("Acquire(%q): %v", name, err)
		}
		g, err := st.Get(ctx, name)
		if err != nil || g.Term != r.Term {
			t.Fatalf("Get(%q) = %+v, %v", name, g, err)
		}
	}
	if keyOf("app.leader") != "app.leader" {
		t.Errorf("keyOf(app.leader) = %q, want it unchanged", keyOf("app.leader"))
	}
	recs, err := st.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range recs {
		names = append(names, r.Name)
	}
	if strings.Join(names, " ") != "a. a... a..b a.b job shard-1 x/y.z" {
		t.Errorf("List names = %q", names)
	}
}

// The TTL header is whole seconds, rounded up: the server keeps whole
// seconds and would otherwise expire a 1.5s lease at 1s, before the
// holder stops trusting it.
func TestTTLHeaderRoundsUp(t *testing.T) {
	for ttl, want := range map[time.Duration]string{
		time.Second: "1s", 1500 * time.Millisecond: "2s", 2 * time.Second: "2s", time.Second + time.Nanosecond: "2s", 90 * time.Second: "90s",
	} {
		if got := ttlHeader(ttl); got != want {
			t.Errorf("ttlHeader(%v) = %s, want %s", ttl, got, want)
		}
	}
}

func TestCheckVersion(t *testing.T) {
	for v, ok := range map[string]bool{"2.11.0": true, "2.15.3": true, "3.0.0": true, "2.10.24": false, "2.9.10": false, "2.11.0-beta.1": true, "x": false, "": false} {
		err := checkVersion(v, "here")
		if (err == nil) != ok || (err != nil && !errors.Is(err, ErrServerTooOld)) {
			t.Errorf("checkVersion(%q) = %v, want ok=%v", v, err, ok)
		}
	}
}
