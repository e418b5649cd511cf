package leasehold

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/leasehold/leasehold/store"
)

// A graceful hand-over, in four steps, on every store and through the plain
// store contract:
//
//  1. The requester (Handover, `leasehold handover`) writes a request as a
//     lease of its own, named HandoverRequestName(name), held by the
//     requester for Timeout, its metadata naming the term asked to step
//     down, the successor and the preference window. The store's clock
//     expires it: a request to a dead holder blocks nothing, and the lease
//     itself expires on its own as it always would.
//  2. The holder's Elector learns of that request from the store's watch
//     on the request name where the watch wakes on grants as well as
//     releases (a store.GrantWatcher: memstore, etcd, PostgreSQL, NATS,
//     MySQL's poller): it reads the request name when it starts leading and
//     then only when the watch wakes, no read per renewal. On other stores
//     (Redis publishes releases only; ZooKeeper and Kubernetes do not
//     promise grant wake-ups) it reads the request name once per
//     RenewInterval while it leads, and at once when the watch wakes. A live
//     request naming its exact term cancels the work's context with
//     ErrHandedOver. A request for another term is ignored.
//  3. The Elector waits for the work to return (for `leasehold run`: the
//     command is signalled and waited for, as on shutdown), then ends its
//     term. With a successor named, on a store.Transferer, that end is one
//     conditional write that also grants the successor a reservation term of
//     PreferFor on the store's clock: only the successor's Acquire can replace
//     it; everyone else is refused until it expires. Without a Transferer the
//     term is released, and any waiting candidate may win (no reservation is
//     written after the release: an Acquire in the successor's name would
//     replace a term the successor had meanwhile won by itself).
//  4. The old holder stays out of the contest for PreferFor and one
//     RetryPeriod (so that, if the successor does not come, the nodes that
//     waited come first), then contends again as usual.
//
// Tokens rise at each step (the reservation is a grant), the old term ends
// in the store before any later term starts, and it ends only after the work
// returned.

// ErrHandedOver is the cause of a term's context when the term was ended on
// a hand-over request: the work should wind down as on shutdown. After the
// work returns, the Elector ends the term, preferring the named successor.
var ErrHandedOver = errors.New("leasehold: lease handed over on request")

// Errors of Handover.
var (
	// ErrHandoverTimeout: the holder did not end its term within Timeout. It
	// may be dead (its term then expires on its own), not an Elector (a Lock
	// or Keeper does not watch for requests), or its work slow to stop.
	ErrHandoverTimeout = errors.New("leasehold: the holder did not step down in time")
	// ErrHandoverPending: another hand-over request of the lease is live.
	ErrHandoverPending = errors.New("leasehold: another hand-over request is pending")
)

// Defaults of HandoverOptions.
const (
	DefaultHandoverPreferFor = 5 * time.Second
	DefaultHandoverTimeout   = 30 * time.Second
)

// handoverSuffix makes the name of a lease's hand-over request. A lease name
// ending in it is the request of the lease named by the rest: do not use
// such a name for a lease of your own.
const handoverSuffix = ".handover"

// reservedPrefix begins the metadata of a successor's reservation term.
const reservedPrefix = "leasehold-handover-reserved from="

// HandoverRequestName is the name of the lease that carries hand-over
// requests for the lease name. It refuses names too long to take the suffix.
func HandoverRequestName(name string) (string, error) {
	if err := store.ValidateName(name); err != nil {
		return "", err
	}
	req := name + handoverSuffix
	if len(req) > store.MaxNameLen {
		return "", fmt.Errorf("%w: lease name %q is too long for a hand-over request (%d bytes, the limit is %d)",
			store.ErrInvalid, name, len(name), store.MaxNameLen-len(handoverSuffix))
	}
	return req, nil
}

// IsReservation reports whether rec is a successor's reservation written by a
// hand-over (no work runs under it; the successor replaces it at once).
func IsReservation(rec store.Record) bool { return strings.HasPrefix(rec.Metadata, reservedPrefix) }

// handoverRequest is what a request names.
type handoverRequest struct {
	token     int64         // the term asked to step down
	to        string        // the successor, or ""
	preferFor time.Duration // the reservation's length
}

const requestVersion = "leasehold-handover/v1"

func (r handoverRequest) encode() string {
	to := r.to
	if to == "" {
		to = "-"
	}
	return fmt.Sprintf("%s token=%d to=%s prefer=%s", requestVersion, r.token, to, r.preferFor)
}

