package nats

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	natsio "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/storekit"
)

// MinServerVersion is the oldest NATS server the store runs on: per-key
// TTLs (the Nats-TTL header) and the expiry markers that announce them came
// in 2.11.0.
const MinServerVersion = "2.11.0"

// Options say which bucket the store keeps its leases in, and how to make
// it when it is missing.
type Options struct {
	// Bucket is the KV bucket's name: letters, digits, '-' and '_'.
	Bucket string
	// NoCreate: do not make the bucket if it is missing (Open fails).
	NoCreate bool
	// Replicas of a bucket the store makes: 1 (the default), 3 or 5. On a
	// cluster use 3: an R1 bucket lives on one server.
	Replicas int
	// MemoryStorage makes a missing bucket in memory instead of files. A
	// memory bucket does not survive a restart of its server, and tokens
	// start again (see the README).
	MemoryStorage bool
	// MarkerTTL is how long the server keeps the marker it writes when a
	// lease expires (the marker wakes watchers; while it lasts, Get shows
	// the lease as free rather than never granted). Default 24h.
	MarkerTTL time.Duration
}

// Config says how to reach a NATS server (or cluster) and which bucket to use.
type Config struct {
	// Servers are the servers' URLs: nats://host:4222 (or tls://host:4222).
	// Give several for a cluster; the client also learns the others.
	Servers []string
	Options
	// At most one way to authenticate: User and Password, Token, an NKey
	// seed file, or a credentials file (a user JWT and its NKey seed, as
	// nsc and `nats context` write them).
	User, Password string
	Token          string
	NKeySeedFile   string
	CredsFile      string
	// TLS, when set, is used for the connection (RootCAs for a private CA,
	// Certificates for a client certificate).
	TLS *tls.Config
	// ConnectTimeout bounds connecting (and Open's first requests, as does
	// the deadline of Open's context if sooner). Default 5s.
	ConnectTimeout time.Duration
	// Name is the connection's name, shown by the server (default "leasehold").
	Name string
}

var bucketRE = regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)

// validate checks Options and fills its defaults.
func (o *Options) validate(op string) error {
	if o.Bucket == "" {
		return kit.Invalid(op, "no bucket: name the KV bucket (nats://host:4222/BUCKET)")
	}
	if !bucketRE.MatchString(o.Bucket) {
		return kit.Invalid(op, "bucket name %q: allowed are letters, digits, '-' and '_'", o.Bucket)
	}
	switch o.Replicas {
	case 0:
		o.Replicas = 1
	case 1, 3, 5:
	default:
		return kit.Invalid(op, "replicas %d: use 1, 3 or 5", o.Replicas)
	}
	if o.MarkerTTL == 0 {
		o.MarkerTTL = 24 * time.Hour
	}
	if o.MarkerTTL < time.Second {
		return kit.Invalid(op, "marker TTL %v: at least 1s", o.MarkerTTL)
	}
	return nil
}

