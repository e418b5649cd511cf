package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/storekit"
)

var kit = storekit.Kit{Store: "zookeeper"}

// DefaultRoot is the path lease names live under when Config.Root is empty.
const DefaultRoot = "/leasehold"

// ErrUnreachable is wrapped by Open when no server answered in time.
var ErrUnreachable = errors.New("leasehold/zookeeper: no ZooKeeper server answered")

// Config says how to reach a ZooKeeper ensemble.
type Config struct {
	// Servers are the client addresses (host:port) of the ensemble's
	// members. Give all of them: the client moves to another when the one it
	// talks to stops answering, keeping its sessions.
	Servers []string
	// Root is the path under which lease name N lives, at Root/N (a name
	// with '/' nests). Empty: DefaultRoot. "/" puts names at the top. This
	// is the store's own chroot: the client library has none.
	Root string
	// Username and Password, when set, are added to every session as
	// ZooKeeper digest credentials ("digest", "user:password").
	Username, Password string
	// ACL is given to every node the store creates (the lease's path, the
	// paths above it, contender nodes). Nil: with credentials, all
	// permissions for the authenticated user only (zk.AuthACL(zk.PermAll),
	// so that every leasehold client of a lease must use the same
	// credentials); without, all permissions for anyone
	// (zk.WorldACL(zk.PermAll), ZooKeeper's OPEN_ACL_UNSAFE).
	ACL []zk.ACL
	// DialTimeout bounds Open: reaching a server, the first session, and
	// the first read (as does the deadline of Open's context, if sooner),
	// and each later session the store opens. Zero: 5 s.
	DialTimeout time.Duration
	// Logger receives go-zookeeper/zk's own messages (reconnects). Nil:
	// none.
	Logger zk.Logger
}

// Store is a lease store on a ZooKeeper ensemble. It is safe for concurrent
// use. See the package documentation for how it keeps a lease.
type Store struct {
	cfg  Config
	root string
	life storekit.Lifecycle
	hub  storekit.Hub
	wg   sync.WaitGroup

	// minSession and maxSession are the session timeouts the ensemble grants
	// at the least and the most (probed at Open).
	minSession, maxSession time.Duration

	ctl *session // reads, watches, deletes for terms of other handles

	mu      sync.Mutex
	pool    map[time.Duration]*session // term sessions by the timeout asked
	retired []*session
	entries map[string]*entry     // by node prefix
	byTerm  map[store.Term]*entry // granted terms
	held    map[string]int        // granted terms by name: how many
	watches map[string]*watchLoop
	// placeWatches are the nodes just below queue places that this handle
	// watches, by path, and the place each is below (queue.go).
	placeWatches map[string]*placeWait
	// places are the waiters' places this handle wrote (queue.go).
	places map[placeKey]*place
	// free holds the names this handle saw go free last (see markFree): the
	// next Acquire of such a name creates its node without looking first.
	free map[string]struct{}
}

var (
	_ store.Store         = (*Store)(nil)
	_ store.Watcher       = (*Store)(nil)
	_ store.Lister        = (*Store)(nil)
	_ store.ForceReleaser = (*Store)(nil)
	_ store.Limiter       = (*Store)(nil)
)

// Open connects to the ensemble: it learns the shortest and longest session
// the servers grant, opens the store's control session with the
// credentials, and reads the root path, so that unreachable servers and a
// root the credentials may not read fail here, with an error that says
// which. Terms get sessions of their own, opened as needed.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	if len(cfg.Servers) == 0 {
		return nil, kit.Invalid("open", "no servers")
	}
	for _, srv := range cfg.Servers {
		if _, _, err := net.SplitHostPort(srv); err != nil || strings.ContainsAny(srv, " \t\n,/") {
			return nil, kit.Invalid("open", "server %q is not host:port", srv)
		}
	}
	if (cfg.Username == "") != (cfg.Password == "") {
		return nil, kit.Invalid("open", "a username needs a password and a password a username")
	}
	if strings.Contains(cfg.Username, ":") {
		return nil, kit.Invalid("open", "the username holds a ':', which ZooKeeper's digest scheme uses to end it")
	}
	root := cfg.Root
	if root == "" {
		root = DefaultRoot
	}
	if err := validateRoot(root); err != nil {
		return nil, err
	}
	if root != "/" {
		root = strings.TrimSuffix(root, "/")
	}
	if cfg.ACL == nil {
		if cfg.Username != "" {
			cfg.ACL = zk.AuthACL(zk.PermAll)
		} else {
			cfg.ACL = zk.WorldACL(zk.PermAll)
		}
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 5 * time.Second
	}
	s := &Store{cfg: cfg, root: root, pool: map[time.Duration]*session{},
		entries: map[string]*entry{}, byTerm: map[store.Term]*entry{}, held: map[string]int{}, watches: map[string]*watchLoop{}, places: map[placeKey]*place{}}
	s.hub.Idle = s.watchIdle
	where := strings.Join(cfg.Servers, ",")
	octx, cancel := context.WithTimeout(ctx, cfg.DialTimeout)
	defer cancel()

	var wg sync.WaitGroup
	var minErr, maxErr error
	wg.Go(func() { s.minSession, minErr = probeTimeout(octx, cfg.Servers, time.Millisecond) })
	wg.Go(func() { s.maxSession, maxErr = probeTimeout(octx, cfg.Servers, (1<<31-1)*time.Millisecond) })
	wg.Wait()
	if err := errors.Join(minErr, maxErr); err != nil {
		if ctx.Err() != nil {
			return nil, kit.Wrap("open "+where, ctx.Err())
		}
		return nil, fmt.Errorf("%w at %s within %v: %v", ErrUnreachable, where, cfg.DialTimeout, err)
	}
	ctl, err := s.connect(octx, controlTimeout)
	if err != nil {
		return nil, kit.Wrap("open "+where, err)
	}
	s.ctl = ctl
	if _, err := call(octx, func() (bool, error) { ok, _, err := ctl.conn.Exists(s.root); return ok, err }); err != nil {
		ctl.close(false)
		return nil, kit.Errorf("open "+where, "read %s: %w", s.root, describe(err))
	}
	return s, nil
}

