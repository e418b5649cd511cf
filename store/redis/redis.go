package redis

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/store"
)

// MinTTL is the smallest TTL the store accepts. Redis keeps expiry in whole
// milliseconds; a TTL that is not a whole number of milliseconds is rounded
// up, and Record.TTL reports the rounded value.
const MinTTL = time.Millisecond

// DefaultPrefix is the key prefix when Options.Prefix is empty.
const DefaultPrefix = "leasehold:"

// maxPrefixLen bounds Options.Prefix.
const maxPrefixLen = 128

// ErrTokenRegress is matched (errors.Is) by every *TokenRegressError.
var ErrTokenRegress = errors.New("leasehold/redis: token counter regressed")

// TokenRegressError reports that a lease's token counter in Redis is below a
// token already seen for that lease: Redis lost writes (a restart without
// appendfsync always, a failover to a replica that had not received the last
// increments, a FLUSHALL, a deleted key).
//
// From Acquire it means: nothing was granted, and the counter was raised to
// Seen, so the next grant gets a token above every token this handle has
// seen. Tokens handed out between the loss and its detection may have been
// smaller than older ones: a fenced resource refuses them, which is what the
// fence is for. From Get and List it comes with the record as Redis holds it.
type TokenRegressError struct {
	Name string
	// Seen is the highest token seen for Name: by this Store handle, or given
	// by Options.Floor.
	Seen int64
	// Found is the counter that Redis held; 0 if the counter was missing.
	Found int64
	// Granted reports whether the refused operation could otherwise have
	// granted the lease (false: another holder's term was live).
	Granted bool
}

func (e *TokenRegressError) Error() string {
	found := strconv.FormatInt(e.Found, 10)
	if e.Found == 0 {
		found = "missing"
	}
	return fmt.Sprintf("leasehold/redis: token counter of lease %q regressed: Redis holds %s, but token %d was already seen (Redis lost writes: a restart without fsync or a failover); the counter is raised to %d and nothing was granted by this call",
		e.Name, found, e.Seen, e.Seen)
}

// Unwrap makes the error match ErrTokenRegress.
func (e *TokenRegressError) Unwrap() error { return ErrTokenRegress }

// Options configure a Store.
type Options struct {
	// Prefix is put before every key and channel name this store uses, so
	// that a Redis ACL user can be limited to it (~prefix* &prefix*). It may
	// hold ASCII letters, digits and ":_.-/", up to 128 bytes; it must not
	// hold braces, which would change the keys' hash slot. Empty means
	// DefaultPrefix.
	Prefix string
	// Floor, if set, is asked on every Acquire for a token below which the
	// lease's counter must not be: the highest token the protected resource
	// has accepted, for example. It lets a process that starts after Redis
	// lost data detect the regress, which the per-handle memory cannot. An
	// error from Floor fails the Acquire before anything is sent.
	Floor func(ctx context.Context, name string) (int64, error)
	// Tokens chooses how a grant's token is made: TokensServerTime (the
	// default) or TokensCounter. See Tokens.
	Tokens Tokens
	// CloseClient makes Close also close the client given to New. OpenURL
	// sets it.
	CloseClient bool
}

// Tokens is how a grant's fencing token is made.
type Tokens int

const (
	// TokensServerTime, the default: a grant's token is the lease's counter
	// plus one or the Redis server's clock (TIME) in microseconds since the
	// Unix epoch, whichever is higher, and the counter is set to it. Tokens
	// still rise by at least one per grant whatever the clock does; and
	// after Redis loses the counter (a restart without fsync, FLUSHALL, an
	// eviction, a failover to a replica that missed the last grants) the
	// next grant is still above every earlier one, as long as the server's
	// clock has not been stepped back across the loss by more than the time
	// between the last grant before it and the first after. Normal use
	// cannot push the counter above the clock: it would take more than one
	// grant of one lease per microsecond, and each grant is a whole script
	// on Redis's single thread. The restricted ACL needs +time.
	TokensServerTime Tokens = iota
	// TokensCounter: a grant's token is the counter plus one (1, 2, 3, ...),
	// as in earlier versions. After a loss the counter starts again at 1; only
	// the regress a handle can see (TokenRegressError, Options.Floor) is
	// caught.
	TokensCounter
)

