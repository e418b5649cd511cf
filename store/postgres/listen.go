package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leasehold/leasehold/store"
)

// Listener timings; variables so that tests can shorten them.
var (
	listenConnectTimeout = 10 * time.Second
	// listenIdlePing: after this long without a notification the listener
	// pings its connection, so that a silently dead one is found.
	listenIdlePing    = 5 * time.Second
	listenPingTimeout = 5 * time.Second
	listenBackoffMin  = 50 * time.Millisecond
	listenBackoffMax  = 5 * time.Second
)

// listener is the store's one LISTEN connection, shared by every Watch of
// the store: it wakes the store's watch hub by lease name. Its goroutine
// (run) owns the connection; stop cancels it and waits.
//
// The channel is the table's, so a LISTEN hears every grant and release of
// every lease in it. The connection LISTENs only while the store has a
// watch, and UNLISTENs when the last one ends: a process that only takes
// and releases leases is then not sent a notification for each of its own
// grants and releases, whose delivery cost each cycle about a fifth of its
// time (measured on this machine, one client: 742-837 µs a cycle without a
// listener, 946-1,012 µs with one). Watch returns once LISTEN is in effect,
// so a change after it returns is never missed; the first watch after
// none pays that round trip.
//
// When the connection drops, open watches stay open: the listener reconnects
// with backoff, LISTENs again, and then wakes every watch once, since a
// change may have happened while it was not listening. In between, waiters
// are woken by their own poll timer, as they always are.
type listener struct {
	s      *Store
	cancel context.CancelFunc
	done   chan struct{}
	ready  chan struct{} // closed when the first session is up or has failed

	mu        sync.Mutex
	up        bool
	listening bool          // LISTEN is in effect on the session's connection
	changed   chan struct{} // closed and replaced when up or listening changes
	// interrupt ends the session's wait for a notification, so that it
	// LISTENs or UNLISTENs; nil while the session is not waiting.
	interrupt func()
	err       error // why the last session ended or failed
	pid       uint32
	sessions  int // how many times a session connected
	notified  int // notifications received, for tests
}

// moved wakes whoever waits for up or listening to change; l.mu is held.
func (l *listener) moved() {
	close(l.changed)
	l.changed = make(chan struct{})
}

// listener returns the store's listener, starting it on first use.
func (s *Store) listener() (*listener, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	// Close marks the store closed before it takes s.mu to stop the
	// listener: either it sees this one, or this sees it closed.
	if s.life.Closed() {
		return nil, store.ErrClosed
	}
	if s.lis == nil {
		ctx, cancel := context.WithCancel(context.Background())
		s.lis = &listener{s: s, cancel: cancel, done: make(chan struct{}), ready: make(chan struct{}), changed: make(chan struct{})}
		go s.lis.run(ctx)
	}
	return s.lis, nil
}

func (l *listener) stop() {
	l.cancel()
	<-l.done
}

// permanent errors do not mend by reconnecting: Watch reports them.
func permanent(err error) bool {
	return errors.Is(err, ErrNotMigrated) || errors.Is(err, errNoSessionConfig)
}

// WatchesGrants implements store.GrantWatcher: the table's trigger NOTIFYs on
// every grant as on every release. With Options.NoWatch there is no watch.
func (s *Store) WatchesGrants() bool { return !s.opts.NoWatch }

// Watch implements store.Watcher over LISTEN/NOTIFY: the channel receives a
// value after every grant and release of name, by leasehold or any other
// client (the table's trigger sends the NOTIFY), and after the listener
// reconnects. Renewals do not wake it. It returns an error matching
// ErrNoWatch with Options.NoWatch or while the store's LISTEN connection has
// never been established (the error says why, such as ErrNotMigrated when
// the table has no trigger); waiters then poll, and may call Watch again.
func (s *Store) Watch(ctx context.Context, name string) (<-chan struct{}, error) {
	if err := s.life.Check(ctx); err != nil {
		return nil, err
	}
	if err := kit.CheckName("watch", name); err != nil {
		return nil, err
	}
	if s.opts.NoWatch {
		return nil, kit.Errorf(fmt.Sprintf("watch %q", name), "Options.NoWatch is set: %w", ErrNoWatch)
	}
	l, err := s.listener()
	if err != nil {
		return nil, err
	}
	select {
	case <-l.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-s.life.Done():
		return nil, store.ErrClosed
	}
	l.mu.Lock()
	if !l.up && (permanent(l.err) || l.sessions == 0) {
		// Never listening yet, or cannot be: a watch now would only
		// pretend. After the first session, a drop keeps watches open
		// (see listener).
		why := l.err
		l.mu.Unlock()
		return nil, fmt.Errorf("%w (watch %q): %w", ErrNoWatch, name, why)
	}
	// Subscribed under l.mu, where the session decides whether to LISTEN:
	// either it counts this watch, or this wakes it to decide again.
	sub, err := s.hub.Subscribe(name)
	if err == nil && l.up && !l.listening && l.interrupt != nil {
		l.interrupt()
	}
	l.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if err := l.awaitListening(ctx); err != nil {
		sub.Stop()
		return nil, err
	}
	sub.Until(ctx)
	return sub.C(), nil
}