// controlTimeout is the session timeout the control session asks for: it
// carries no lease, only reads and watches, and a short one lets the client
// notice a dead server sooner.
const controlTimeout = 10 * time.Second

// validateRoot checks a root path by ZooKeeper's path rules.
func validateRoot(root string) error {
	if root[0] != '/' {
		return kit.Invalid("open", "root %q does not start with '/'", root)
	}
	if len(root) > 512 {
		return kit.Invalid("open", "root is %d bytes, the limit is 512", len(root))
	}
	if root == "/" {
		return nil
	}
	for _, part := range strings.Split(strings.TrimSuffix(root[1:], "/"), "/") {
		if part == "" || part == "." || part == ".." || part == "zookeeper" && root == "/zookeeper" {
			return kit.Invalid("open", "root %q has an empty, '.', '..' or reserved part", root)
		}
		for _, c := range part {
			if c < 0x20 || c == 0x7f || c > 0xfff0 {
				return kit.Invalid("open", "root %q has a character ZooKeeper refuses in a path", root)
			}
		}
	}
	return nil
}

// Root is the path lease names live under.
func (s *Store) Root() string { return s.root }

// Path is the ZooKeeper path of lease name: the path under which its
// contender nodes live, the path a zk.Lock or a Curator InterProcessMutex
// takes to contend for the same lease.
func (s *Store) Path(name string) string {
	if s.root == "/" {
		return "/" + name
	}
	return s.root + "/" + name
}

// Limits implements store.Limiter. The shortest lease is the shortest
// session the ensemble grants (minSessionTimeout: two ticks unless
// configured), since a term lives as long as its session does. The
// resolution is a tick (half the shortest session): a follower tells the
// leader which sessions it heard from once every half tick, and the store
// touches each session that carries a term every half tick, so the leader,
// which expires sessions, may date a renewal up to a tick before it
// happened. A holder's margin LeaseDuration - RenewDeadline must exceed it.
func (s *Store) Limits() store.Limits {
	return store.Limits{MinLeaseDuration: s.minSession, TimeResolution: s.tick()}
}

// tick is the ensemble's tick as far as the store can tell: half the
// shortest session it grants.
func (s *Store) tick() time.Duration { return s.minSession / 2 }

// describe turns ZooKeeper's permission error into one that says what to
// check.
func describe(err error) error {
	if errors.Is(err, zk.ErrNoAuth) {
		return fmt.Errorf("%w (ZooKeeper refused the request by the node's ACL: see the package documentation for the permissions leasehold needs)", err)
	}
	return err
}

// Close implements store.Store. It ends the handle's watches and closes its
// sessions. It does not release any lease: a session that carries a term is
// severed, not closed (closing a session deletes its ephemeral nodes at
// once), so its terms end when ZooKeeper expires the session, a session
// timeout later, as if the process had stopped.
func (s *Store) Close() error {
	return s.life.Close(func() error {
		s.hub.Close()
		s.mu.Lock()
		var sessions []*session
		var sever []bool
		for _, sess := range s.pool {
			sessions = append(sessions, sess)
			sever = append(sever, sess.carries > 0)
		}
		for _, sess := range s.retired {
			sessions = append(sessions, sess)
			sever = append(sever, sess.carries > 0)
		}
		for _, sess := range sessions {
			if sess.hbStop != nil {
				close(sess.hbStop)
				sess.hbStop = nil
			}
		}
		entries := make([]*entry, 0, len(s.entries))
		for _, e := range s.entries {
			entries = append(entries, e)
		}
		s.mu.Unlock()
		for _, e := range entries {
			e.stop()
		}
		var wg sync.WaitGroup
		for i, sess := range sessions {
			wg.Go(func() { sess.close(sever[i]) })
		}
		wg.Go(func() { s.ctl.close(false) })
		wg.Wait()
		s.wg.Wait()
		return nil
	})
}

// spawn runs f in a goroutine the store waits for on Close, unless the store
// is closed already.
func (s *Store) spawn(f func()) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.life.Closed() {
		return false
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		f()
	}()
	return true
}