// String is the name of t in a URL's tokens parameter.
func (t Tokens) String() string {
	switch t {
	case TokensServerTime:
		return "server_time"
	case TokensCounter:
		return "counter"
	}
	return "Tokens(" + strconv.Itoa(int(t)) + ")"
}

// Store is a lease store on Redis. It is safe for concurrent use. Each Store
// handle remembers the highest token it has seen for each lease name (see
// TokenRegressError).
type Store struct {
	c      goredis.UniversalClient
	prefix string
	opts   Options
	hub    *hub

	mu     sync.Mutex
	closed bool
	seen   map[string]int64 // highest token or counter seen, by lease name
}

var (
	_ store.Store         = (*Store)(nil)
	_ store.Watcher       = (*Store)(nil)
	_ store.BatchRenewer  = (*Store)(nil)
	_ store.Lister        = (*Store)(nil)
	_ store.ForceReleaser = (*Store)(nil)
)

// New returns a Store that uses client, which may be a *goredis.Client, a
// *goredis.ClusterClient or a failover client. It makes no request. Give the
// client MaxRetries: -1 and ContextTimeoutEnabled: true, as OpenURL does:
// go-redis's own retries would re-run a script whose first reply was lost,
// and leasehold's loop already retries with the outcome-unknown rule.
func New(client goredis.UniversalClient, opts Options) (*Store, error) {
	if client == nil {
		return nil, invalidf("client is nil")
	}
	if opts.Prefix == "" {
		opts.Prefix = DefaultPrefix
	}
	if err := validatePrefix(opts.Prefix); err != nil {
		return nil, err
	}
	if opts.Tokens != TokensServerTime && opts.Tokens != TokensCounter {
		return nil, invalidf("Options.Tokens is %v, want TokensServerTime or TokensCounter", opts.Tokens)
	}
	s := &Store{c: client, prefix: opts.Prefix, opts: opts, seen: map[string]int64{}}
	s.hub = newHub(client)
	return s, nil
}

func validatePrefix(p string) error {
	if len(p) > maxPrefixLen {
		return invalidf("key prefix is %d bytes, the limit is %d", len(p), maxPrefixLen)
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte(":_.-/", c) >= 0:
		default:
			return invalidf("key prefix %q has %q at byte %d; allowed are letters, digits and \":_.-/\"", p, c, i)
		}
	}
	return nil
}

// Prefix is the key prefix of this store.
func (s *Store) Prefix() string { return s.prefix }

// Client is the go-redis client this store uses.
func (s *Store) Client() goredis.UniversalClient { return s.c }

// keys are the keys of lease name: the lock, the counter and the term.
func (s *Store) keys(name string) []string {
	lock := s.prefix + "{" + name + "}"
	return []string{lock, lock + ":token", lock + ":term"}
}

// termKeys are the keys renewScript and releaseScript are sent: the lock
// and the term record.
func (s *Store) termKeys(name string) []string {
	lock := s.prefix + "{" + name + "}"
	return []string{lock, lock + ":term"}
}

// LockKey is the Redis key that holds the holder string of lease name: the
// key a redislock or redsync client must use to exclude leasehold holders.
func (s *Store) LockKey(name string) string { return s.keys(name)[0] }

// channel is the pub/sub channel of lease name. The scripts name it from
// the lock key: KEYS[1] .. ':events'.
func (s *Store) channel(name string) string { return s.prefix + "{" + name + "}:events" }

// tokenArg is how the scripts are sent a term's token: "token:", the prefix
// of its term record.
func tokenArg(tok int64) string {
	var b [24]byte
	return string(append(strconv.AppendInt(b[:0], tok, 10), ':'))
}

// termRecord is a term record as the scripts store it, "token:ttl:metadata".
type termRecord struct {
	token, ttlMs int64
	metadata     string
}

// parseTermRecord reads a term record; the empty string (no record: a lock
// key written by another library) is the zero record.
func parseTermRecord(v string) (termRecord, error) {
	if v == "" {
		return termRecord{}, nil
	}
	tok, rest, ok1 := strings.Cut(v, ":")
	ttl, md, ok2 := strings.Cut(rest, ":")
	t, err1 := strconv.ParseInt(tok, 10, 64)
	ms, err2 := strconv.ParseInt(ttl, 10, 64)
	if !ok1 || !ok2 || err1 != nil || err2 != nil {
		return termRecord{}, fmt.Errorf("malformed term record %.40q", v)
	}
	return termRecord{token: t, ttlMs: ms, metadata: md}, nil
}

