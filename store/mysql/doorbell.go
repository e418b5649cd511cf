package mysql

import (
	"context"
	"database/sql"
	"sync"
	"time"
)

// Doorbells: a waiter in another process learns of a release at once,
// instead of at its next poll. MySQL pushes nothing to a client, but a
// session blocked in GET_LOCK returns the moment the lock is let go. So the
// Store through which a lease was granted holds a second named lock, the
// lease's doorbell, on a connection of its own for as long as the term
// lasts, and lets it go right after the term's release committed; a Store
// that watches the lease for its waiters blocks in GET_LOCK on the
// doorbell, and when it returns wakes its waiters and reads the lease's
// state.
//
// A doorbell only wakes; it decides nothing. The poller keeps polling
// underneath, so a doorbell that is missing (a holder's Store at its
// limit, a pool the caller owns, an older leasehold, a lost connection, a
// server that refuses GET_LOCK) costs at most the poll's delay. A doorbell
// found open while the term it was waited on for is still live (its
// holder has not taken it yet, keeps none, or lost its connection) is
// waited on again after a wait that doubles each time, so nothing spins.

// DefaultDoorbells is how many doorbells a Store opened from a URL or a
// config keeps at most: as many held (one per lease granted through it)
// and as many waited on (one per lease its waiters watch), each on a
// connection of its own.
const DefaultDoorbells = 4

// doorStep bounds each GET_LOCK wait on a doorbell, so that a wait no
// longer wanted ends within it on the server.
const doorStep = time.Second

// doorBackoff is the first wait before a doorbell found open during a
// live term is waited on again (its holder may not have taken it yet: it
// does holdAfter into the term; or it keeps none); it doubles each time,
// up to doorBackoffMax.
const (
	doorBackoff    = holdAfter
	doorBackoffMax = 10 * time.Second
)

type doorbells struct {
	s     *Store
	db    *sql.DB // the doorbells' connections
	ownDB bool    // close db on close
	limit int

	ctx    context.Context // ended by close: every doorbell's calls
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	dbName *string                 // the connection's database, for the doorbells' names
	held   map[string]*heldDoor    // name -> the doorbell of a term granted through this Store
	waits  map[string]*doorWait    // name -> a wait on another Store's doorbell
	events func(kind, name string) // tests: "held", "waiting", "rang", "quiet", "let-go"
}

// heldDoor is a doorbell held for a term: until is when the term ends on
// this process's clock unless renewed (measured from when the grant or
// renewal was sent; the keeper reads it again when its timer fires); done
// ends it early (release, transfer, force).
type heldDoor struct {
	token int64
	until time.Time
	done  chan struct{}
	ended bool
}

// doorWait is a wait on a doorbell while the lease is held in state.
type doorWait struct {
	state leaseState
	stop  chan struct{} // closed when the lease is no longer watched
}

func (w *doorWait) stopped() bool {
	select {
	case <-w.stop:
		return true
	default:
		return false
	}
}

func newDoorbells(s *Store, db *sql.DB, ownDB bool, limit int) *doorbells {
	ctx, cancel := context.WithCancel(context.Background())
	return &doorbells{s: s, db: db, ownDB: ownDB, limit: limit, ctx: ctx, cancel: cancel,
		held: map[string]*heldDoor{}, waits: map[string]*doorWait{}}
}

func (b *doorbells) event(kind, name string) {
	if b.events != nil {
		b.events(kind, name)
	}
}

// name is the doorbell's GET_LOCK name for lease name; the database's name
// is read once.
func (b *doorbells) name(ctx context.Context, c *sql.Conn, lease string) (string, error) {
	b.mu.Lock()
	db := b.dbName
	b.mu.Unlock()
	if db == nil {
		var n sql.NullString
		if err := c.QueryRowContext(ctx, `SELECT DATABASE()`).Scan(&n); err != nil {
			return "", err
		}
		b.mu.Lock()
		b.dbName = &n.String
		db = b.dbName
		b.mu.Unlock()
	}
	return lockName("door", *db, b.s.table, lease), nil
}

