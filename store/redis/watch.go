package redis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/store/storekit"
)

// Watch implements store.Watcher. Release and ForceRelease publish on the lease's
// channel inside their scripts; Watch subscribes to it on the store's one
// pub/sub connection, and returns once Redis has confirmed the subscription,
// so no publish after Watch returns is missed while the channel is open.
//
// Expiry is not pushed (keyspace notifications are off by default on Redis
// and unreliable across failover): leasehold wakes waiters for it from
// Record.Remaining, which is the lock key's PTTL.
//
// If the pub/sub connection breaks, every watch channel of this store is
// closed (messages may have been lost); callers poll and call Watch again,
// which opens a new connection.
func (s *Store) Watch(ctx context.Context, name string) (<-chan struct{}, error) {
	if err := s.life.Check(ctx); err != nil {
		return nil, err
	}
	if err := kit.CheckName("watch", name); err != nil {
		return nil, err
	}
	ch, err := s.hub.watch(ctx, s.channel(name))
	if err != nil {
		return nil, s.wrap(fmt.Sprintf("watch %q", name), err)
	}
	return ch, nil
}

// healthInterval: a pub/sub connection silent this long is pinged; one
// silent for two intervals is broken (a server that stopped answering, a
// partition that dropped packets without a reset). A variable for tests.
var healthInterval = 15 * time.Second

// confirmTimeout bounds how long Watch waits for SUBSCRIBE's reply.
const confirmTimeout = 10 * time.Second

var errHubClosed = errors.New("store closed")

// hub keeps the watches of one Store on one pub/sub connection at a time:
// the session. It subscribes a Redis channel when its first watch starts
// and unsubscribes it when its last ends; the fan-out to the watches is the
// session's storekit.Hub.
type hub struct {
	_ [0]func() // not comparable: spares the binary an equality function

	c      goredis.UniversalClient
	health time.Duration // healthInterval when the hub was made

	mu     sync.Mutex
	sess   *session // nil: none open
	closed bool
	wg     sync.WaitGroup // the session loops
}

// session is one pub/sub connection and what is subscribed on it. It lives
// until the connection breaks or the store closes; it is never reused after.
// Its end closes every watch on it: a message may have been lost.
type session struct {
	ps    *goredis.PubSub
	done  chan struct{} // closed by loop when the session is over
	err   error         // why it ended; set before done is closed
	watch storekit.Hub  // the watches, by Redis channel; closed by loop at the end

	// Guarded by hub.mu:
	chans map[string]*subState
	acked chan struct{} // closed and replaced on each subscribe reply
}

type subState struct {
	subscribed bool // a SUBSCRIBE was sent after the last UNSUBSCRIBE
	sent       int  // SUBSCRIBE commands sent for this channel
	acks       int  // subscribe replies received for this channel
}

func newHub(c goredis.UniversalClient) *hub { return &hub{c: c, health: healthInterval} }

// session returns the open session, starting one if needed. Called with h.mu held.
func (h *hub) session() *session {
	if h.sess != nil {
		return h.sess
	}
	ps := h.c.Subscribe(context.Background())
	sess := &session{ps: ps, done: make(chan struct{}), chans: map[string]*subState{}, acked: make(chan struct{})}
	sess.watch.Idle = func(channel string) { h.idle(sess, channel) }
	h.sess = sess
	h.wg.Add(1)
	go h.loop(sess)
	return sess
}

