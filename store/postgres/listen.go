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
// When the connection drops, open watches stay open: the listener reconnects
// with backoff, LISTENs again, and then wakes every watch once, since a
// change may have happened while it was not listening. In between, waiters
// are woken by their own poll timer, as they always are.
type listener struct {
	s      *Store
	cancel context.CancelFunc
	done   chan struct{}
	ready  chan struct{} // closed when the first session is up or has failed

	mu       sync.Mutex
	up       bool
	err      error // why the last session ended or failed
	pid      uint32
	sessions int // how many times LISTEN was established
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
		s.lis = &listener{s: s, cancel: cancel, done: make(chan struct{}), ready: make(chan struct{})}
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
	defer l.mu.Unlock()
	if !l.up && (permanent(l.err) || l.sessions == 0) {
		// Never listening yet, or cannot be: a watch now would only
		// pretend. After the first session, a drop keeps watches open
		// (see listener).
		return nil, fmt.Errorf("%w (watch %q): %w", ErrNoWatch, name, l.err)
	}
	// Subscribed under l.mu, so that a session coming up wakes this watch
	// or is already up when it starts.
	return s.hub.Watch(ctx, name)
}

func (l *listener) run(ctx context.Context) {
	defer close(l.done)
	var readyOnce sync.Once
	markReady := func() { readyOnce.Do(func() { close(l.ready) }) }
	defer markReady()
	backoff := listenBackoffMin
	for {
		wasUp := false
		err := l.session(ctx, func(pid uint32) {
			wasUp = true
			l.mu.Lock()
			l.up, l.pid, l.err = true, pid, nil
			l.sessions++
			l.s.hub.NotifyAll() // anything may have changed while not listening
			l.mu.Unlock()
			markReady()
		})
		l.mu.Lock()
		l.up, l.pid, l.err = false, 0, err
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

// session connects, checks the table and its trigger, LISTENs, and fans out
// notifications until the connection fails or ctx ends.
func (l *listener) session(ctx context.Context, onUp func(pid uint32)) error {
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
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channelFor(nsp, rel)}.Sanitize()); err != nil {
		return kit.Wrap("listen", err)
	}
	onUp(conn.PgConn().PID())
	for {
		wctx, cancel := context.WithTimeout(ctx, listenIdlePing)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		switch {
		case err == nil && n != nil:
			l.s.hub.Notify(n.Payload)
		case err == nil:
		case ctx.Err() != nil:
			return ctx.Err()
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