// parseHandoverRequest reads a request's metadata; anything else is an error
// and the request is ignored.
func parseHandoverRequest(s string) (handoverRequest, error) {
	f := strings.Fields(s)
	if len(f) != 4 || f[0] != requestVersion {
		return handoverRequest{}, fmt.Errorf("leasehold: not a hand-over request: %q", s)
	}
	var r handoverRequest
	for _, kv := range f[1:] {
		k, v, _ := strings.Cut(kv, "=")
		var err error
		switch k {
		case "token":
			r.token, err = strconv.ParseInt(v, 10, 64)
		case "to":
			if v != "-" {
				r.to, err = v, store.ValidateHolder(v)
			}
		case "prefer":
			r.preferFor, err = time.ParseDuration(v)
		default:
			err = fmt.Errorf("unknown field %q", k)
		}
		if err != nil {
			return handoverRequest{}, fmt.Errorf("leasehold: bad hand-over request %q: %v", s, err)
		}
	}
	if r.token < 1 || r.preferFor <= 0 || r.preferFor > MaxLeaseDuration {
		return handoverRequest{}, fmt.Errorf("leasehold: bad hand-over request %q", s)
	}
	return r, nil
}

// HandoverOptions configure Handover.
type HandoverOptions struct {
	// To is the successor's holder identity (the full identity, with its
	// random suffix, as Elector.Identity and `leasehold run`'s log show it).
	// Empty: no successor is preferred; the holder releases and stays out
	// of the contest for PreferFor.
	To string
	// PreferFor is how long the successor is preferred (its reservation, on
	// the store's clock), and how long the old holder stays out of the
	// contest. Default DefaultHandoverPreferFor; raised to the store's
	// shortest lease if below it.
	PreferFor time.Duration
	// Timeout bounds the whole hand-over: the request expires after it on
	// the store's clock, and Handover gives up (ErrHandoverTimeout) after it
	// on Clock. Default DefaultHandoverTimeout.
	Timeout time.Duration
	// PollInterval is how often Handover reads the lease while it waits
	// (a store.Watcher wakes it sooner). Default 250 ms.
	PollInterval time.Duration
	// Clock is the requester's clock; nil means SystemClock().
	Clock Clock
}

// HandoverResult says what a hand-over did.
type HandoverResult struct {
	// From is the term that was asked to step down.
	From store.Term
	// Ended is how long after the request the requester saw From end.
	Ended time.Duration
	// Next is the record the requester saw last: the successor's own term,
	// its reservation, another holder's term, or a free lease.
	Next store.Record
	// TookOver is true when the named successor was seen holding a term of
	// its own (not the reservation), TookOverAfter after the request.
	TookOver      bool
	TookOverAfter time.Duration
}