// awaitListening waits until LISTEN is in effect, or the session is down
// (the watch then stays open, and the next session wakes it once it
// LISTENs).
func (l *listener) awaitListening(ctx context.Context) error {
	for {
		l.mu.Lock()
		ok := l.listening || !l.up
		changed := l.changed
		l.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		case <-l.s.life.Done():
			return store.ErrClosed
		}
	}
}

// watchEnded is the hub's Idle: after the last watch of a name ends, the
// session is woken to UNLISTEN if no name is watched.
func (s *Store) watchEnded(string) {
	s.mu.Lock()
	l := s.lis
	s.mu.Unlock()
	if l == nil {
		return
	}
	l.mu.Lock()
	if l.listening && l.interrupt != nil && s.hub.Watched() == 0 {
		l.interrupt()
	}
	l.mu.Unlock()
}

func (l *listener) run(ctx context.Context) {
	defer close(l.done)
	var readyOnce sync.Once
	markReady := func() { readyOnce.Do(func() { close(l.ready) }) }
	defer markReady()
	backoff := listenBackoffMin
	for {
		wasUp := false
		err := l.session(ctx, func() { wasUp = true; markReady() })
		l.mu.Lock()
		l.up, l.listening, l.interrupt, l.pid, l.err = false, false, nil, 0, err
		l.moved()
		l.mu.Unlock()
		markReady()
		if ctx.Err() != nil {
			return
		}
		if wasUp {
			backoff = listenBackoffMin
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, listenBackoffMax)
	}
}

// session connects, checks the table and its trigger, and fans out
// notifications until the connection fails or ctx ends, LISTENing while
// the store has a watch.
func (l *listener) session(ctx context.Context, onUp func()) error {
	cfg, err := l.s.sessionConfig(ctx)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, listenConnectTimeout)
	conn, err := pgx.ConnectConfig(cctx, cfg)
	cancel()
	if err != nil {
		return kit.Wrap("listen", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		conn.Close(cctx)
		cancel()
	}()
	var nsp, rel string
	var triggers int64
	err = conn.QueryRow(ctx, `SELECT n.nspname::text, c.relname::text,
	(SELECT count(*) FROM pg_trigger t WHERE t.tgrelid = c.oid AND t.tgname IN ($2, $3))
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = to_regclass($1)`,
		pgx.QueryExecModeExec, l.s.qtable, triggerInsert, triggerUpdate).Scan(&nsp, &rel, &triggers)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return kit.NoTable("listen", "", l.s.qtable, ErrNotMigrated)
	case err != nil:
		return kit.Wrap("listen", err)
	case triggers != 2:
		return kit.Errorf("listen", "table %s has no leasehold trigger to notify waiters: %w; `leasehold migrate` or (*postgres.Store).Migrate installs it", l.s.qtable, ErrNotMigrated)
	}
	channel := pgx.Identifier{channelFor(nsp, rel)}.Sanitize()
	l.mu.Lock()
	l.up, l.pid, l.err = true, conn.PgConn().PID(), nil
	l.sessions++
	// After a reconnect, the session's first LISTEN wakes every watch:
	// one kept open across the drop may have missed a change. (In the
	// first session every watch waited for LISTEN in Watch.)
	wakeAll := l.sessions > 1
	l.moved()
	l.mu.Unlock()
	onUp()
	for {
		wctx, cancel := context.WithTimeout(ctx, listenIdlePing)
		l.mu.Lock()
		watched := l.s.hub.Watched() > 0
		switch {
		case watched && !l.listening:
			l.mu.Unlock()
			cancel()
			if l.s.beforeListen != nil {
				l.s.beforeListen()
			}
			if _, err := conn.Exec(ctx, "LISTEN "+channel); err != nil {
				return kit.Wrap("listen", err)
			}
			l.mu.Lock()
			l.listening = true
			if wakeAll {
				l.s.hub.NotifyAll()
				wakeAll = false
			}
			l.moved()
			l.mu.Unlock()
			continue
		case !watched && l.listening:
			// Not listening from now: a watch that starts meanwhile waits
			// for the LISTEN that follows.
			l.listening = false
			l.moved()
			l.mu.Unlock()
			cancel()
			if _, err := conn.Exec(ctx, "UNLISTEN "+channel); err != nil {
				return kit.Wrap("listen", err)
			}
			continue
		}
		l.interrupt = cancel
		l.mu.Unlock()
		n, err := conn.WaitForNotification(wctx)
		l.mu.Lock()
		l.interrupt = nil
		if err == nil && n != nil {
			l.notified++
		}
		l.mu.Unlock()
		interrupted := errors.Is(wctx.Err(), context.Canceled)
		cancel()
		switch {
		case err == nil && n != nil:
			l.s.hub.Notify(n.Payload)
		case err == nil:
		case ctx.Err() != nil:
			return ctx.Err()
		case interrupted:
			// A watch started or the last one ended: decide again.
		case pgconn.Timeout(err):
			pctx, cancel := context.WithTimeout(ctx, listenPingTimeout)
			err := conn.Ping(pctx)
			cancel()
			if err != nil {
				return kit.Errorf("listen", "connection silent and ping failed: %w", err)
			}
		default:
			return kit.Wrap("listen", err)
		}
	}
}