// Open connects to NATS and opens the store on cfg.Bucket (New). The store
// owns the connection and closes it on Close.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	const op = "open"
	if len(cfg.Servers) == 0 {
		return nil, kit.Invalid(op, "no servers")
	}
	if err := cfg.Options.validate(op); err != nil {
		return nil, err
	}
	auths := 0
	for _, set := range []bool{cfg.User != "" || cfg.Password != "", cfg.Token != "", cfg.NKeySeedFile != "", cfg.CredsFile != ""} {
		if set {
			auths++
		}
	}
	if auths > 1 {
		return nil, kit.Invalid(op, "give one way to authenticate: user and password, a token, an NKey seed file or a credentials file")
	}
	if (cfg.User == "") != (cfg.Password == "") {
		return nil, kit.Invalid(op, "a user needs a password and a password a user")
	}
	timeout := cfg.ConnectTimeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	if dl, ok := ctx.Deadline(); ok {
		left := time.Until(dl)
		if left <= 0 {
			return nil, kit.Wrap(op, context.DeadlineExceeded)
		}
		timeout = min(timeout, left)
	}
	name := cfg.Name
	if name == "" {
		name = "leasehold"
	}
	reported := &asyncErrors{}
	opts := []natsio.Option{
		natsio.Name(name),
		// The server's asynchronous errors (a permission violation, which
		// otherwise shows only as a request that times out) are kept for
		// the store's messages, not printed.
		natsio.ErrorHandler(func(_ *natsio.Conn, _ *natsio.Subscription, err error) { reported.set(err) }),
		natsio.Timeout(timeout),
		natsio.MaxReconnects(-1),
		natsio.ReconnectWait(250 * time.Millisecond),
		natsio.PingInterval(5 * time.Second),
		natsio.MaxPingsOutstanding(2),
		natsio.NoCallbacksAfterClientClose(),
	}
	switch {
	case cfg.User != "":
		opts = append(opts, natsio.UserInfo(cfg.User, cfg.Password))
	case cfg.Token != "":
		opts = append(opts, natsio.Token(cfg.Token))
	case cfg.NKeySeedFile != "":
		o, err := natsio.NkeyOptionFromSeed(cfg.NKeySeedFile)
		if err != nil {
			return nil, kit.Invalid(op, "NKey seed file %s: %v", cfg.NKeySeedFile, err)
		}
		opts = append(opts, o)
	case cfg.CredsFile != "":
		if _, err := os.Stat(cfg.CredsFile); err != nil {
			return nil, kit.Invalid(op, "credentials file: %v", err)
		}
		opts = append(opts, natsio.UserCredentials(cfg.CredsFile))
	}
	if cfg.TLS != nil {
		opts = append(opts, natsio.Secure(cfg.TLS))
	}
	where := strings.Join(cfg.Servers, ",")
	nc, err := natsio.Connect(where, opts...)
	if err != nil {
		return nil, kit.Errorf(op, "connect to %s: %w", redactServers(cfg.Servers), err)
	}
	s, err := New(ctx, nc, cfg.Options)
	if err != nil {
		nc.Close()
		return nil, reported.explain(err)
	}
	s.own = true
	s.reported = reported
	return s, nil
}

// redactServers shows server URLs without a password.
func redactServers(servers []string) string {
	out := make([]string, len(servers))
	for i, raw := range servers {
		if u, err := url.Parse(raw); err == nil {
			out[i] = store.RedactURL(u)
		} else {
			out[i] = "(a server URL that does not parse)"
		}
	}
	return strings.Join(out, ",")
}

// New opens the store on a connection the caller owns (Close leaves it
// open). It checks the server's version (MinServerVersion), makes the
// bucket if it is missing (unless o.NoCreate), and checks that the bucket
// is configured as the store needs.
func New(ctx context.Context, nc *natsio.Conn, o Options) (*Store, error) {
	const op = "open"
	if nc == nil {
		return nil, kit.Invalid(op, "nil connection")
	}
	if err := o.validate(op); err != nil {
		return nil, err
	}
	if err := checkVersion(nc.ConnectedServerVersion(), nc.ConnectedUrlRedacted()); err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, kit.Wrap(op, err)
	}
	s := &Store{nc: nc, js: js, api: jetstream.DefaultAPIPrefix}
	s.bucket, s.stream, s.pre = o.Bucket, "KV_"+o.Bucket, "$KV."+o.Bucket+"."
	ctx, cancel := withDeadline(ctx)
	defer cancel()
	si, err := s.ensure(ctx, &s.kvStream, o, "leasehold leases")
	if err != nil {
		return nil, err
	}
	// The fair queues' bucket is made like the leases' one.
	s.opts = o
	s.opts.Replicas = si.Config.Replicas
	s.opts.MemoryStorage = si.Config.Storage == jetstream.MemoryStorage
	s.opts.MarkerTTL = si.Config.SubjectDeleteMarkerTTL
	if s.kv, err = askAgain(ctx, func(ctx context.Context) (jetstream.KeyValue, error) { return js.KeyValue(ctx, o.Bucket) }); err != nil {
		return nil, kit.Errorf(op, "bucket %q: %w", o.Bucket, err)
	}
	return s, nil
}

