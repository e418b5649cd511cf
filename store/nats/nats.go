package nats

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	natsio "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/storekit"
)

// MinTTL is the shortest lease the store keeps: the server counts a
// message's TTL in whole seconds, and refuses one below a second.
const MinTTL = time.Second

var kit = storekit.Kit{Store: "nats", MinTTL: MinTTL}

// Errors of the store that are not the contract's definite answers.
var (
	// ErrServerTooOld is returned by Open and New when the server is older
	// than MinServerVersion (see the package doc for what an older server
	// lacks).
	ErrServerTooOld = errors.New("leasehold/nats: NATS server too old")
	// ErrBucketConfig is returned by Open and New when the bucket exists
	// but is not configured as the store needs (per-key TTL off, a
	// bucket-wide TTL, discarding old values under a limit).
	ErrBucketConfig = errors.New("leasehold/nats: bucket unsuitable")
	// ErrTokenRegress is returned by Acquire when the revision the server
	// gave the new term is at or below one this handle saw before: the
	// bucket was deleted and made again by hand, or restored from an old
	// copy. The handle has moved the bucket's revisions past the highest it
	// saw (purging the bucket: every term in it carried a token that may
	// repeat an earlier one), and the next Acquire gets a higher token.
	ErrTokenRegress = errors.New("leasehold/nats: the bucket's revisions went back")
)

// Store is a lease store on a NATS JetStream key-value bucket. See the
// package doc for the design. It is safe for concurrent use.
type Store struct {
	nc  *natsio.Conn
	own bool // Close closes nc
	js  jetstream.JetStream
	kv  jetstream.KeyValue
	api string // $JS.API.
	// The leases' bucket. Its high is the highest revision this handle has
	// seen in it: a new term's revision at or below it is a regress
	// (ErrTokenRegress).
	kvStream
	life storekit.Lifecycle

	// opts are the Options the handle was opened with, with the leases'
	// bucket's storage, replicas and marker TTL as found: the fair queues'
	// bucket is made like it (queue.go).
	opts Options
	// queue is the fair queues' bucket, opened by the handle's first call
	// of the queue (queue.go); nil before.
	queueMu sync.Mutex
	queue   *kvStream
	queueKV jetstream.KeyValue
	// hints remember, per name, the revision of this handle's last write
	// of a term, so that a renewal tries its compare-and-set at once. A
	// hint is only a first guess: the compare-and-set is what decides, and
	// a wrong guess falls back to reading the key.
	hints sync.Map // name -> hint
	// placeHints remember, per place key of the queues, this handle's
	// last write of it, so that a refresh or a dequeue tries its
	// compare-and-set at once (queue.go).
	placeHints sync.Map // place key -> placeHint
	// batches receives the queue's listings (queue.go).
	batches batchReplies
	// reported keeps the server's asynchronous errors (Open sets it; nil
	// on a connection the caller owns).
	reported *asyncErrors
}

// asyncErrors keeps the last asynchronous error the server reported on the
// connection, such as a permission violation: a request the server refuses
// that way gets no answer, and times out; the timeout's message then names
// the violation.
type asyncErrors struct {
	_ [0]func() // not comparable: spares the binary an equality function

	mu  sync.Mutex
	err error
	at  time.Time
}

func (a *asyncErrors) set(err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.err, a.at = err, time.Now()
}