// Handover asks the holder of the lease name on st to step down, waits for
// its term to end and, with opts.To set, for the successor to take the lease
// (within opts.PreferFor). Only an Elector (and `leasehold run`) answers
// requests: it drains its work, then ends its term (see ErrHandedOver).
//
// It returns ErrNotFound or ErrNotHeld (wrapped) when nobody holds the lease,
// ErrHandoverPending when another request is live, ErrHandoverTimeout when
// the term did not end within opts.Timeout, and the store's error otherwise.
// When the successor does not come, the result says so (TookOver false); it
// is not an error: the reservation expires on the store's clock.
//
// This is not `release --force`: the holder ends its own term, after its work
// returned; nobody is evicted while working.
func Handover(ctx context.Context, st store.Store, name string, opts HandoverOptions) (HandoverResult, error) {
	if st == nil {
		return HandoverResult{}, fmt.Errorf("%w: store is nil", ErrInvalidConfig)
	}
	reqName, err := HandoverRequestName(name)
	if err != nil {
		return HandoverResult{}, fmt.Errorf("leasehold: handover: %w", err)
	}
	if opts.To != "" {
		if err := store.ValidateHolder(opts.To); err != nil {
			return HandoverResult{}, fmt.Errorf("leasehold: handover: successor: %w", err)
		}
	}
	if opts.PreferFor == 0 {
		opts.PreferFor = DefaultHandoverPreferFor
	}
	if opts.Timeout == 0 {
		opts.Timeout = DefaultHandoverTimeout
	}
	if opts.PollInterval == 0 {
		opts.PollInterval = 250 * time.Millisecond
	}
	switch {
	case opts.PreferFor < 0 || opts.PreferFor > MaxLeaseDuration:
		return HandoverResult{}, fmt.Errorf("%w: handover: PreferFor %v is not in (0, %v]", ErrInvalidConfig, opts.PreferFor, MaxLeaseDuration)
	case opts.Timeout < 0 || opts.Timeout > MaxLeaseDuration:
		return HandoverResult{}, fmt.Errorf("%w: handover: Timeout %v is not in (0, %v]", ErrInvalidConfig, opts.Timeout, MaxLeaseDuration)
	case opts.PollInterval < 0:
		return HandoverResult{}, fmt.Errorf("%w: handover: PollInterval %v is negative", ErrInvalidConfig, opts.PollInterval)
	}
	if lim, ok := st.(store.Limiter); ok {
		if m := lim.Limits().MinLeaseDuration; opts.PreferFor < m {
			opts.PreferFor = m
		}
		if m := lim.Limits().MinLeaseDuration; opts.Timeout < m {
			return HandoverResult{}, fmt.Errorf("%w: handover: Timeout %v is below this store's shortest lease %v", ErrInvalidConfig, opts.Timeout, m)
		}
	}
	clock := opts.Clock
	if clock == nil {
		clock = SystemClock()
	}

	rec, err := st.Get(ctx, name)
	if err != nil {
		return HandoverResult{}, fmt.Errorf("leasehold: handover %q: %w", name, err)
	}
	if !rec.Live() || IsReservation(rec) {
		return HandoverResult{Next: rec}, fmt.Errorf("leasehold: handover %q: nobody holds it (last token %d): %w", name, rec.Token, store.ErrNotHeld)
	}
	if opts.To == rec.Holder {
		return HandoverResult{Next: rec}, fmt.Errorf("%w: handover %q: %s already holds it", ErrInvalidConfig, name, opts.To)
	}
	res := HandoverResult{From: rec.Term}

	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return res, fmt.Errorf("leasehold: handover: random requester identity: %w", err)
	}
	requester := "handover-" + hex.EncodeToString(b[:])
	req := handoverRequest{token: rec.Token, to: opts.To, preferFor: opts.PreferFor}
	start := clock.Now()
	deadline := start.Add(opts.Timeout)
	reqRec, err := st.Acquire(ctx, reqName, requester, opts.Timeout, req.encode())
	switch {
	case errors.Is(err, store.ErrHeld):
		return res, fmt.Errorf("leasehold: handover %q: %w (by %s, %v left)", name, ErrHandoverPending, reqRec.Holder, reqRec.Remaining)
	case err != nil:
		// Outcome unknown: the request, if written, expires on its own.
		return res, fmt.Errorf("leasehold: handover %q: write the request: %w", name, err)
	}
	defer func() {
		// The request has done its work (or timed out): withdraw it.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opts.PollInterval+time.Second)
		defer cancel()
		st.Release(rctx, reqRec.Term)
	}()

	w := newLeaseWaiter(st, name, clock, opts.PollInterval)
	defer w.stop()
	// The old term ends.
	res.Next, err = w.until(ctx, deadline, func(r store.Record) bool { return r.Token != rec.Token || !r.Live() })
	if err != nil {
		return res, fmt.Errorf("leasehold: handover %q: %s (token %d): %w", name, rec.Holder, rec.Token, err)
	}
	res.Ended = clock.Now().Sub(start)
	if opts.To == "" {
		return res, nil
	}
	// The successor takes its own term, within the preference window.
	prefDeadline := clock.Now().Add(opts.PreferFor)
	if prefDeadline.After(deadline) {
		prefDeadline = deadline
	}
	next, err := w.until(ctx, prefDeadline, func(r store.Record) bool {
		return r.Live() && !IsReservation(r) && r.Token > rec.Token
	})
	if next.Token != 0 {
		res.Next = next
	}
	switch {
	case errors.Is(err, ErrHandoverTimeout):
		return res, nil // the successor did not come: its reservation expires
	case err != nil:
		return res, fmt.Errorf("leasehold: handover %q: %w", name, err)
	}
	res.TookOver = next.Holder == opts.To
	if res.TookOver {
		res.TookOverAfter = clock.Now().Sub(start)
	}
	return res, nil
}

// leaseWaiter reads a lease until a condition holds: at each poll interval,
// and at once when a store.Watcher says it changed.
type leaseWaiter struct {
	st    store.Store
	name  string
	clock Clock
	poll  time.Duration

	wake    <-chan struct{}
	cancel  context.CancelFunc
	noWatch bool // the watch broke: poll only
}

func newLeaseWaiter(st store.Store, name string, clock Clock, poll time.Duration) *leaseWaiter {
	return &leaseWaiter{st: st, name: name, clock: clock, poll: poll, cancel: func() {}}
}

func (w *leaseWaiter) stop() { w.cancel() }

// until returns the first record for which ok holds, or the last record read
// and ErrHandoverTimeout at deadline.
func (w *leaseWaiter) until(ctx context.Context, deadline time.Time, ok func(store.Record) bool) (store.Record, error) {
	var last store.Record
	for {
		if w.wake == nil && !w.noWatch {
			if wa, isW := w.st.(store.Watcher); isW {
				wctx, cancel := context.WithCancel(ctx)
				if ch, err := wa.Watch(wctx, w.name); err == nil {
					w.wake, w.cancel = ch, cancel
				} else {
					cancel()
					w.noWatch = true
				}
			}
		}
		gctx, cancel := context.WithTimeout(ctx, w.poll+time.Second)
		rec, err := w.st.Get(gctx, w.name)
		cancel()
		if err == nil {
			last = rec
			if ok(rec) {
				return rec, nil
			}
		}
		if err := ctx.Err(); err != nil {
			return last, err
		}
		left := deadline.Sub(w.clock.Now())
		if left <= 0 {
			return last, ErrHandoverTimeout
		}
		timer := w.clock.NewTimer(min(w.poll, left))
		select {
		case <-ctx.Done():
		case <-timer.C():
		case _, open := <-w.wake:
			if !open {
				w.wake, w.noWatch = nil, true
				w.cancel()
			}
		}
		timer.Stop()
	}
}