// watch subscribes a new watch to channel and waits for the subscription
// to be confirmed.
func (h *hub) watch(ctx context.Context, channel string) (<-chan struct{}, error) {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil, errHubClosed
	}
	sess := h.session()
	sub, err := sess.watch.Subscribe(channel)
	if err != nil { // not expected: an open session's watches are open
		h.mu.Unlock()
		return nil, err
	}
	st := sess.chans[channel]
	if st == nil {
		st = &subState{}
		sess.chans[channel] = st
	}
	if !st.subscribed {
		// SUBSCRIBE is only written here; its reply is read by loop.
		if err := sess.ps.Subscribe(ctx, channel); err != nil {
			h.mu.Unlock()
			sub.Stop()
			// go-redis may have reconnected the pub/sub connection under us,
			// silently: end the session so that no watch trusts it.
			h.kill(sess)
			return nil, err
		}
		st.subscribed = true
		st.sent++
	}
	target := st.sent
	h.mu.Unlock()

	// Subscribed to the hub before the reply: a message that arrives
	// meanwhile wakes the watch (a spurious wake-up at worst).
	if err := h.confirm(ctx, sess, channel, target); err != nil {
		sub.Stop()
		return nil, err
	}
	sub.Until(ctx)
	return sub.C(), nil
}

// confirm waits until the SUBSCRIBE numbered target of channel is
// confirmed, ctx ends, the session ends, or confirmTimeout passes.
func (h *hub) confirm(ctx context.Context, sess *session, channel string, target int) error {
	timer := time.NewTimer(confirmTimeout)
	defer timer.Stop()
	for {
		h.mu.Lock()
		ok := sess.chans[channel].acks >= target
		acked := sess.acked
		h.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-acked:
		case <-ctx.Done():
			return ctx.Err()
		case <-sess.done:
			return sess.err
		case <-timer.C:
			return fmt.Errorf("no reply to SUBSCRIBE %s within %v", channel, confirmTimeout)
		}
	}
}

// idle unsubscribes channel once its last watch has ended, unless a new
// one has come in meanwhile (watch subscribes under h.mu too).
func (h *hub) idle(sess *session, channel string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	st := sess.chans[channel]
	if st == nil || !st.subscribed || sess.watch.Count(channel) > 0 {
		return
	}
	select {
	case <-sess.done:
		return
	default:
	}
	st.subscribed = false
	if err := sess.ps.Unsubscribe(context.Background(), channel); err != nil {
		h.killLocked(sess)
	}
}

// kill ends sess: it stops new watches from joining it and closes its
// connection, so that loop's Receive fails and loop ends the session.
func (h *hub) kill(sess *session) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.killLocked(sess)
}

// killLocked is kill with h.mu held. (PubSub.Close never waits for h.mu.)
func (h *hub) killLocked(sess *session) {
	if h.sess == sess {
		h.sess = nil
	}
	sess.ps.Close()
}

// loop reads the session's connection: subscribe replies confirm watches,
// messages wake them. Any error ends the session, which closes every
// watch's channel: a message may have been lost.
func (h *hub) loop(sess *session) {
	defer h.wg.Done()
	ctx := context.Background()
	silent := 0
	var err error
	for {
		var msg any
		msg, err = sess.ps.ReceiveTimeout(ctx, h.health)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() && silent == 0 {
				silent++
				if err = sess.ps.Ping(ctx); err == nil {
					continue
				}
			}
			break
		}
		silent = 0
		switch m := msg.(type) {
		case *goredis.Subscription:
			if m.Kind != "subscribe" {
				continue
			}
			h.mu.Lock()
			if st := sess.chans[m.Channel]; st != nil {
				st.acks++
			}
			close(sess.acked)
			sess.acked = make(chan struct{})
			h.mu.Unlock()
		case *goredis.Message:
			sess.watch.Notify(m.Channel)
		}
	}
	h.mu.Lock()
	if h.sess == sess {
		h.sess = nil
	}
	h.mu.Unlock()
	sess.ps.Close()
	sess.err = fmt.Errorf("pub/sub connection ended: %w", err)
	close(sess.done)
	sess.watch.Close()
}

// close ends the open session and waits for every session loop, which
// closes the session's watches.
func (h *hub) close() {
	h.mu.Lock()
	h.closed = true
	sess := h.sess
	h.sess = nil
	h.mu.Unlock()
	if sess != nil {
		sess.ps.Close()
	}
	h.wg.Wait()
}