// explain adds the server's last report (of the last 30 s) to a timeout.
func (a *asyncErrors) explain(err error) error {
	if a == nil || err == nil || !(errors.Is(err, context.DeadlineExceeded) || errors.Is(err, natsio.ErrTimeout)) {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.err == nil || time.Since(a.at) > 30*time.Second {
		return err
	}
	return fmt.Errorf("%w (the server reported: %v)", err, a.err)
}

type hint struct {
	term store.Term
	rev  uint64
	meta string
}

// kvStream is a KV bucket as the store uses it: the leases' bucket, or
// the fair queues' (queue.go). Revisions are counted per stream.
type kvStream struct {
	bucket string
	stream string // KV_<bucket>
	pre    string // $KV.<bucket>.
	// replicas is the bucket's replica count when the handle opened it: a
	// direct get on an R1 bucket is answered by its only server.
	replicas int
	// high is the highest revision this handle has seen in the stream.
	high atomic.Uint64
}

func newKVStream(bucket string) *kvStream {
	return &kvStream{bucket: bucket, stream: "KV_" + bucket, pre: "$KV." + bucket + "."}
}

// see raises the handle's high-water revision of the stream to rev.
func (b *kvStream) see(rev uint64) {
	for {
		h := b.high.Load()
		if rev <= h || b.high.CompareAndSwap(h, rev) {
			return
		}
	}
}

// defaultTimeout bounds a request whose context has no deadline.
const defaultTimeout = 5 * time.Second

func withDeadline(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, defaultTimeout)
}

// apiError is the error object of a JetStream API response.
type apiError struct {
	Code        int    `json:"code"`
	ErrCode     int    `json:"err_code"`
	Description string `json:"description"`
}

func (e *apiError) Error() string {
	return fmt.Sprintf("%s (code %d, error %d)", e.Description, e.Code, e.ErrCode)
}

// JetStream API error codes the store reads.
const (
	errCodeNoMessage      = 10037
	errCodeStreamNotFound = 10059
)