// record is the Record of a term read from Redis: holder, term record and
// PTTL as the scripts return them.
func record(name, holder string, tr termRecord, pttl int64) store.Record {
	return store.Record{
		Term:      store.Term{Name: name, Holder: holder, Token: tr.token},
		Remaining: remaining(pttl),
		TTL:       time.Duration(tr.ttlMs) * time.Millisecond,
		Metadata:  tr.metadata,
	}
}

func (s *Store) check(ctx context.Context) error {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return store.ErrClosed
	}
	return ctx.Err()
}

// observe raises the high-water mark of name to tok.
func (s *Store) observe(name string, tok int64) {
	s.mu.Lock()
	if tok > s.seen[name] {
		s.seen[name] = tok
	}
	s.mu.Unlock()
}

func (s *Store) seenToken(name string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen[name]
}

// floor is the highest token this handle has seen for name, or the caller's
// Floor, whichever is higher.
func (s *Store) floor(ctx context.Context, name string) (int64, error) {
	f := s.seenToken(name)
	if s.opts.Floor != nil {
		g, err := s.opts.Floor(ctx, name)
		if err != nil {
			return 0, fmt.Errorf("leasehold/redis: token floor of %q: %w", name, err)
		}
		f = max(f, g)
	}
	return f, nil
}

func millis(ttl time.Duration) int64 {
	ms := ttl / time.Millisecond
	if ttl%time.Millisecond != 0 {
		ms++
	}
	return int64(ms)
}

// remaining converts a PTTL reply: -2 (no key) and 0 are "not live", -1 (a
// key without expiry, which only a foreign writer makes) is "live forever".
func remaining(pttl int64) time.Duration {
	switch {
	case pttl == -1:
		return time.Duration(math.MaxInt64)
	case pttl < 0:
		return 0
	}
	return time.Duration(pttl) * time.Millisecond
}

// wrap gives a Redis error the store's prefix; store errors pass through.
func (s *Store) wrap(op string, err error) error {
	if errors.Is(err, goredis.ErrClosed) {
		s.mu.Lock()
		closed := s.closed
		s.mu.Unlock()
		if closed {
			return fmt.Errorf("leasehold/redis: %s: %w", op, store.ErrClosed)
		}
	}
	return fmt.Errorf("leasehold/redis: %s: %w", op, err)
}

// Acquire implements store.Store with SET NX PX semantics in one script: if
// the lock key is absent (or expired) or holds this same holder, the counter
// is incremented (and, with TokensServerTime, raised to the server's clock in
// microseconds if that is higher), the lock key set to holder with PX ttl, and the term's
// record (token, TTL, metadata) written with the same PX. Grants are not
// published: waiters wake on releases and at expiry. A *TokenRegressError
// reports a counter below a token already seen; nothing was granted then.
func (s *Store) Acquire(ctx context.Context, name, holder string, ttl time.Duration, metadata string) (store.Record, error) {
	if err := s.check(ctx); err != nil {
		return store.Record{}, err
	}
	if err := store.ValidateAcquire(name, holder, ttl, MinTTL, metadata); err != nil {
		return store.Record{}, err
	}
	floor, err := s.floor(ctx, name)
	if err != nil {
		return store.Record{}, err
	}
	ms := millis(ttl)
	msArg := strconv.FormatInt(ms, 10)
	clock := "1"
	if s.opts.Tokens == TokensCounter {
		clock = "0"
	}
	res, err := acquireScript.Run(ctx, s.c, s.keys(name), holder, msArg, ":"+msArg+":"+metadata, floor, clock).Result()
	if err != nil {
		return store.Record{}, s.wrap(acquireOp(name), err)
	}
	if tok, ok := res.(int64); ok {
		// Granted: the script set exactly what was asked; only the token is new.
		s.observe(name, tok)
		return store.Record{
			Term:      store.Term{Name: name, Holder: holder, Token: tok},
			Remaining: time.Duration(ms) * time.Millisecond,
			TTL:       time.Duration(ms) * time.Millisecond,
			Metadata:  metadata,
		}, nil
	}
	v, ok := res.([]any)
	if !ok {
		return store.Record{}, s.wrap(acquireOp(name), fmt.Errorf("script reply is %T, want an integer or an array", res))
	}
	r := reply{v: v}
	switch status := r.int(0); status {
	case acqRegress:
		counter := r.int(1)
		if r.err != nil {
			return store.Record{}, s.wrap(acquireOp(name), r.err)
		}
		return store.Record{}, &TokenRegressError{Name: name, Seen: floor, Found: counter, Granted: true}
	case acqHeld, acqHeldRegress:
		holder, tr, pttl, counter := r.str(1), r.term(2), r.int(3), r.int(4)
		if r.err != nil {
			return store.Record{}, s.wrap(acquireOp(name), r.err)
		}
		rec := record(name, holder, tr, pttl)
		if status == acqHeld {
			s.observe(name, max(rec.Token, counter))
			return rec, fmt.Errorf("leasehold/redis: %s: %w", acquireOp(name), store.ErrHeld)
		}
		s.observe(name, rec.Token)
		return rec, fmt.Errorf("leasehold/redis: %s: %w (%w)", acquireOp(name), store.ErrHeld,
			&TokenRegressError{Name: name, Seen: floor, Found: counter})
	default:
		if r.err != nil {
			return store.Record{}, s.wrap(acquireOp(name), r.err)
		}
		return store.Record{}, s.wrap(acquireOp(name), fmt.Errorf("unexpected script status %d", status))
	}
}

