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
// the store and fanned out by lease name. Its goroutine (run) owns the
// connection; stop cancels it and waits.
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
	subs     map[string]map[*watchSub]struct{}
}

type watchSub struct{ wake chan struct{} }

// listener returns the store's listener, starting it on first use.
func (s *Store) listener() (*listener, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, store.ErrClosed
	}
	if s.lis == nil {
		ctx, cancel := context.WithCancel(context.Background())
		s.lis = &listener{s: s, cancel: cancel, done: make(chan struct{}), ready: make(chan struct{}), subs: map[string]map[*watchSub]struct{}{}}
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

// Watch implements store.Watcher over LISTEN/NOTIFY: the channel receives a
// value after every grant and release of name, by leasehold or any other
// client (the table's trigger sends the NOTIFY), and after the listener
// reconnects. Renewals do not wake it. It returns an error matching
// ErrNoWatch with Options.NoWatch or while the store's LISTEN connection has
// never been established (the error says why, such as ErrNotMigrated when
// the table has no trigger); waiters then poll, and may call Watch again.
func (s *Store) Watch(ctx context.Context, name string) (<-chan struct{}, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	if err := store.ValidateName(name); err != nil {
		return nil, err
	}
	if s.opts.NoWatch {
		return nil, fmt.Errorf("leasehold/postgres: watch %q: Options.NoWatch is set: %w", name, ErrNoWatch)
	}
	l, err := s.listener()
	if err != nil {
		return nil, err
	}
	select {
	case <-l.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-s.closing:
		return nil, store.ErrClosed
	}
	sub := &watchSub{wake: make(chan struct{}, 1)}
	l.mu.Lock()
	if !l.up && (permanent(l.err) || l.sessions == 0) {
		// Never listening yet, or cannot be: a watch now would only
		// pretend. After the first session, a drop keeps watches open
		// (see listener).
		err := l.err
		l.mu.Unlock()
		return nil, fmt.Errorf("%w (watch %q): %w", ErrNoWatch, name, err)
	}
	if l.subs[name] == nil {
		l.subs[name] = map[*watchSub]struct{}{}
	}
	l.subs[name][sub] = struct{}{}
	l.mu.Unlock()

	out := make(chan struct{}, 1)
	go func() {
		defer close(out)
		defer func() {
			l.mu.Lock()
			delete(l.subs[name], sub)
			if len(l.subs[name]) == 0 {
				delete(l.subs, name)
			}
			l.mu.Unlock()
		}()
		for {
			select {
			case <-ctx.Done():
				return
			case <-s.closing:
				return
			case <-sub.wake:
				select {
				case out <- struct{}{}:
				default:
				}
			}
		}
	}()
	return out, nil
}

// wake sends a coalesced wake-up to the watches of name, or of every name
// if all is set. Called with l.mu held.
func (l *listener) wake(name string, all bool) {
	send := func(m map[*watchSub]struct{}) {
		for sub := range m {
			select {
			case sub.wake <- struct{}{}:
			default:
			}
		}
	}
	if all {
		for _, m := range l.subs {
			send(m)
		}
		return
	}
	send(l.subs[name])
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
			l.wake("", true) // anything may have changed while not listening
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
		return fmt.Errorf("leasehold/postgres: listen: %w", err)
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
		return fmt.Errorf("leasehold/postgres: listen: table %s does not exist: %w; create it with `leasehold migrate` or (*postgres.Store).Migrate", l.s.qtable, ErrNotMigrated)
	case err != nil:
		return fmt.Errorf("leasehold/postgres: listen: %w", err)
	case triggers != 2:
		return fmt.Errorf("leasehold/postgres: listen: table %s has no leasehold trigger to notify waiters: %w; `leasehold migrate` or (*postgres.Store).Migrate installs it", l.s.qtable, ErrNotMigrated)
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channelFor(nsp, rel)}.Sanitize()); err != nil {
		return fmt.Errorf("leasehold/postgres: listen: %w", err)
	}
	onUp(conn.PgConn().PID())
	for {
		wctx, cancel := context.WithTimeout(ctx, listenIdlePing)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		switch {
		case err == nil && n != nil:
			l.mu.Lock()
			l.wake(n.Payload, false)
			l.mu.Unlock()
		case err == nil:
		case ctx.Err() != nil:
			return ctx.Err()
		case pgconn.Timeout(err):
			pctx, cancel := context.WithTimeout(ctx, listenPingTimeout)
			err := conn.Ping(pctx)
			cancel()
			if err != nil {
				return fmt.Errorf("leasehold/postgres: listen: connection silent and ping failed: %w", err)
			}
		default:
			return fmt.Errorf("leasehold/postgres: listen: %w", err)
		}
	}
}