// askAgain runs an idempotent JetStream API read while a store opens a
// bucket (the leases' at Open, the queues' at its first use), and asks
// again while attempts go unanswered, until ctx ends. A clustered
// server may leave a request unanswered, or answer that nobody listens
// (the group of a stream just made by another handle is still electing its
// leader): asked once with the whole of Open's time, one such request
// failed Open (TestClusterR3KillMembers, once in CI, after 30 s). The first
// attempt waits 1 s for its answer, each next one twice as long, at most
// 4 s; an attempt told that nobody listens is made again 100 ms later.
func askAgain[T any](ctx context.Context, read func(context.Context) (T, error)) (T, error) {
	wait := time.Second
	for {
		actx, cancel := context.WithTimeout(ctx, wait)
		v, err := read(actx)
		cancel()
		unanswered := errors.Is(err, context.DeadlineExceeded) || errors.Is(err, natsio.ErrTimeout)
		nobody := errors.Is(err, natsio.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse)
		if err == nil || ctx.Err() != nil || !unanswered && !nobody {
			return v, err
		}
		if nobody {
			t := time.NewTimer(100 * time.Millisecond)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return v, err
			}
		}
		wait = min(2*wait, 4*time.Second)
	}
}

// checkVersion refuses a server older than MinServerVersion.
func checkVersion(v, where string) error {
	got, ok := parseVersion(v)
	minV, _ := parseVersion(MinServerVersion)
	if !ok {
		return fmt.Errorf("%w: the server at %s reports version %q, which does not parse; the store needs %s or later", ErrServerTooOld, where, v, MinServerVersion)
	}
	for i := range got {
		if got[i] != minV[i] {
			if got[i] > minV[i] {
				return nil
			}
			return fmt.Errorf("%w: the server at %s is %s; the store needs %s or later, for per-key TTLs and the markers that announce expiry (an older server ignores a key's TTL: a crashed holder's lease would never expire; and before 2.9.21 compare-and-set was not safe on replicated buckets)",
				ErrServerTooOld, where, v, MinServerVersion)
		}
	}
	return nil
}

func parseVersion(v string) ([3]int, bool) {
	var out [3]int
	core, _, _ := strings.Cut(strings.TrimPrefix(v, "v"), "-")
	parts := strings.Split(core, ".")
	if len(parts) != 3 {
		return out, false
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return out, false
		}
		out[i] = n
	}
	return out, true
}

// ensure makes bucket b if it is missing and checks its configuration.
func (s *Store) ensure(ctx context.Context, b *kvStream, o Options, description string) (streamInfo, error) {
	const op = "open"
	info := func(ctx context.Context) (streamInfo, error) { return s.infoOf(ctx, b, false) }
	si, err := askAgain(ctx, info)
	if isAPIError(err, errCodeStreamNotFound) {
		if o.NoCreate {
			return si, kit.Errorf(op, "%w: bucket %q does not exist (and the store was told not to make it)", ErrBucketConfig, b.bucket)
		}
		if err := s.create(ctx, b, o, description); err != nil {
			return si, err
		}
		si, err = askAgain(ctx, info)
	}
	if err != nil {
		return si, kit.Errorf(op, "bucket %q: %w", b.bucket, err)
	}
	b.replicas = si.Config.Replicas
	return si, checkBucket(b.bucket, si.Config)
}