func acquireOp(name string) string { return fmt.Sprintf("acquire %q", name) }

// Renew implements store.Store: one script compares the lock value with the
// holder and the term record's token with the token, then extends both keys.
func (s *Store) Renew(ctx context.Context, t store.Term, ttl time.Duration) (store.Record, error) {
	if err := s.check(ctx); err != nil {
		return store.Record{}, err
	}
	if err := store.ValidateTerm(t); err != nil {
		return store.Record{}, err
	}
	if err := store.ValidateTTL(ttl, MinTTL); err != nil {
		return store.Record{}, err
	}
	ms := millis(ttl)
	res, err := renewScript.Run(ctx, s.c, s.termKeys(t.Name), t.Holder, tokenArg(t.Token), ms).Result()
	return s.renewed(t, ms, res, err)
}

// renewed reads renewScript's reply: the term's metadata if renewed, 0 if not.
func (s *Store) renewed(t store.Term, ms int64, res any, err error) (store.Record, error) {
	if err != nil {
		return store.Record{}, s.wrap("renew "+t.String(), err)
	}
	switch x := res.(type) {
	case string:
		s.observe(t.Name, t.Token)
		// The script set the term's PTTL to exactly ms.
		return store.Record{Term: t, Remaining: time.Duration(ms) * time.Millisecond, TTL: time.Duration(ms) * time.Millisecond, Metadata: x}, nil
	case int64:
		if x == renewNotHeld {
			return store.Record{}, fmt.Errorf("leasehold/redis: renew %s: %w", t, store.ErrNotHeld)
		}
	}
	return store.Record{}, s.wrap("renew "+t.String(), fmt.Errorf("unexpected script reply %v (%T)", res, res))
}

// RenewMany implements store.BatchRenewer: the renew scripts of all terms go
// in one pipeline of EVALSHA (one round trip per Redis node). If the server
// does not have the script cached (a restart, SCRIPT FLUSH), those commands
// ran nothing and are sent again once, with EVAL, which caches it.
func (s *Store) RenewMany(ctx context.Context, terms []store.Term, ttl time.Duration) ([]store.Record, []error, error) {
	if err := s.check(ctx); err != nil {
		return nil, nil, err
	}
	if err := store.ValidateTTL(ttl, MinTTL); err != nil {
		return nil, nil, err
	}
	ms := millis(ttl)
	recs := make([]store.Record, len(terms))
	errs := make([]error, len(terms))
	cmds := make([]*goredis.Cmd, len(terms))
	pipe := s.c.Pipeline()
	for i, t := range terms {
		if errs[i] = store.ValidateTerm(t); errs[i] == nil {
			cmds[i] = renewScript.EvalSha(ctx, pipe, s.termKeys(t.Name), t.Holder, tokenArg(t.Token), ms)
		}
	}
	if n := pipe.Len(); n > 0 {
		if _, err := pipe.Exec(ctx); err != nil {
			// Exec reports the first failed command. NOSCRIPT means that
			// command did nothing; any other error (a script error for one
			// term is not expected: the scripts are fixed) leaves the batch's
			// outcome unknown.
			again := s.c.Pipeline()
			for i, t := range terms {
				if cmds[i] == nil || cmds[i].Err() == nil {
					continue
				}
				if !goredis.HasErrorPrefix(cmds[i].Err(), "NOSCRIPT") {
					return nil, nil, s.wrap(fmt.Sprintf("renew %d terms", n), cmds[i].Err())
				}
				cmds[i] = renewScript.Eval(ctx, again, s.termKeys(t.Name), t.Holder, tokenArg(t.Token), ms)
			}
			if again.Len() == 0 {
				return nil, nil, s.wrap(fmt.Sprintf("renew %d terms", n), err)
			}
			if _, err := again.Exec(ctx); err != nil {
				return nil, nil, s.wrap(fmt.Sprintf("renew %d terms", n), err)
			}
		}
	}
	for i, t := range terms {
		if cmds[i] == nil {
			continue
		}
		res, err := cmds[i].Result()
		recs[i], errs[i] = s.renewed(t, ms, res, err)
	}
	return recs, errs, nil
}

