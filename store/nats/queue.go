package nats

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	natsio "github.com/nats-io/nats.go"

	"github.com/leasehold/leasehold/store"
)

var (
	_ store.Queuer   = (*Store)(nil)
	_ store.Migrator = (*Store)(nil)
)

// The fair queue (store.Queuer) of lease name N is one key per waiter's
// place, in the fair queues' bucket, a bucket of its own beside the
// leases' (QueueBucket: the leases' bucket's name and "-queue"):
//
//	=queue.<key of N>.=.<holder>
//
// The places are not in the leases' bucket because the server expires a
// lease late while other keys of its stream are rewritten with a TTL, as
// a waiter refreshes its place: nats-server 2.15's expiry timer fires at
// the expiry of a message that was since replaced (its timing wheel keeps
// the lowest expiry when an entry is removed), and it never sets itself
// sooner than 250 ms ahead, so an expiry due within 250 ms of such a
// firing waits up to 250 ms more. Measured: a 1 s key expired 167-176 ms
// late in 10 of 11 tries while another key of its bucket was rewritten
// every 140 ms, and at most 4 ms late with that key in another bucket.
//
// The holder is one subject token: its bytes other than letters, digits,
// '-', '_' and '/' are written as "=XX" (hex). No lease key begins with
// '=' (a name has none, and keyOf writes "=2E" only for a '.' that is not
// a name's first byte), so a place's key is never a lease's; and no name's
// key has a token "=", so the places of N are exactly the keys matching
// =queue.<key of N>.=.* (those of N.x do not match).
//
// A place's last message is a value like a term's ({"holder", "token",
// "ttl_ms"}) written with a per-message TTL (Nats-TTL, the place's ttl
// rounded up to whole seconds), which the server counts down on its own
// clock: a place not refreshed within its ttl is removed by the server,
// which writes its expiry marker. The "token" is the place's ticket, its
// position: 0 in the message that makes the place (the ticket is then that
// message's own revision, the bucket stream's sequence), and carried
// explicitly by every refresh, which writes the key again with a fresh TTL
// at exactly the key's last revision (a compare-and-set), so that a place
// that expired meanwhile is not revived at its old position: the refresh
// then makes a new place at the back.
//
// Dequeue purges the place's key (the stream's purge of one subject: no
// marker is left, and the core's holders, a new one per acquisition, do
// not leave a key each behind), then writes the name's leave signal, the
// key =queue.<key of N>.= (a purge marker with a TTL of a second, which the
// server then drops without a marker of its own), which wakes the watchers
// of N. The signal comes after the purge, so a waiter it wakes lists the
// queue without the place.
//
// Enqueue counts the live places of N with a ticket below its own from one
// batched direct get of the last message of each place key (multi_last),
// answered by the server at a stream sequence it reports
// (Nats-UpTo-Sequence). Tickets are the sequence of the queues' stream, which one
// server (the stream's leader) assigns in order: of two waiters racing to
// queue, the one with the higher ticket was stored after the other, so any
// listing that includes its own write includes the other's place. A
// listing from a replica that had not yet stored every revision this
// handle saw (its own writes, and what its watches delivered: an R3
// bucket's follower) is asked again.

// queuePrefix begins every key of the queues. The queues have a bucket of
// their own, but the prefix stays: a place's key still never reads as a
// lease's, should one ever be listed with the leases.
const queuePrefix = "=queue."

// QueueBucket is the name of the bucket that keeps the fair queues of the
// leases in bucket: made beside it, like it (replicas, storage, marker
// TTL), at the first Enqueue of a handle, unless Options.NoCreate.
func QueueBucket(bucket string) string { return bucket + "-queue" }

// queueStream returns the fair queues' bucket, opening it (and making it,
// unless the handle was opened with NoCreate) the first time. A failure is
// not remembered: the next call tries again.
func (s *Store) queueStream(ctx context.Context) (*kvStream, error) {
	return s.openQueue(ctx, !s.opts.NoCreate)
}

// Migrate implements store.Migrator: it makes the fair queues' bucket
// (QueueBucket) if it is missing, like the lease bucket, even on a handle
// opened with NoCreate: it is the explicit step (`leasehold migrate`, run
// by a user that may make buckets) for deployments that make buckets
// ahead. It changes no lease.
func (s *Store) Migrate(ctx context.Context) error {
	const op = "migrate"
	if err := s.life.Check(ctx); err != nil {
		return kit.Wrap(op, err)
	}
	if _, err := s.openQueue(ctx, true); err != nil {
		return s.fail(op, err)
	}
	return nil
}