// hold keeps name's doorbell for the term granted through this Store with
// token, sent at sent for ttl. A doorbell this Store holds for an earlier
// term of name is kept for the new one.
func (b *doorbells) hold(name string, token int64, sent time.Time, ttl time.Duration) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if h := b.held[name]; h != nil && !h.ended {
		h.token, h.until = token, sent.Add(ttl)
		return
	}
	if len(b.held) >= b.limit || b.closed() {
		return
	}
	h := &heldDoor{token: token, until: sent.Add(ttl), done: make(chan struct{})}
	b.held[name] = h
	b.wg.Add(1)
	go b.keep(name, h)
}

// renewed moves the end of the doorbell held for name's term token.
func (b *doorbells) renewed(name string, token int64, sent time.Time, ttl time.Duration) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if h := b.held[name]; h != nil && h.token == token && !h.ended {
		h.until = sent.Add(ttl)
	}
}

// ended lets name's doorbell go at once if it is held for the term token
// (any term when token is 0): the term's end has committed.
func (b *doorbells) ended(name string, token int64) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if h := b.held[name]; h != nil && (token == 0 || h.token == token) && !h.ended {
		h.ended = true
		close(h.done)
	}
}

// holdAfter is how long a term lasts before its Store takes the doorbell:
// a term released sooner (a lock taken for a moment) costs the server no
// doorbell. A waiter that comes sooner finds the doorbell open and waits
// on it again doorBackoff (as long) later.
const holdAfter = 5 * time.Millisecond

// keep holds name's doorbell until the term ends: released, or not renewed
// in time, or the Store closes.
func (b *doorbells) keep(name string, h *heldDoor) {
	defer b.wg.Done()
	defer func() {
		b.mu.Lock()
		if b.held[name] == h {
			delete(b.held, name)
		}
		h.ended = true
		b.mu.Unlock()
	}()
	delay := time.NewTimer(holdAfter)
	select {
	case <-h.done:
		delay.Stop()
		return
	case <-b.ctx.Done():
		delay.Stop()
		return
	case <-delay.C:
	}
	ctx := b.ctx
	c, door, ok := b.conn(name)
	if !ok {
		return
	}
	defer c.Close()
	// Waiters let the doorbell go right after it rang; a holder that
	// cannot get it within a step keeps none (waiters then poll).
	var got sql.NullInt64
	if err := c.QueryRowContext(ctx, `SELECT GET_LOCK(?, 1)`, door).Scan(&got); err != nil || got.Int64 != 1 {
		if err != nil {
			discard(c)
		}
		return
	}
	b.event("held", name)
	for b.stillHeld(h) {
	}
	rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer rcancel()
	if _, err := c.ExecContext(rctx, `DO RELEASE_LOCK(?)`, door); err != nil {
		discard(c) // the session ends, and the lock with it
	}
	b.event("let-go", name)
}

// stillHeld waits until h's term may have ended: false once it has
// (released, not renewed in time, or the Store closing), which it marks
// under the lock, so that a later grant of the name takes a doorbell of
// its own rather than this one; true when the timer fired, so the caller
// looks again at until, which renewals may have moved.
func (b *doorbells) stillHeld(h *heldDoor) bool {
	b.mu.Lock()
	left := time.Until(h.until)
	if left <= 0 || h.ended {
		h.ended = true
		b.mu.Unlock()
		return false
	}
	b.mu.Unlock()
	t := time.NewTimer(left)
	defer t.Stop()
	select {
	case <-h.done:
		return false
	case <-b.ctx.Done():
		b.mu.Lock()
		h.ended = true
		b.mu.Unlock()
		return false
	case <-t.C:
	}
	return true
}