// Release implements store.Store: one script compares the lock value and
// the term's token, deletes the lock and the term record, keeps the counter,
// and publishes on the lease's channel.
func (s *Store) Release(ctx context.Context, t store.Term) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	if err := store.ValidateTerm(t); err != nil {
		return err
	}
	n, err := releaseScript.Run(ctx, s.c, s.termKeys(t.Name), t.Holder, tokenArg(t.Token)).Int64()
	if err != nil {
		return s.wrap("release "+t.String(), err)
	}
	if n != releaseReleased {
		return fmt.Errorf("leasehold/redis: release %s: %w", t, store.ErrNotHeld)
	}
	return nil
}

// Get implements store.Store. A lock key written by another library
// (redislock, redsync) shows as a live term with token 0. If the counter is
// below a token this handle has seen, Get returns the record as Redis holds
// it together with a *TokenRegressError.
func (s *Store) Get(ctx context.Context, name string) (store.Record, error) {
	if err := s.check(ctx); err != nil {
		return store.Record{}, err
	}
	if err := store.ValidateName(name); err != nil {
		return store.Record{}, err
	}
	return s.get(ctx, name)
}

func (s *Store) get(ctx context.Context, name string) (store.Record, error) {
	op := fmt.Sprintf("get %q", name)
	v, err := getScript.Run(ctx, s.c, s.keys(name)).Slice()
	if err != nil {
		return store.Record{}, s.wrap(op, err)
	}
	r := reply{v: v}
	holder, ctrs, tr, pttl := r.str(0), r.str(1), r.term(2), r.int(3)
	if r.err != nil {
		return store.Record{}, s.wrap(op, r.err)
	}
	rec := store.Record{Term: store.Term{Name: name}}
	if holder != "" {
		rec = record(name, holder, tr, pttl)
	}
	var counter int64
	if ctrs != "" {
		if counter, err = strconv.ParseInt(ctrs, 10, 64); err != nil {
			return store.Record{}, s.wrap(op, fmt.Errorf("token counter %q: %w", ctrs, err))
		}
		if holder == "" {
			rec.Token = counter // free: the last token granted
		}
	}
	if seen := s.seenToken(name); counter < seen {
		return rec, &TokenRegressError{Name: name, Seen: seen, Found: counter}
	}
	if holder == "" && ctrs == "" {
		return store.Record{}, fmt.Errorf("leasehold/redis: %s: %w", op, store.ErrNotFound)
	}
	s.observe(name, max(counter, rec.Token))
	return rec, nil
}

// ForceRelease implements store.ForceReleaser: it deletes the lock key of
// name whoever holds it (a redislock or redsync holder too), keeps the
// counter, and publishes on the lease's channel.
func (s *Store) ForceRelease(ctx context.Context, name string) (store.Record, error) {
	if err := s.check(ctx); err != nil {
		return store.Record{}, err
	}
	if err := store.ValidateName(name); err != nil {
		return store.Record{}, err
	}
	op := fmt.Sprintf("force-release %q", name)
	v, err := forceReleaseScript.Run(ctx, s.c, s.keys(name)).Slice()
	if err != nil {
		return store.Record{}, s.wrap(op, err)
	}
	r := reply{v: v}
	switch r.int(0) {
	case -1:
		return store.Record{}, fmt.Errorf("leasehold/redis: %s: %w", op, store.ErrNotFound)
	case 0:
		rec := store.Record{Term: store.Term{Name: name, Token: r.int(1)}}
		if r.err != nil {
			return store.Record{}, s.wrap(op, r.err)
		}
		return rec, fmt.Errorf("leasehold/redis: %s: %w", op, store.ErrNotHeld)
	}
	holder, tr, pttl := r.str(1), r.term(2), r.int(3)
	if r.err != nil {
		return store.Record{}, s.wrap(op, r.err)
	}
	rec := record(name, holder, tr, pttl)
	return rec, nil
}