// openQueue is queueStream, making a missing bucket if create.
func (s *Store) openQueue(ctx context.Context, create bool) (*kvStream, error) {
	s.queueMu.Lock()
	defer s.queueMu.Unlock()
	if s.queue != nil {
		return s.queue, nil
	}
	q := newKVStream(QueueBucket(s.bucket))
	o := s.opts
	o.NoCreate = !create
	if _, err := s.ensure(ctx, q, o, "leasehold fair queues of bucket "+s.bucket); err != nil {
		return nil, fmt.Errorf("the fair queues' bucket: %w", err)
	}
	kv, err := s.js.KeyValue(ctx, q.bucket)
	if err != nil {
		return nil, fmt.Errorf("the fair queues' bucket %q: %w", q.bucket, err)
	}
	s.queue, s.queueKV = q, kv
	return q, nil
}

// AcquireUnqueued implements store.UnqueuedAcquirer: Acquire, refusing
// with store.ErrQueued while name's queue holds a live place. The queues
// are a stream apart from the leases, so the look at the queue and the
// grant are two steps, not one: a listing of the queue, sent together with
// Acquire's read of the lease (one round trip, as before), and Acquire's
// compare-and-set, sent only if the listing shows no live place. The
// listing comes after the call began, so a place whose Enqueue returned
// before it is seen and never overtaken; a place written while the call
// runs may be, once, as by a waiter that came at the same moment (the
// contract's note on stores whose queue is apart).
//
// That holds only where the listing is as of now: on an R1 queues' bucket,
// whose only server answers it. A follower of an R3 or R5 bucket may answer
// from behind, and an empty queue's answer does not say up to where, so
// there AcquireUnqueued sends nothing and answers store.ErrQueued: the
// caller queues, as it would without this method. So does a handle whose
// queues' bucket cannot be opened.
func (s *Store) AcquireUnqueued(ctx context.Context, name, holder string, ttl time.Duration, metadata string) (store.Record, error) {
	op, err := s.checkAcquire(ctx, name, holder, ttl, metadata)
	if err != nil {
		return store.Record{}, err
	}
	q, err := s.queueStream(ctx)
	if err != nil {
		return store.Record{}, kit.Errorf(op, "%w: the queue could not be read: %v", store.ErrQueued, err)
	}
	if q.replicas > 1 {
		return store.Record{}, kit.Errorf(op, "%w: the queues' bucket %q has %d replicas, whose listing a follower may answer from behind; not asked", store.ErrQueued, q.bucket, q.replicas)
	}
	type listing struct {
		places []entry
		err    error
	}
	listed := make(chan listing, 1)
	go func() {
		places, _, err := s.listQueueIn(ctx, q, name)
		listed <- listing{places, err}
	}()
	return s.acquire(ctx, op, name, holder, ttl, metadata, func() error {
		l := <-listed
		if l.err != nil {
			return kit.Errorf(op, "%w: the queue's listing failed: %v", store.ErrQueued, l.err)
		}
		for _, e := range l.places {
			if livePlace(e) {
				return kit.Errorf(op, "%w: %s's place is queued", store.ErrQueued, e.v.Holder)
			}
		}
		return nil
	})
}

// leaveSignalTTL is how long a name's leave signal stays (the server's
// shortest TTL): it is there to be delivered to the watches, once.
const leaveSignalTTL = time.Second

// listTries bounds the listings Enqueue asks for until one shows every
// revision the handle saw; after each refused one it waits, from 1 ms,
// twice as long as before (about half a second in all): a follower of an
// R3 bucket that answered from behind catches up in milliseconds, and in
// about 100 ms on a machine slowed by the race detector.
const listTries = 10

func placeKey(name, holder string) string {
	return queuePrefix + keyOf(name) + ".=." + holderToken(holder)
}

// queueFilter matches the place keys of name's queue.
func queueFilter(name string) string { return queuePrefix + keyOf(name) + ".=.*" }

// leaveKey is the key of name's leave signal, which queueFilter does not match.
func leaveKey(name string) string { return queuePrefix + keyOf(name) + ".=" }