// create makes the bucket: a KV bucket (the stream layout nats kv add
// makes, so the nats tool sees it as one) with per-key TTLs and expiry
// markers on, whose revisions start at the clock in microseconds, and never
// below a revision this handle saw: a bucket deleted and made again by
// leasehold gives tokens above those of the one before (as Redis's tokens
// are never below the server's clock).
func (s *Store) create(ctx context.Context, b *kvStream, o Options, description string) error {
	first := uint64(time.Now().UnixMicro())
	if h := b.high.Load(); first <= h {
		first = h + 1
	}
	storage := jetstream.FileStorage
	if o.MemoryStorage {
		storage = jetstream.MemoryStorage
	}
	cfg := jetstream.StreamConfig{
		Name:                   b.stream,
		Description:            description,
		Subjects:               []string{b.pre + ">"},
		MaxMsgsPerSubject:      1,
		MaxBytes:               -1,
		MaxMsgs:                -1,
		MaxMsgSize:             -1,
		MaxConsumers:           -1,
		Storage:                storage,
		Replicas:               o.Replicas,
		AllowRollup:            true,
		DenyDelete:             true,
		AllowDirect:            true,
		Duplicates:             2 * time.Minute,
		Discard:                jetstream.DiscardNew,
		AllowMsgTTL:            true,
		SubjectDeleteMarkerTTL: o.MarkerTTL,
		FirstSeq:               first,
	}
	_, err := s.js.CreateStream(ctx, cfg)
	if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		return nil // made meanwhile by another handle: checked by the caller
	}
	if err != nil {
		return kit.Errorf("open", "make bucket %q: %w", b.bucket, err)
	}
	return nil
}

