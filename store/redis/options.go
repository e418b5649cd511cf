package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/storekit"
)

// MinTTL is the smallest TTL the store accepts. Redis keeps expiry in whole
// milliseconds; a TTL that is not a whole number of milliseconds is rounded
// up, and Record.TTL reports the rounded value.
const MinTTL = time.Millisecond

var kit = storekit.Kit{Store: "redis", MinTTL: MinTTL}

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

	life storekit.Lifecycle
	mu   sync.Mutex
	seen map[string]int64 // highest token or counter seen, by lease name
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
		return nil, kit.Invalid("new", "client is nil")
	}
	if opts.Prefix == "" {
		opts.Prefix = DefaultPrefix
	}
	if err := validatePrefix(opts.Prefix); err != nil {
		return nil, kit.Invalid("new", "%v", err)
	}
	if opts.Tokens != TokensServerTime && opts.Tokens != TokensCounter {
		return nil, kit.Invalid("new", "Options.Tokens is %v, want TokensServerTime or TokensCounter", opts.Tokens)
	}
	s := &Store{c: client, prefix: opts.Prefix, opts: opts, seen: map[string]int64{}}
	s.hub = newHub(client)
	return s, nil
}

// validatePrefix checks a key prefix; its error says what is wrong, for
// the caller to report as bad input.
func validatePrefix(p string) error {
	if len(p) > maxPrefixLen {
		return fmt.Errorf("key prefix is %d bytes, the limit is %d", len(p), maxPrefixLen)
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte(":_.-/", c) >= 0:
		default:
			return fmt.Errorf("key prefix %q has %q at byte %d; allowed are letters, digits and \":_.-/\"", p, c, i)
		}
	}
	return nil
}

// Prefix is the key prefix of this store.
func (s *Store) Prefix() string { return s.prefix }

// Client is the go-redis client this store uses.
func (s *Store) Client() goredis.UniversalClient { return s.c }

// Close implements store.Store: it ends this handle's watches and, if the
// store owns its client (OpenURL, Options.CloseClient), closes it. It
// releases no lease.
func (s *Store) Close() error {
	return s.life.Close(func() error {
		s.hub.close()
		if s.opts.CloseClient {
			if err := s.c.Close(); err != nil && !errors.Is(err, goredis.ErrClosed) {
				return kit.Wrap("close", err)
			}
		}
		return nil
	})
}