// holderToken writes a holder as one subject token, one to one.
func holderToken(holder string) string {
	var b strings.Builder
	for i := 0; i < len(holder); i++ {
		c := holder[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_', c == '/':
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, "=%02X", c)
		}
	}
	return b.String()
}

// placeHint is what this handle knows of a place key from its own last
// write of it: the write's revision and the place's ticket. It is a first
// guess only: the compare-and-set decides, and a wrong guess reads the key.
// Dequeue forgets it.
type placeHint struct{ rev, ticket uint64 }

// Enqueue implements store.Queuer (see above). A refresh whose hint holds
// costs one round trip (its write and the listing are sent together: the
// places ahead of it were stored before its ticket was, which this handle
// saw); a new place two (its write, expecting an empty key, then the
// listing). A key that changed under the hint costs a read and a write more.
func (s *Store) Enqueue(ctx context.Context, name, holder string, ttl time.Duration) (int, error) {
	if err := kit.CheckEnqueue(name, holder, ttl); err != nil {
		return 0, err
	}
	op := fmt.Sprintf("enqueue %q for %s", name, holder)
	if err := s.life.Check(ctx); err != nil {
		return 0, kit.Wrap(op, err)
	}
	q, err := s.queueStream(ctx)
	if err != nil {
		return 0, s.fail(op, err)
	}
	key := placeKey(name, holder)
	var h placeHint
	if v, ok := s.placeHints.Load(key); ok {
		h = v.(placeHint)
	}
	if h.ticket == 0 {
		ticket, rev, err := s.writePlace(ctx, q, key, holder, ttl, h)
		if err != nil {
			return 0, s.fail(op, err)
		}
		return s.countAhead(ctx, q, op, name, holder, ticket, rev)
	}
	type listing struct {
		places []entry
		upTo   uint64
		err    error
	}
	listed := make(chan listing, 1)
	seen := q.high.Load()
	go func() {
		places, upTo, err := s.listQueueIn(ctx, q, name)
		listed <- listing{places, upTo, err}
	}()
	ticket, rev, err := s.writePlace(ctx, q, key, holder, ttl, h)
	l := <-listed
	if err != nil {
		return 0, s.fail(op, err)
	}
	if ticket == h.ticket && l.err == nil && l.upTo >= seen {
		return ahead(l.places, holder, ticket), nil
	}
	// The place was made again (it had expired or left), or the listing
	// failed or came from behind: list after the write.
	return s.countAhead(ctx, q, op, name, holder, ticket, rev)
}

// writePlace writes holder's place at key: a refresh keeping h.ticket if
// the key's last revision is still h.rev, else a new place at the back
// (ticket 0: its own revision). It returns the place's ticket and the
// write's revision.
func (s *Store) writePlace(ctx context.Context, q *kvStream, key, holder string, ttl time.Duration, h placeHint) (ticket, rev uint64, err error) {
	for range maxConflicts {
		rev, err := s.publishIn(ctx, q, key, value{Holder: holder, Token: int64(h.ticket), TTLms: ttl.Milliseconds()}, h.rev, ttl, false)
		if err == nil {
			q.see(rev)
			ticket := h.ticket
			if ticket == 0 {
				ticket = rev
			}
			s.placeHints.Store(key, placeHint{rev: rev, ticket: ticket})
			return ticket, rev, nil
		}
		if !isConflict(err) {
			return 0, 0, err
		}
		e, found, err := s.lastIn(ctx, q, key)
		switch {
		case err != nil:
			return 0, 0, err
		case !found:
			h = placeHint{}
		case e.kind == kindValue && !e.foreign && e.v.Holder == holder:
			h = placeHint{rev: e.rev, ticket: uint64(e.token())}
		default: // a marker: the place left or expired
			h = placeHint{rev: e.rev}
		}
	}
	return 0, 0, fmt.Errorf("the place's key changed under %d compare-and-set attempts in a row; outcome unknown", maxConflicts)
}