// watch is the poller's news of name's state: while a term of another
// Store is live, wait on its doorbell.
func (b *doorbells) watch(name string, st leaseState) {
	if b == nil || !st.live {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if h := b.held[name]; h != nil && !h.ended || b.closed() {
		return // granted through this Store: its release wakes its waiters itself
	}
	if w := b.waits[name]; w != nil {
		w.state = st
		return
	}
	if len(b.waits) >= b.limit {
		return
	}
	w := &doorWait{state: st, stop: make(chan struct{})}
	b.waits[name] = w
	b.wg.Add(1)
	go b.wait(name, w)
}

// unwatch: nobody watches name through this Store any more.
func (b *doorbells) unwatch(name string) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if w := b.waits[name]; w != nil {
		delete(b.waits, name)
		close(w.stop)
	}
}

// wait blocks on name's doorbell until it rings (then wakes the waiters and
// reads the lease; if the term it waited on still lasts, it waits again),
// the lease is no longer watched, or the Store closes.
func (b *doorbells) wait(name string, w *doorWait) {
	defer b.wg.Done()
	defer func() {
		b.mu.Lock()
		if b.waits[name] == w {
			delete(b.waits, name)
		}
		b.mu.Unlock()
	}()
	ctx := b.ctx
	c, door, ok := b.conn(name)
	if !ok {
		return
	}
	defer c.Close()
	b.event("waiting", name)
	backoff := doorBackoff
	for {
		if !b.ring(ctx, c, door, w) {
			return
		}
		// Rang: wake the waiters before anything else (a holder that
		// let the doorbell go has released; a doorbell found open during
		// a live term costs each waiter one refused Acquire), let it go
		// at once (other waiters and the next holder want it), then
		// read: the state for the poller, and whether the term it was
		// waited on for still lasts.
		b.s.hub.Notify(name)
		if _, err := c.ExecContext(ctx, `DO RELEASE_LOCK(?)`, door); err != nil {
			discard(c)
			return
		}
		b.event("rang", name)
		fresh, err := b.s.readStates(ctx, []string{name})
		if err != nil {
			return
		}
		b.mu.Lock()
		same := fresh[name] == w.state
		b.mu.Unlock()
		if !same {
			b.s.poll.update(name, fresh[name])
			return
		}
		// Open while the term is live: its holder has not taken it yet,
		// or keeps none, or lost it. Wait on it again, backing off.
		b.event("quiet", name)
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-w.stop:
			t.Stop()
			return
		case <-ctx.Done():
			t.Stop()
			return
		}
		backoff = min(backoff*2, doorBackoffMax)
	}
}

// ring blocks in GET_LOCK on door until it is free (and now held by c):
// false if the wait is no longer wanted, or failed.
func (b *doorbells) ring(ctx context.Context, c *sql.Conn, door string, w *doorWait) bool {
	for {
		var got sql.NullInt64
		if err := c.QueryRowContext(ctx, `SELECT GET_LOCK(?, ?)`, door, int(doorStep/time.Second)).Scan(&got); err != nil || !got.Valid {
			if err != nil {
				discard(c)
			}
			return false
		}
		if got.Int64 == 1 {
			return true
		}
		if w.stopped() {
			return false
		}
	}
}

func (b *doorbells) closed() bool { return b.ctx.Err() != nil }

// conn takes a connection for lease name's doorbell, and the doorbell's
// GET_LOCK name; false if either failed (no doorbell then).
func (b *doorbells) conn(name string) (*sql.Conn, string, bool) {
	c, err := b.db.Conn(b.ctx)
	if err != nil {
		return nil, "", false
	}
	door, err := b.name(b.ctx, c, name)
	if err != nil {
		discard(c)
		c.Close()
		return nil, "", false
	}
	return c, door, true
}

// close ends every doorbell (held ones are let go with their connections)
// and waits for their goroutines.
func (b *doorbells) close() {
	if b == nil {
		return
	}
	b.mu.Lock()
	b.cancel()
	b.mu.Unlock()
	b.wg.Wait()
	if b.ownDB {
		b.db.Close()
	}
}