// List implements store.Lister: it SCANs for the token counters under the
// prefix (on every master of a cluster) and reads each lease. Leases whose
// counter is below a token this handle has seen are listed, and reported in
// a joined error of *TokenRegressError.
func (s *Store) List(ctx context.Context) ([]store.Record, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	pattern := globEscape(s.prefix) + "{*}:token"
	var mu sync.Mutex
	var names []string
	scan := func(ctx context.Context, c goredis.Cmdable) error {
		it := c.Scan(ctx, 0, pattern, 256).Iterator()
		for it.Next(ctx) {
			k := strings.TrimPrefix(it.Val(), s.prefix)
			if !strings.HasPrefix(k, "{") || !strings.HasSuffix(k, "}:token") {
				continue
			}
			name := k[1 : len(k)-len("}:token")]
			if store.ValidateName(name) != nil {
				continue
			}
			mu.Lock()
			names = append(names, name)
			mu.Unlock()
		}
		return it.Err()
	}
	var err error
	if cc, ok := s.c.(*goredis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *goredis.Client) error { return scan(ctx, c) })
	} else {
		err = scan(ctx, s.c)
	}
	if err != nil {
		return nil, s.wrap("list", err)
	}
	slices.Sort(names)
	names = slices.Compact(names)
	recs := make([]store.Record, 0, len(names))
	var regress []error
	for _, name := range names {
		rec, err := s.get(ctx, name)
		var re *TokenRegressError
		switch {
		case err == nil:
		case errors.Is(err, store.ErrNotFound):
			continue // deleted since the scan
		case errors.As(err, &re):
			regress = append(regress, err)
		default:
			return nil, err
		}
		recs = append(recs, rec)
	}
	return recs, errors.Join(regress...)
}

// globEscape escapes the characters SCAN MATCH treats as special.
func globEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if strings.IndexByte(`*?[]\`, s[i]) >= 0 {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// Close implements store.Store: it ends this handle's watches and, if the
// store owns its client (OpenURL, Options.CloseClient), closes it. It
// releases no lease.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.hub.close()
	if s.opts.CloseClient {
		if err := s.c.Close(); err != nil && !errors.Is(err, goredis.ErrClosed) {
			return fmt.Errorf("leasehold/redis: close: %w", err)
		}
	}
	return nil
}

// reply reads a script's array reply; the first malformed element sets err.
type reply struct {
	v   []any
	err error
}

func (r *reply) at(i int) any {
	if i >= len(r.v) {
		if r.err == nil {
			r.err = fmt.Errorf("script reply has %d elements, want more than %d", len(r.v), i)
		}
		return nil
	}
	return r.v[i]
}

func (r *reply) int(i int) int64 {
	switch x := r.at(i).(type) {
	case int64:
		return x
	case string:
		n, err := strconv.ParseInt(x, 10, 64)
		if err != nil && r.err == nil {
			r.err = fmt.Errorf("script reply element %d: %w", i, err)
		}
		return n
	case nil:
		return 0
	default:
		if r.err == nil {
			r.err = fmt.Errorf("script reply element %d is %T, want an integer", i, x)
		}
		return 0
	}
}

// term reads a term record (see parseTermRecord).
func (r *reply) term(i int) termRecord {
	tr, err := parseTermRecord(r.str(i))
	if err != nil && r.err == nil {
		r.err = fmt.Errorf("script reply element %d: %w", i, err)
	}
	return tr
}

func (r *reply) str(i int) string {
	switch x := r.at(i).(type) {
	case string:
		return x
	case int64:
		return strconv.FormatInt(x, 10)
	case nil:
		return ""
	default:
		if r.err == nil {
			r.err = fmt.Errorf("script reply element %d is %T, want a string", i, x)
		}
		return ""
	}
}