// countAhead lists name's queue until the listing includes every revision
// of the queues' stream q this handle saw (the place's write of revision
// rev among them), and counts the places ahead of ticket.
func (s *Store) countAhead(ctx context.Context, q *kvStream, op, name, holder string, ticket, rev uint64) (int, error) {
	seen := max(rev, q.high.Load())
	wait := time.Millisecond
	for try := range listTries {
		if try > 0 {
			timer := time.NewTimer(wait)
			select {
			case <-timer.C:
			case <-ctx.Done():
				timer.Stop()
				return 0, s.fail(op, ctx.Err())
			}
			wait *= 2
		}
		places, upTo, err := s.listQueueIn(ctx, q, name)
		if err != nil {
			return 0, s.fail(op, err)
		}
		if upTo >= seen {
			return ahead(places, holder, ticket), nil
		}
	}
	return 0, kit.Errorf(op, "the server that answered %d listings of the queue had not stored revision %d, which this handle saw (its place's write is %d)", listTries, seen, rev)
}

// livePlace reports whether e, the last message of a place key, is a
// leasehold place still queued (not a marker of one that left, nor a value
// leasehold did not write).
func livePlace(e entry) bool { return e.kind == kindValue && !e.foreign }

// ahead counts the live places other than holder's with a ticket below ticket.
func ahead(places []entry, holder string, ticket uint64) int {
	n := 0
	for _, e := range places {
		if livePlace(e) && e.v.Holder != holder && uint64(e.token()) < ticket {
			n++
		}
	}
	return n
}

// listQueue returns the last message of each place key of name's queue
// (a batched direct get, multi_last), and the stream sequence up to which
// the answering server had stored messages: every place written at or
// below it is in the answer, unless it left since. A queue without keys
// answers no sequence on an R3 or R5 bucket (0: it may be a follower's
// answer from behind).
func (s *Store) listQueue(ctx context.Context, name string) ([]entry, uint64, error) {
	q, err := s.queueStream(ctx)
	if err != nil {
		return nil, 0, err
	}
	return s.listQueueIn(ctx, q, name)
}

// listQueueIn is listQueue in the queues' stream q.
func (s *Store) listQueueIn(ctx context.Context, q *kvStream, name string) ([]entry, uint64, error) {
	// Right after an R3 bucket is made, its servers may not answer direct
	// gets yet (no responders, status 503; seen for over half a second):
	// ask again for up to noResponderWait, waiting from 1 ms, twice as
	// long each time, at most 100 ms.
	wait, deadline := time.Millisecond, time.Now().Add(noResponderWait)
	for {
		places, upTo, err := s.listQueueOnce(ctx, q, name)
		if !errors.Is(err, errNoResponders) || time.Now().Add(wait).After(deadline) {
			return places, upTo, err
		}
		timer := time.NewTimer(wait)
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return nil, 0, err
		}
		wait = min(2*wait, 100*time.Millisecond)
	}
}

// noResponderWait bounds how long a listing is asked again while no server
// answers it.
const noResponderWait = 5 * time.Second

// errNoResponders: no server answered a direct get.
var errNoResponders = errors.New("no server answered")

func (s *Store) listQueueOnce(ctx context.Context, q *kvStream, name string) ([]entry, uint64, error) {
	ctx, cancel := withDeadline(ctx)
	defer cancel()
	req, err := json.Marshal(map[string][]string{"multi_last": {q.pre + queueFilter(name)}})
	if err != nil {
		return nil, 0, err
	}
	subj := s.api + "DIRECT.GET." + q.stream
	msgs, err := s.batches.request(ctx, s.nc, subj, req)
	if err != nil {
		return nil, 0, err
	}
	var places []entry
	for _, m := range msgs {
		switch status := m.Header.Get("Status"); status {
		case "":
			seq, err := strconv.ParseUint(m.Header.Get("Nats-Sequence"), 10, 64)
			if err != nil {
				return nil, 0, fmt.Errorf("the queue's listing has a message without a sequence: %w", err)
			}
			q.see(seq)
			places = append(places, entryOf(seq, time.Time{}, m.Header, m.Data))
		case "204": // the end of the batch
			upTo, err := strconv.ParseUint(m.Header.Get("Nats-UpTo-Sequence"), 10, 64)
			if err != nil {
				return nil, 0, fmt.Errorf("the queue's listing ended without Nats-UpTo-Sequence: %w", err)
			}
			return places, upTo, nil
		case "404": // no key matched; the answer does not say up to where
			if q.replicas <= 1 {
				return nil, math.MaxUint64, nil // the only server answered: as of now
			}
			return nil, 0, nil
		case "413":
			return nil, 0, fmt.Errorf("the queue of %q has more than 1024 place keys (live places, and markers of places that left or expired), more than the server lists in one batch", name)
		case "503":
			return nil, 0, fmt.Errorf("%w the queue's listing on %s: the bucket's direct get (allow_direct) is off, or its servers are not ready", errNoResponders, subj)
		default:
			return nil, 0, fmt.Errorf("the queue's listing on %s answered status %s %s", subj, status, m.Header.Get("Description"))
		}
	}
	return nil, 0, fmt.Errorf("the queue's listing on %s ended without its end-of-batch message", subj)
}