// checkBucket refuses a bucket on which leases would not be safe.
func checkBucket(bucket string, c jetstream.StreamConfig) error {
	bad := func(format string, args ...any) error {
		return kit.Errorf("open", "%w: bucket %q: %s", ErrBucketConfig, bucket, fmt.Sprintf(format, args...))
	}
	pre := "$KV." + bucket + "."
	switch {
	case c.Mirror != nil:
		return bad("it is a mirror, which cannot be written")
	case !contains(c.Subjects, pre+">"):
		return bad("its stream does not take the subjects %s> (not a KV bucket?)", pre)
	case c.Retention != jetstream.LimitsPolicy:
		return bad("its stream's retention is %v, not limits: values would be removed when read", c.Retention)
	case !c.AllowMsgTTL:
		return bad("per-key TTLs are off (allow_msg_ttl): the server would keep a crashed holder's key forever; make the bucket with a limit marker TTL (nats kv add --marker-ttl 24h), or let leasehold make it")
	case c.SubjectDeleteMarkerTTL <= 0:
		return bad("expiry markers are off (subject_delete_marker_ttl): waiters would not be woken when a lease expires; make the bucket with a limit marker TTL (nats kv add --marker-ttl 24h), or let leasehold make it")
	case c.MaxAge != 0:
		return bad("it has a bucket-wide TTL (max_age %v), which would expire a lease on its own schedule; leasehold needs per-key TTLs only", c.MaxAge)
	case c.Discard != jetstream.DiscardNew && (c.MaxMsgs > 0 || c.MaxBytes > 0):
		return bad("its stream discards old values when full (discard old with max_msgs or max_bytes), which would end live leases")
	case c.DiscardNewPerSubject:
		return bad("its stream refuses new values on a full key (discard_new_per_subject), which would refuse renewals")
	case c.Sealed:
		return bad("it is sealed")
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// Schemes are the URL schemes OpenURL accepts.
var Schemes = []string{"nats"}

// URL parameters OpenURL reads.
var urlParams = []string{"bucket", "creds_file", "nkey_file", "token", "token_file", "tls",
	storekit.ParamCAFile, storekit.ParamCertFile, storekit.ParamKeyFile, storekit.ParamServerName,
	"replicas", "storage", "marker_ttl", "create", "connect_timeout"}

// OpenURL opens a store from a URL:
//
//	nats://[user:password@]host:4222[,host:4222...]/bucket[?options]
//
// The path is the bucket. Authentication, at most one of: the user and
// password of the URL; token=T or token_file=FILE (a token alone in the
// user part is refused: it would be shown in logs, where a password is
// hidden); nkey_file=FILE (an NKey seed, "SU..."); creds_file=FILE (a user
// JWT with its seed, as nsc writes). TLS: ca_file, cert_file and key_file,
// server_name, or tls=true for the system's roots. Bucket: replicas=1|3|5,
// storage=file|memory and marker_ttl=D for a bucket the store makes;
// create=false to never make one. connect_timeout=D (default 5s).
func OpenURL(ctx context.Context, u *url.URL) (store.Store, error) {
	cfg, err := ConfigFromURL(u)
	if err != nil {
		return nil, err
	}
	return Open(ctx, cfg)
}

// ConfigFromURL parses the URL form of OpenURL.
func ConfigFromURL(u *url.URL) (Config, error) {
	var cfg Config
	if u == nil {
		return cfg, kit.Invalid("URL", "the URL is nil")
	}
	p := kit.Params(u)
	if u.Scheme != "nats" {
		return cfg, p.Invalid("scheme %q is not nats", u.Scheme)
	}
	if u.Opaque != "" || u.Host == "" {
		return cfg, p.Invalid("want nats://host:4222/bucket")
	}
	for _, h := range strings.Split(u.Host, ",") {
		host, port, err := net.SplitHostPort(h)
		if err != nil {
			host, port = h, "4222"
		}
		if host == "" || port == "" {
			return cfg, p.Invalid("server %q is not host:port", h)
		}
		cfg.Servers = append(cfg.Servers, "nats://"+net.JoinHostPort(host, port))
	}
	if u.User != nil {
		pw, ok := u.User.Password()
		if !ok || u.User.Username() == "" || pw == "" {
			// The user part alone may be a token: never show it.
			c := *u
			c.User = url.User(store.Redacted)
			return cfg, kit.Invalid("URL "+store.RedactURL(&c), "the URL's user info needs a user and a password; give a token as token= or token_file=, not as a user name (it would be shown in logs)")
		}
		cfg.User, cfg.Password = u.User.Username(), pw
	}
	cfg.Bucket = strings.TrimSuffix(strings.TrimPrefix(u.Path, "/"), "/")
	if b := p.String("bucket", ""); b != "" {
		if cfg.Bucket != "" && cfg.Bucket != b {
			return cfg, p.Invalid("the bucket is named twice, %q in the path and %q as bucket=", cfg.Bucket, b)
		}
		cfg.Bucket = b
	}
	cfg.CredsFile = p.String("creds_file", "")
	cfg.NKeySeedFile = p.String("nkey_file", "")
	cfg.Token = p.String("token", "")
	if tf := p.String("token_file", ""); tf != "" {
		b, err := os.ReadFile(tf)
		if err != nil {
			return cfg, p.Invalid("token_file: %v", err)
		}
		if cfg.Token != "" {
			return cfg, p.Invalid("token and token_file both given")
		}
		cfg.Token = strings.TrimSpace(string(b))
		if cfg.Token == "" {
			return cfg, p.Invalid("token_file %s is empty", tf)
		}
	}
	useTLS := p.Bool("tls", false)
	files := p.TLSFiles()
	if useTLS || files.Given() {
		tc := &tls.Config{MinVersion: tls.VersionTLS12}
		p.ApplyTLS(files, tc)
		cfg.TLS = tc
	}
	cfg.Replicas = int(p.Int("replicas", 1, 1, 5))
	cfg.MemoryStorage = p.OneOf("storage", "file", "file", "memory") == "memory"
	cfg.MarkerTTL = p.Duration("marker_ttl", 24*time.Hour)
	cfg.NoCreate = !p.Bool("create", true)
	cfg.ConnectTimeout = p.Duration("connect_timeout", 5*time.Second)
	if err := p.Done(); err != nil {
		return cfg, err
	}
	if err := cfg.Options.validate("URL " + store.RedactURL(u)); err != nil {
		return cfg, err
	}
	return cfg, nil
}