// request sends a JetStream API request and decodes its JSON answer into
// out, returning the API's error object as *apiError.
func (s *Store) request(ctx context.Context, subj string, req any, out any) error {
	ctx, cancel := withDeadline(ctx)
	defer cancel()
	var body []byte
	if req != nil {
		var err error
		if body, err = json.Marshal(req); err != nil {
			return err
		}
	}
	msg, err := s.nc.RequestWithContext(ctx, s.api+subj, body)
	if err != nil {
		return err
	}
	var resp struct {
		Error *apiError `json:"error"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return fmt.Errorf("JetStream API %s answered something that is not JSON: %w", subj, err)
	}
	if resp.Error != nil {
		return resp.Error
	}
	return json.Unmarshal(msg.Data, out)
}

func isAPIError(err error, code int) bool {
	var ae *apiError
	return errors.As(err, &ae) && ae.ErrCode == code
}

// last reads a key's last message from the stream's leader
// (STREAM.MSG.GET, not a direct get, which any replica may answer from
// behind): found is false when the key has no message.
func (s *Store) last(ctx context.Context, key string) (e entry, found bool, err error) {
	return s.lastIn(ctx, &s.kvStream, key)
}

// lastIn is last in bucket b.
func (s *Store) lastIn(ctx context.Context, b *kvStream, key string) (e entry, found bool, err error) {
	var resp struct {
		Message *struct {
			Seq  uint64    `json:"seq"`
			Hdrs []byte    `json:"hdrs"`
			Data []byte    `json:"data"`
			Time time.Time `json:"time"`
		} `json:"message"`
	}
	err = s.request(ctx, "STREAM.MSG.GET."+b.stream, map[string]string{"last_by_subj": b.pre + key}, &resp)
	if isAPIError(err, errCodeNoMessage) {
		return entry{}, false, nil
	}
	if err != nil {
		return entry{}, false, err
	}
	if resp.Message == nil {
		return entry{}, false, errors.New("JetStream API STREAM.MSG.GET answered without a message")
	}
	m := resp.Message
	b.see(m.Seq)
	return decodeEntry(m.Seq, m.Time, m.Hdrs, m.Data), true, nil
}

// streamInfo is what the store reads of the bucket's stream.
type streamInfo struct {
	Config jetstream.StreamConfig `json:"config"`
	State  struct {
		LastSeq  uint64            `json:"last_seq"`
		Subjects map[string]uint64 `json:"subjects"`
	} `json:"state"`
	// TimeStamp is the server's clock when it answered.
	TimeStamp time.Time `json:"ts"`
}

func (s *Store) info(ctx context.Context, subjects bool) (streamInfo, error) {
	return s.infoOf(ctx, &s.kvStream, subjects)
}

// infoOf is info of bucket b.
func (s *Store) infoOf(ctx context.Context, b *kvStream, subjects bool) (streamInfo, error) {
	var req any
	if subjects {
		req = map[string]string{"subjects_filter": b.pre + ">"}
	}
	var si streamInfo
	err := s.request(ctx, "STREAM.INFO."+b.stream, req, &si)
	if err == nil {
		b.see(si.State.LastSeq)
	}
	return si, err
}

// serverNow is the server's clock: the time Remaining is measured against.
func (s *Store) serverNow(ctx context.Context) (time.Time, error) {
	si, err := s.info(ctx, false)
	if err != nil {
		return time.Time{}, err
	}
	if si.TimeStamp.IsZero() {
		return time.Time{}, errors.New("the server's stream info carries no time stamp (ts)")
	}
	return si.TimeStamp, nil
}

// publish writes a message to key if the key's last revision is expect (0:
// the key has no message), and returns the new revision. ttl > 0 sets the
// per-message TTL; del writes a delete marker.
func (s *Store) publish(ctx context.Context, key string, v value, expect uint64, ttl time.Duration, del bool) (uint64, error) {
	return s.publishIn(ctx, &s.kvStream, key, v, expect, ttl, del)
}

// publishIn is publish in bucket b.
func (s *Store) publishIn(ctx context.Context, b *kvStream, key string, v value, expect uint64, ttl time.Duration, del bool) (uint64, error) {
	body, err := json.Marshal(v)
	if err != nil {
		return 0, err
	}
	m := natsio.NewMsg(b.pre + key)
	m.Data = body
	if del {
		m.Header.Set(hdrKVOp, "DEL")
	}
	if ttl > 0 {
		m.Header.Set(hdrTTL, ttlHeader(ttl))
	}
	return s.sendIn(ctx, b, m, expect)
}

// anyRev, as the revision a write expects, writes whatever the key holds.
const anyRev = ^uint64(0)

// sendIn stores m, a message of bucket b, if its key's last revision is
// expect (0: the key has no message; anyRev: whatever it has) and returns
// the new revision.
func (s *Store) sendIn(ctx context.Context, b *kvStream, m *natsio.Msg, expect uint64) (uint64, error) {
	ctx, cancel := withDeadline(ctx)
	defer cancel()
	// A write that no server stored (no responders: the stream's group has
	// no leader yet, right after the bucket was made or while a new leader
	// is elected) is sent again every writeRetryWait until ctx ends: it was
	// not stored, so sending it again cannot store it twice. The client's
	// default, two more tries 250 ms apart, gave up during such elections.
	deadline, _ := ctx.Deadline()
	tries := int(time.Until(deadline)/writeRetryWait) + 1 // ctx ends the last one
	opts := []jetstream.PublishOpt{jetstream.WithRetryWait(writeRetryWait), jetstream.WithRetryAttempts(tries)}
	if expect != anyRev {
		opts = append(opts, jetstream.WithExpectLastSequencePerSubject(expect))
	}
	ack, err := s.js.PublishMsg(ctx, m, opts...)
	if err != nil {
		return 0, err
	}
	if ack.Stream != b.stream {
		return 0, fmt.Errorf("the write was stored by stream %q, not %q: another stream takes the bucket's subjects", ack.Stream, b.stream)
	}
	return ack.Sequence, nil
}

// writeRetryWait is the wait before a write that no server stored is sent
// again.
const writeRetryWait = 100 * time.Millisecond

// isConflict reports whether a publish was refused because the key's last
// revision was not the one expected (codes 10071, and 10164 on replicated
// streams).
func isConflict(err error) bool {
	var ae *jetstream.APIError
	return errors.As(err, &ae) && (ae.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		ae.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// maxConflicts bounds the compare-and-set retries of one call: each retry
// follows a write by someone else, so a call that loses this many races in a
// row reports the lease as held (Acquire) or gives up (an unknown outcome).
const maxConflicts = 5

// maxAcquireConflicts bounds the compare-and-set retries of Acquire. It is
// far above maxConflicts: a refused compare-and-set wrote nothing, and the
// caller treats the give-up as an unknown outcome and waits a whole retry
// period before trying again (no watch wake-up cuts that wait short). With
// 8 contenders on one lease, 5 conflicts in a row happened on a loaded
// machine, and the contender that gave up missed every turn of a 1.5 s
// bench round (measured: min share 0.00). Each conflict is another
// contender's write, so the loop ends when the lease is taken (ErrHeld) or
// won; the caller's context (RenewDeadline) bounds it too.
const maxAcquireConflicts = 64

// Acquire grants name to holder for ttl if the key is absent or free (a
// delete or expiry marker), or holds a live term of this same holder: a
// compare-and-set against the key's last revision. The new term's token is
// the revision the server gives the write.
func (s *Store) Acquire(ctx context.Context, name, holder string, ttl time.Duration, metadata string) (store.Record, error) {
	op, err := s.checkAcquire(ctx, name, holder, ttl, metadata)
	if err != nil {
		return store.Record{}, err
	}
	return s.acquire(ctx, op, name, holder, ttl, metadata, nil)
}

// checkAcquire checks an acquire's arguments and the handle, and names
// the operation for its errors.
func (s *Store) checkAcquire(ctx context.Context, name, holder string, ttl time.Duration, metadata string) (op string, err error) {
	if err := kit.CheckAcquire(name, holder, ttl, metadata); err != nil {
		return "", err
	}
	op = "acquire " + name
	if err := s.life.Check(ctx); err != nil {
		return "", kit.Wrap(op, err)
	}
	return op, nil
}

// acquire is Acquire after its checks. A gate, if given, is waited for
// after the lease's first read and before its first write; an error from
// it ends the call with nothing written (AcquireUnqueued's look at the
// queue, sent at the same time as that read).
func (s *Store) acquire(ctx context.Context, op, name, holder string, ttl time.Duration, metadata string, gate func() error) (store.Record, error) {
	key := keyOf(name)
	for range maxAcquireConflicts {
		e, found, err := s.last(ctx, key)
		if gate != nil {
			gerr := gate()
			gate = nil
			if gerr != nil {
				return store.Record{}, gerr
			}
		}
		if err != nil {
			return store.Record{}, s.fail(op, err)
		}
		var expect uint64
		if found {
			if e.kind == kindValue && (e.foreign || e.v.Holder != holder) {
				return s.held(ctx, op, name, e)
			}
			expect = e.rev
		}
		before := s.high.Load()
		rev, err := s.publish(ctx, key, value{Holder: holder, TTLms: ttl.Milliseconds(), Meta: metadata}, expect, ttl, false)
		if isConflict(err) {
			continue // someone wrote the key since we read it: look again
		}
		if err != nil {
			return store.Record{}, s.fail(op, err)
		}
		if rev <= before {
			return store.Record{}, s.regress(ctx, op, rev, before)
		}
		s.see(rev)
		t := store.Term{Name: name, Holder: holder, Token: int64(rev)}
		s.hints.Store(name, hint{term: t, rev: rev, meta: metadata})
		return store.Record{Term: t, Remaining: ttl, TTL: ttl, Metadata: metadata}, nil
	}
	e, found, err := s.last(ctx, key)
	if err == nil && found && e.kind == kindValue && (e.foreign || e.v.Holder != holder) {
		return s.held(ctx, op, name, e)
	}
	return store.Record{}, kit.Errorf(op, "the key changed under %d compare-and-set attempts in a row; nothing was written", maxAcquireConflicts)
}

// held answers ErrHeld with the live term e shows, its Remaining measured
// on the server's clock.
func (s *Store) held(ctx context.Context, op, name string, e entry) (store.Record, error) {
	now, err := s.serverNow(ctx)
	if err != nil {
		return store.Record{}, s.fail(op, err)
	}
	rec := e.record(name, now)
	if e.foreign {
		return rec, kit.Errorf(op, "%w: key %q of bucket %q holds a value that is not a leasehold record (revision %d); leasehold will not take it over", store.ErrHeld, keyOf(name), s.bucket, e.rev)
	}
	return rec, kit.Wrap(op, fmt.Errorf("%w: %s", store.ErrHeld, rec.Term))
}

// regress handles a new term whose revision rev is at or below before, the
// highest revision this handle had seen: the bucket's sequence went back.
// The term is not handed out. The bucket is purged up to past before, so
// that its next revision is above every one seen (every term still in it
// carries a token that may repeat one granted before the loss).
func (s *Store) regress(ctx context.Context, op string, rev, before uint64) error {
	var resp struct {
		Success bool `json:"success"`
	}
	perr := s.request(ctx, "STREAM.PURGE."+s.stream, map[string]uint64{"seq": before + 1}, &resp)
	if perr != nil {
		return kit.Errorf(op, "%w: the server gave revision %d, but this handle saw revision %d before (the bucket was deleted and made again, or restored); purging the bucket past %d failed: %v", ErrTokenRegress, rev, before, before, perr)
	}
	return kit.Errorf(op, "%w: the server gave revision %d, but this handle saw revision %d before (the bucket was deleted and made again, or restored); the term was not granted, and the bucket was purged so that its next revision is %d", ErrTokenRegress, rev, before, before+1)
}

// fail wraps a driver's error: after Close it is ErrClosed.
func (s *Store) fail(op string, err error) error {
	return kit.Wrap(op, s.reported.explain(s.life.ClosedOr(err)))
}

// current reads the key and checks that its last message is the live term
// t; it returns that message, or ErrNotHeld.
func (s *Store) current(ctx context.Context, op string, t store.Term) (entry, error) {
	e, found, err := s.last(ctx, keyOf(t.Name))
	if err != nil {
		return entry{}, s.fail(op, err)
	}
	if !found || e.kind != kindValue || e.foreign || e.v.Holder != t.Holder || e.token() != t.Token {
		return entry{}, kit.Wrap(op, store.ErrNotHeld)
	}
	return e, nil
}

// write is the compare-and-set shared by Renew, Release and ForceRelease:
// it writes the message make builds on top of the live term t, first at
// the hinted revision (if any), then at the revision a read shows.
func (s *Store) write(ctx context.Context, op string, t store.Term, useHint bool, mk func(meta string) (value, time.Duration, bool)) (uint64, string, error) {
	key := keyOf(t.Name)
	if useHint {
		if h, ok := s.hints.Load(t.Name); ok && h.(hint).term == t {
			v, ttl, del := mk(h.(hint).meta)
			rev, err := s.publish(ctx, key, v, h.(hint).rev, ttl, del)
			if err == nil {
				s.see(rev)
				return rev, h.(hint).meta, nil
			}
			if !isConflict(err) {
				return 0, "", s.fail(op, err)
			}
		}
	}
	for range maxConflicts {
		e, err := s.current(ctx, op, t)
		if err != nil {
			return 0, "", err
		}
		v, ttl, del := mk(e.v.Meta)
		rev, err := s.publish(ctx, key, v, e.rev, ttl, del)
		if isConflict(err) {
			continue
		}
		if err != nil {
			return 0, "", s.fail(op, err)
		}
		s.see(rev)
		return rev, e.v.Meta, nil
	}
	return 0, "", kit.Errorf(op, "the key changed under %d compare-and-set attempts in a row; outcome unknown", maxConflicts)
}

// Renew writes the live term t again with a fresh TTL, at exactly the
// key's current revision; the token stays (the body carries it).
func (s *Store) Renew(ctx context.Context, t store.Term, ttl time.Duration) (store.Record, error) {
	if err := kit.CheckRenew(t, ttl); err != nil {
		return store.Record{}, err
	}
	op := "renew " + t.String()
	if err := s.life.Check(ctx); err != nil {
		return store.Record{}, kit.Wrap(op, err)
	}
	rev, meta, err := s.write(ctx, op, t, true, func(meta string) (value, time.Duration, bool) {
		return value{Holder: t.Holder, Token: t.Token, TTLms: ttl.Milliseconds(), Meta: meta}, ttl, false
	})
	if err != nil {
		if errors.Is(err, store.ErrNotHeld) {
			s.dropHint(t)
		}
		return store.Record{}, err
	}
	s.hints.Store(t.Name, hint{term: t, rev: rev, meta: meta})
	return store.Record{Term: t, Remaining: ttl, TTL: ttl, Metadata: meta}, nil
}

// Release writes a delete marker over the live term t, at exactly the key's
// current revision. The marker keeps the term's token for Get.
func (s *Store) Release(ctx context.Context, t store.Term) error {
	if err := kit.CheckRelease(t); err != nil {
		return err
	}
	op := "release " + t.String()
	if err := s.life.Check(ctx); err != nil {
		return kit.Wrap(op, err)
	}
	_, _, err := s.write(ctx, op, t, true, func(string) (value, time.Duration, bool) {
		return value{Holder: t.Holder, Token: t.Token, Event: "released"}, 0, true
	})
	if err == nil || errors.Is(err, store.ErrNotHeld) {
		s.dropHint(t)
	}
	return err
}

// dropHint forgets the hint of term t, if the hint is still t's.
func (s *Store) dropHint(t store.Term) {
	if h, ok := s.hints.Load(t.Name); ok && h.(hint).term == t {
		s.hints.CompareAndDelete(t.Name, h)
	}
}

// Get returns the key's last state: the live term (Remaining measured on
// the server's clock), or a free lease with the last token known.
func (s *Store) Get(ctx context.Context, name string) (store.Record, error) {
	if err := kit.CheckName("get", name); err != nil {
		return store.Record{}, err
	}
	op := "get " + name
	if err := s.life.Check(ctx); err != nil {
		return store.Record{}, kit.Wrap(op, err)
	}
	e, found, err := s.last(ctx, keyOf(name))
	if err != nil {
		return store.Record{}, s.fail(op, err)
	}
	if !found {
		return store.Record{}, kit.Wrap(op, store.ErrNotFound)
	}
	var now time.Time
	if e.kind == kindValue {
		if now, err = s.serverNow(ctx); err != nil {
			return store.Record{}, s.fail(op, err)
		}
	}
	return e.record(name, now), nil
}

// ForceRelease writes a delete marker over whatever term of name is live.
func (s *Store) ForceRelease(ctx context.Context, name string) (store.Record, error) {
	if err := kit.CheckName("force-release", name); err != nil {
		return store.Record{}, err
	}
	op := "force-release " + name
	if err := s.life.Check(ctx); err != nil {
		return store.Record{}, kit.Wrap(op, err)
	}
	key := keyOf(name)
	for range maxConflicts {
		e, found, err := s.last(ctx, key)
		if err != nil {
			return store.Record{}, s.fail(op, err)
		}
		if !found {
			return store.Record{}, kit.Wrap(op, store.ErrNotFound)
		}
		if e.kind != kindValue {
			return e.record(name, time.Time{}), kit.Wrap(op, store.ErrNotHeld)
		}
		now, err := s.serverNow(ctx)
		if err != nil {
			return store.Record{}, s.fail(op, err)
		}
		rec := e.record(name, now)
		_, err = s.publish(ctx, key, value{Holder: rec.Holder, Token: rec.Token, Event: "force-released"}, e.rev, 0, true)
		if isConflict(err) {
			continue
		}
		if err != nil {
			return store.Record{}, s.fail(op, err)
		}
		return rec, nil
	}
	return store.Record{}, kit.Errorf(op, "the key changed under %d compare-and-set attempts in a row; outcome unknown", maxConflicts)
}

// List returns the record of every key in the bucket, ordered by name.
func (s *Store) List(ctx context.Context) ([]store.Record, error) {
	op := "list"
	if err := s.life.Check(ctx); err != nil {
		return nil, kit.Wrap(op, err)
	}
	si, err := s.info(ctx, true)
	if err != nil {
		return nil, s.fail(op, err)
	}
	var names []string
	for subj := range si.State.Subjects {
		name := nameOf(strings.TrimPrefix(subj, s.pre))
		if store.ValidateName(name) == nil {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	out := make([]store.Record, 0, len(names))
	for _, name := range names {
		e, found, err := s.last(ctx, keyOf(name))
		if err != nil {
			return nil, s.fail(op, err)
		}
		if found {
			out = append(out, e.record(name, si.TimeStamp))
		}
	}
	return out, nil
}

// WatchesGrants implements store.GrantWatcher: a grant writes the name's key,
// which the KV watch reports as it reports a release.
func (s *Store) WatchesGrants() bool { return true }

// Watch wakes on every message stored on name's key after the call:
// grants, renewals, releases, and the server's expiry markers; and, once
// this handle has opened the fair queues' bucket (its first Enqueue), when
// a place leaves name's queue (a dequeue's leave signal, or the server's
// expiry marker of a place), but not when one is written or refreshed. It
// is a JetStream ordered consumer (the KV watch) of the lease's key, and
// one of the queue's keys, delivering headers only, which follow the
// server through reconnects by themselves and resume after the last
// message they delivered, so a change while disconnected is delivered on
// resumption.
func (s *Store) Watch(ctx context.Context, name string) (<-chan struct{}, error) {
	if err := kit.CheckName("watch", name); err != nil {
		return nil, err
	}
	op := "watch " + name
	if err := s.life.Check(ctx); err != nil {
		return nil, kit.Wrap(op, err)
	}
	wctx, cancel := context.WithCancel(ctx)
	fail := func(err error) error {
		cancel()
		if ctx.Err() != nil {
			return s.fail(op, ctx.Err())
		}
		return s.fail(op, err)
	}
	// The queue's watch, made at the same time as the lease's (each is a
	// request to the server): none when this handle has no queue open, and
	// its channel then nil (never ready).
	s.queueMu.Lock()
	q, qkv := s.queue, s.queueKV
	s.queueMu.Unlock()
	var qw jetstream.KeyWatcher
	var qerr error
	queueMade := make(chan struct{})
	if qkv == nil {
		close(queueMade)
	} else {
		go func() {
			defer close(queueMade)
			qw, qerr = qkv.WatchFiltered(wctx, []string{leaveKey(name), queueFilter(name)}, jetstream.UpdatesOnly(), jetstream.MetaOnly())
		}()
	}
	w, err := s.kv.Watch(wctx, keyOf(name), jetstream.UpdatesOnly(), jetstream.MetaOnly())
	<-queueMade
	if err == nil && qerr != nil {
		w.Stop()
		err = qerr
	}
	if err != nil {
		if qw != nil {
			qw.Stop()
		}
		return nil, fail(err)
	}
	var queueUpdates <-chan jetstream.KeyValueEntry
	if qw != nil {
		queueUpdates = qw.Updates()
	}
	ch := make(chan struct{}, 1)
	wake := func() {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	go func() {
		defer close(ch)
		defer cancel()
		defer w.Stop()
		if qw != nil {
			defer qw.Stop()
		}
		for {
			select {
			case e, ok := <-w.Updates():
				if !ok {
					return
				}
				if e == nil {
					continue
				}
				s.see(e.Revision())
				wake()
			case e, ok := <-queueUpdates:
				if !ok {
					return
				}
				if e == nil {
					continue
				}
				// A listing of the queue after this wake-up must show
				// what it delivered (queue.go).
				q.see(e.Revision())
				if e.Key() != leaveKey(name) && e.Operation() == jetstream.KeyValuePut {
					continue // a place written or refreshed: nobody moved up
				}
				wake()
			case <-wctx.Done():
				return
			case <-s.life.Done():
				return
			}
		}
	}()
	return ch, nil
}

// Close closes the connection if the store opened it. It releases no lease.
func (s *Store) Close() error {
	return s.life.Close(func() error {
		s.batches.close()
		if s.own {
			s.nc.Close()
		}
		return nil
	})
}

// Bucket returns the name of the store's bucket.
func (s *Store) Bucket() string { return s.bucket }

var (
	_ store.Store         = (*Store)(nil)
	_ store.Watcher       = (*Store)(nil)
	_ store.Lister        = (*Store)(nil)
	_ store.ForceReleaser = (*Store)(nil)
	_ store.Limiter       = (*Store)(nil)
)