// batchReplies receives the answers of requests answered by several
// messages (a batched direct get), ended by a status message, on one
// subscription of the handle's (a subscription per request would cost
// more than the request: measured 0.8 ms on loopback, against 0.1 ms).
type batchReplies struct {
	mu      sync.Mutex
	prefix  string // <inbox>. ; a request's replies come to prefix + its id
	sub     *natsio.Subscription
	next    uint64
	pending map[string]*batchReply
	closed  bool
}

type batchReply struct {
	msgs []*natsio.Msg
	done chan struct{} // closed once the status message that ends the batch came
}

// request sends req to subj and returns the messages of its answer, up to
// and including the first status message.
func (b *batchReplies) request(ctx context.Context, nc *natsio.Conn, subj string, req []byte) ([]*natsio.Msg, error) {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil, store.ErrClosed
	}
	if b.sub == nil {
		b.prefix = nc.NewInbox() + "."
		sub, err := nc.Subscribe(b.prefix+"*", b.deliver)
		if err != nil {
			b.mu.Unlock()
			return nil, err
		}
		b.sub, b.pending = sub, map[string]*batchReply{}
	}
	b.next++
	id := strconv.FormatUint(b.next, 36)
	r := &batchReply{done: make(chan struct{})}
	b.pending[id] = r
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		delete(b.pending, id)
		b.mu.Unlock()
	}()
	if err := nc.PublishRequest(subj, b.prefix+id, req); err != nil {
		return nil, err
	}
	select {
	case <-r.done:
		return r.msgs, nil // done was closed under b.mu: msgs is complete
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (b *batchReplies) deliver(m *natsio.Msg) {
	b.mu.Lock()
	defer b.mu.Unlock()
	id := strings.TrimPrefix(m.Subject, b.prefix)
	r, ok := b.pending[id]
	if !ok {
		return // a request that gave up
	}
	r.msgs = append(r.msgs, m)
	if m.Header.Get("Status") != "" {
		delete(b.pending, id)
		close(r.done)
	}
}

// close ends the subscription (the connection may be the caller's).
func (b *batchReplies) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	if b.sub != nil {
		b.sub.Unsubscribe()
		b.sub = nil
	}
}

// Dequeue implements store.Queuer (see above): the purge of the place's
// key, then, if it had a message, the name's leave signal. Two requests in
// a row; one when there is no place.
func (s *Store) Dequeue(ctx context.Context, name, holder string) error {
	if err := kit.CheckDequeue(name, holder); err != nil {
		return err
	}
	op := fmt.Sprintf("dequeue %q for %s", name, holder)
	if err := s.life.Check(ctx); err != nil {
		return kit.Wrap(op, err)
	}
	q, err := s.queueStream(ctx)
	if err != nil {
		return s.fail(op, err)
	}
	key := placeKey(name, holder)
	s.placeHints.Delete(key)
	var purged struct {
		Purged uint64 `json:"purged"`
	}
	if err := s.request(ctx, "STREAM.PURGE."+q.stream, map[string]string{"filter": q.pre + key}, &purged); err != nil {
		return s.fail(op, err)
	}
	if purged.Purged == 0 {
		return nil // no place
	}
	body, err := json.Marshal(value{Holder: holder, Event: "dequeued"})
	if err != nil {
		return kit.Wrap(op, err)
	}
	m := natsio.NewMsg(q.pre + leaveKey(name))
	m.Data = body
	m.Header.Set(hdrKVOp, "PURGE")
	m.Header.Set(hdrTTL, ttlHeader(leaveSignalTTL))
	rev, err := s.sendIn(ctx, q, m, anyRev)
	if err != nil {
		return s.fail(op, fmt.Errorf("the place is gone, but the signal that wakes the waiters behind it was not written (they find out at their next refresh): %w", err))
	}
	q.see(rev)
	return nil
}
