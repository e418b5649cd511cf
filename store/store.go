// Package store is the contract between leasehold and a lease store.
//
// It plays the part database/sql/driver plays for database/sql: users of
// leasehold see concrete types (an Elector, a Lock, a fence) and never call a
// Store directly; store authors implement the small [Store] interface below,
// and run the conformance suite in package storetest against a real server.
// Validation, retries, jitter, timing and logging live once, above the store.
//
// Every call is stateless and names its term explicitly: a [Term] is
// (lease name, holder, token), and Renew and Release act on exactly that term
// or on nothing. Durations cross the contract, never absolute times: the store
// judges expiry on its own clock and reports the time remaining.
//
// # Errors
//
// Each method documents the errors it may return that have a definite meaning:
// [ErrHeld], [ErrNotHeld], [ErrNotFound], [ErrClosed], and [ErrInvalid] for
// bad input. Any other error (a timeout, a dropped connection, a cancelled
// context) means "outcome unknown": the write may or may not have happened.
// Callers treat an Acquire whose outcome is unknown as possibly granted.
package store

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// The definite answers a store gives. Implementations return them (possibly
// wrapped, checked with errors.Is) and nothing else for these cases.
var (
	// ErrHeld: Acquire found another live term. The returned Record is that term.
	ErrHeld = errors.New("leasehold: lease held by another holder")
	// ErrNotHeld: Renew or Release named a term that is not the live term:
	// it expired, was released, or a newer term replaced it. Nothing was changed.
	ErrNotHeld = errors.New("leasehold: lease not held by this term")
	// ErrNotFound: Get found no record: the lease was never granted.
	ErrNotFound = errors.New("leasehold: lease not found")
	// ErrClosed: the store was closed. Nothing was changed.
	ErrClosed = errors.New("leasehold: store closed")
	// ErrInvalid: an argument broke the rules below (name, holder, TTL,
	// metadata). Nothing was changed. The wrapped message names what was wrong.
	ErrInvalid = errors.New("leasehold: invalid argument")
	// ErrQueued: UnqueuedAcquirer.AcquireUnqueued found waiters queued for
	// the lease, or could not check. Nothing was granted or changed.
	ErrQueued = errors.New("leasehold: waiters are queued for the lease")
)

// Limits every store accepts, and every caller is held to by [ValidateName],
// [ValidateHolder] and [ValidateMetadata]. They are small on purpose: they fit
// a Kubernetes object name, a Redis key, an etcd key and a SQL text column.
const (
	// MaxNameLen is the longest lease name, in bytes.
	MaxNameLen = 128
	// MaxHolderLen is the longest holder identity, in bytes.
	MaxHolderLen = 253
	// MaxMetadataLen is the longest holder metadata, in bytes.
	MaxMetadataLen = 1024
)

// Term names one grant of a lease: the lease, the holder it was granted to,
// and the fencing token of that grant. Renew and Release act on a Term and on
// nothing else, so a late call from an old term cannot touch a newer one.
type Term struct {
	Name   string
	Holder string
	// Token is the fencing token. It is at least 1 and strictly greater than
	// every token granted for Name before, on every store. (A record of a
	// holder that is not a leasehold client, such as a peer library's lock on
	// the same Redis key, may show token 0: it never came from a grant.)
	Token int64
}

func (t Term) String() string {
	return fmt.Sprintf("%s/%s#%d", t.Name, t.Holder, t.Token)
}

// Record is what a store knows of a lease.
type Record struct {
	Term
	// Remaining is the time left before the term expires, as judged by the
	// store's clock at the moment the store answered. It is zero or negative
	// when the term has expired or was released.
	Remaining time.Duration
	// TTL is the duration the term was last granted or renewed for.
	TTL time.Duration
	// Metadata is optional, opaque holder data (such as the leader's address),
	// set by Acquire and kept by Renew.
	Metadata string
}

// Live reports whether the record is a term that has not expired and was not
// released. A record with an empty Holder is free; its Token is still the last
// token granted, and the next grant gets a higher one.
func (r Record) Live() bool { return r.Holder != "" && r.Remaining > 0 }

// Store is a lease store. Implementations are safe for concurrent use by
// multiple goroutines, and many Store values (in one process or many) may share
// the same underlying data.
type Store interface {
	// Acquire grants the lease name to holder for ttl if it is free, expired,
	// or live but held by this same holder. The grant is a new term whose token
	// is strictly greater than every token granted before for name (previous
	// token + 1 where the store keeps a counter). A live term of the same holder
	// is replaced by the new term: this is how a caller whose earlier Acquire
	// answer was lost gets a term it knows.
	//
	// The returned Record's Remaining is the time the new term has left on
	// the store's clock when it answered, at most ttl. A store may grant
	// less than ttl (etcd backing the term with an etcd lease it already
	// holds, without a keep-alive), but at least half of it; the term must
	// then live at least Remaining. The core counts Remaining from the
	// request's send time on its own monotonic clock, never from the answer:
	// a grant short of ttl shortens the holder's trust by the shortfall.
	//
	// If another holder's term is live, Acquire changes nothing and returns
	// that term's Record with an error matching ErrHeld.
	// It returns ErrInvalid for a bad name, holder, ttl or metadata.
	Acquire(ctx context.Context, name, holder string, ttl time.Duration, metadata string) (Record, error)

	// Renew extends exactly the term t, if it is live, to expire ttl from now on
	// the store's clock. The token and metadata are kept. If t is not the live
	// term (expired, released, or replaced), Renew changes nothing and returns
	// an error matching ErrNotHeld. An expired term is never revived.
	Renew(ctx context.Context, t Term, ttl time.Duration) (Record, error)

	// Release ends exactly the term t early, if it is live. The token counter
	// survives: the next grant still gets a higher token. If t is not the live
	// term, Release changes nothing and returns an error matching ErrNotHeld.
	Release(ctx context.Context, t Term) error

	// Get returns the current record of name: the live term, or the last term
	// (expired or released, with an empty Holder or Remaining <= 0) with the
	// last token granted. It returns ErrNotFound if name was never granted,
	// and never once it was (a scheduled job's period claim relies on it).
	Get(ctx context.Context, name string) (Record, error)

	// Close releases the store's own resources (connections, watchers). It does
	// not release any lease. It is idempotent; calls after Close return ErrClosed.
	Close() error
}

// Watcher is an optional capability of a Store: it pushes changes so that a
// waiting candidate wakes as soon as a lease is released or taken over,
// instead of at its next poll. Callers find it by type assertion and fall back
// to polling without it.
//
// Expiry of a crashed holder's term is usually not an event a store can push;
// callers wake for it on their own timer, set from Record.Remaining.
type Watcher interface {
	// Watch returns a channel that receives a value (coalesced: at most one
	// pending) soon after the named lease may have changed. The store closes
	// the channel when ctx ends or when the watch breaks for good; the caller
	// then polls and may call Watch again. A store that restores a broken
	// watch by itself may keep the channel open instead, provided it sends a
	// value once the watch is restored. A spurious wake-up is allowed; a
	// missed change is not, while the channel is open. Callers subscribe only
	// after an acquire was refused, then try once more at once.
	Watch(ctx context.Context, name string) (<-chan struct{}, error)
}

// GrantWatcher is an optional capability of a Watcher whose watch also wakes
// on every grant of the name, not only on its releases (memstore, etcd,
// PostgreSQL, NATS, MySQL's poller; Redis publishes releases only). The
// holder of a lease uses it to learn of a hand-over request (a grant of
// NAME.handover) from the watch alone, instead of reading the request name
// once per renew interval. A wrapper that may drop events (a fault injector)
// must not report true.
type GrantWatcher interface {
	Watcher
	// WatchesGrants reports whether Watch's channel wakes soon after every
	// grant of the watched name (an Acquire of a free, released, expired or
	// never granted name, and a Transfer), as it does after a release.
	WatchesGrants() bool
}

// WatchLagger is an optional capability of a Watcher that learns of a change
// made through another handle (another process) only some time after it: a
// poller (MySQL). After a Lock releases a contended lease it waits at least
// that long before it tries again, so that waiters elsewhere, who learn of
// the release only at their next poll, are not beaten by the releaser turn
// after turn. A watch that is pushed to its watchers does not implement it.
type WatchLagger interface {
	Watcher
	// WatchLag is the longest a watch through another handle may take to
	// wake after a change; 0 if none is known.
	WatchLag() time.Duration
}

// BatchRenewer is an optional capability of a Store that holds many leases
// for one process: it renews many terms in one round trip. Each term is still
// renewed exactly as Renew would, and each answer stands alone.
type BatchRenewer interface {
	// RenewMany renews each term in terms for ttl. It returns one Record and one
	// error per term, in the same order; a per-term error is ErrNotHeld or
	// ErrInvalid. A non-nil final error means the outcome of the whole batch is
	// unknown.
	RenewMany(ctx context.Context, terms []Term, ttl time.Duration) ([]Record, []error, error)
}

// ValidateName checks a lease name: 1 to MaxNameLen bytes of ASCII letters,
// digits, '-', '_', '.', and '/', not starting with '/' or '.'. The set is
// what every store can use as a key, a row id and part of an object name.
func ValidateName(name string) error {
	if name == "" {
		return fmt.Errorf("%w: lease name is empty", ErrInvalid)
	}
	if len(name) > MaxNameLen {
		return fmt.Errorf("%w: lease name is %d bytes, the limit is %d", ErrInvalid, len(name), MaxNameLen)
	}
	if name[0] == '/' || name[0] == '.' {
		return fmt.Errorf("%w: lease name %q starts with %q", ErrInvalid, name, name[0])
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '-', c == '_', c == '.', c == '/':
		default:
			return fmt.Errorf("%w: lease name %q has %q at byte %d; allowed are letters, digits, '-', '_', '.', '/'", ErrInvalid, name, c, i)
		}
	}
	return nil
}

// ValidateHolder checks a holder identity: 1 to MaxHolderLen bytes of
// printable ASCII without spaces.
func ValidateHolder(holder string) error {
	if holder == "" {
		return fmt.Errorf("%w: holder identity is empty", ErrInvalid)
	}
	if len(holder) > MaxHolderLen {
		return fmt.Errorf("%w: holder identity is %d bytes, the limit is %d", ErrInvalid, len(holder), MaxHolderLen)
	}
	for i := 0; i < len(holder); i++ {
		if c := holder[i]; c <= ' ' || c > '~' {
			return fmt.Errorf("%w: holder identity %q has byte %#x at %d; allowed is printable ASCII without spaces", ErrInvalid, holder, c, i)
		}
	}
	return nil
}

// ValidateMetadata checks holder metadata: at most MaxMetadataLen bytes.
func ValidateMetadata(metadata string) error {
	if len(metadata) > MaxMetadataLen {
		return fmt.Errorf("%w: metadata is %d bytes, the limit is %d", ErrInvalid, len(metadata), MaxMetadataLen)
	}
	return nil
}

// ValidateTTL checks a lease duration against the store's smallest
// granularity: it must be positive and at least min.
func ValidateTTL(ttl, min time.Duration) error {
	if ttl <= 0 {
		return fmt.Errorf("%w: ttl %v is not positive", ErrInvalid, ttl)
	}
	if ttl < min {
		return fmt.Errorf("%w: ttl %v is below this store's minimum %v", ErrInvalid, ttl, min)
	}
	return nil
}

// ValidateTerm checks the name and holder of a term and that its token is at
// least 1.
func ValidateTerm(t Term) error {
	if err := ValidateName(t.Name); err != nil {
		return err
	}
	if err := ValidateHolder(t.Holder); err != nil {
		return err
	}
	if t.Token < 1 {
		return fmt.Errorf("%w: token %d is below 1", ErrInvalid, t.Token)
	}
	return nil
}

// ValidateAcquire checks the arguments of Acquire.
func ValidateAcquire(name, holder string, ttl, minTTL time.Duration, metadata string) error {
	if err := ValidateName(name); err != nil {
		return err
	}
	if err := ValidateHolder(holder); err != nil {
		return err
	}
	if err := ValidateTTL(ttl, minTTL); err != nil {
		return err
	}
	return ValidateMetadata(metadata)
}

// Lister is an optional capability: List returns the record of every lease
// the store knows (live or not), ordered by name. `leasehold status` uses it.
type Lister interface {
	List(ctx context.Context) ([]Record, error)
}

// ForceReleaser is an optional capability for operators: ForceRelease ends
// whatever term of name is live, whoever holds it, and returns the record as
// it was. The token counter is kept, so the next grant still gets a higher
// token; the evicted holder's renewals get ErrNotHeld. ErrNotFound if name was
// never granted; ErrNotHeld if no term was live.
type ForceReleaser interface {
	ForceRelease(ctx context.Context, name string) (Record, error)
}

// Migrator is an optional capability of stores with a schema (the SQL
// stores): Migrate creates what the store needs (the lease table) if it is
// missing. It is idempotent and changes no lease.
type Migrator interface {
	Migrate(ctx context.Context) error
}

// MigrationChecker is an optional capability of a Migrator whose schema an
// earlier version, or a role that may not change it, can leave behind this
// version's (PostgreSQL without its lease functions sends its statements
// itself; MySQL without its queue tables has no fair queue).
// MigrationCurrent reports, changing nothing and taking no lock, whether
// Migrate would find nothing to do; `leasehold doctor` says when it would.
type MigrationChecker interface {
	Migrator
	MigrationCurrent(ctx context.Context) (bool, error)
}

// HistoryEntry is one past change of a lease, for display.
type HistoryEntry struct {
	Term
	// Event is "acquired", "released", "expired-takeover" or "force-released"
	// (stores may record fewer kinds; they document which).
	Event string
	// At is the store's wall-clock time of the change, for display only:
	// nothing in leasehold subtracts it from another clock.
	At       time.Time
	Metadata string
}

// Historian is an optional capability: History returns the most recent
// changes of name, newest first, at most limit of them.
type Historian interface {
	History(ctx context.Context, name string, limit int) ([]HistoryEntry, error)
}

// Limits are a store's bounds on timings. The elector, the lock and the keeper
// check their Timings against them when they are built, so that bad timings are
// refused with the rule that failed instead of being accepted and then broken
// in operation.
type Limits struct {
	// MinLeaseDuration is the shortest lease the store keeps honestly (its TTL
	// granularity). Acquire refuses a shorter ttl with ErrInvalid.
	MinLeaseDuration time.Duration
	// TimeResolution is the coarsest resolution at which any reader of the
	// store's records (this store, or a peer client that shares them, such as
	// client-go on a Kubernetes Lease, whose renewTime comparison sees whole
	// seconds) can tell one renewal from the next. A reader may date a term
	// up to TimeResolution earlier than it was renewed, so the holder's margin
	// LeaseDuration - RenewDeadline must exceed it. Zero: exact.
	TimeResolution time.Duration
}

// Limiter is an optional capability: Limits reports the store's bounds on
// timings. A store without it is taken to accept any positive ttl at exact
// resolution; its Acquire still refuses a ttl it cannot keep.
type Limiter interface {
	Limits() Limits
}

// Queuer is an optional capability of a Store: a first-come, first-served
// queue of waiters per lease name, so that a fair Lock or Elector
// (leasehold.Config.Fair) hands a released lease to the waiter that came
// first and to nobody else, and no waiter starves. Callers find it by type
// assertion; a store without it cannot serve a fair Lock (NewLock says so).
//
// The queue only orders who tries: a place in it grants nothing, and
// Renew and Release do not look at it. Tokens, expiry and every other rule
// of the contract are unchanged. A waiter first in the queue still takes the
// lease with Acquire, which refuses it while another term is live. A store
// whose queue is also its peers' (etcd: the concurrency package's, which
// `etcdctl lock` waits in) may rank a place as those peers do, so that its
// Acquire refuses other holders while a place is ahead of them; the store
// says so.
//
// A store whose queue is its lock recipe's, in which the lowest
// contender holds (ZooKeeper), may count the lowest as the holder even
// when it is a place that has not taken the lease yet (Get shows it as
// the holder there), so that Enqueue tells the place right behind it that
// it is first; the store says so.
//
// A place is named by (name, holder). It expires ttl after it was last
// written, on the store's clock, so that a waiter that died does not block
// those behind it for longer than ttl. (A store may instead tie a place to
// the session of the handle that wrote it, ending it at most ttl after the
// process dies or is cut off, and say so: ZooKeeper.)
type Queuer interface {
	// Enqueue writes holder's place at the back of name's queue if it has
	// none, or refreshes its expiry to ttl from now if it has one (keeping
	// its position). It returns how many live places are ahead of it: zero
	// means holder is first. Places that expired are dropped. A store that
	// implements Watcher also wakes the watchers of name when a place
	// leaves the queue (Dequeue, or an expiry it notices), at least on the
	// handle through which the place behind it last called Enqueue, so
	// that the next waiter learns at once that it moved up.
	// A refresh may write nothing when it comes less than a tenth of ttl
	// after the handle's own last write of the place with the same ttl (so
	// that wake-ups under contention do not each write): the place then
	// lives at least nine tenths of ttl from the call (Kubernetes, whose
	// places are judged expired by observers, does this). The core
	// refreshes every RetryPeriod, normally far inside that.
	// It returns ErrInvalid for a bad name, holder or ttl.
	Enqueue(ctx context.Context, name, holder string, ttl time.Duration) (ahead int, err error)

	// Dequeue removes holder's place from name's queue, if it has one. It
	// is idempotent: removing a place that is not there is not an error.
	Dequeue(ctx context.Context, name, holder string) error
}

// UnqueuedAcquirer is an optional capability of a Queuer: an Acquire that
// grants only while the lease's queue is empty. A fair Lock or Elector
// whose lease nobody else wants then takes it in one request, as an unfair
// one does, and writes no place; a fair cycle otherwise costs a place
// written and removed besides the grant and the release.
//
// Fairness is kept: nobody takes the lease ahead of a queued waiter. A
// caller refused with ErrQueued or ErrHeld queues as it would have
// without this capability.
type UnqueuedAcquirer interface {
	// AcquireUnqueued is Acquire with one more condition, checked in the
	// same atomic step as the grant: while name's queue holds a live place
	// (of any holder) it grants nothing, changes nothing, and returns an
	// error matching ErrQueued. Its other answers are Acquire's.
	//
	// A store whose queue is apart from its leases (NATS: another stream)
	// may instead check in a read sent after the call began and before a
	// grant that is conditional on the lease being as that call's own read
	// found it, provided the read is as of its moment (every place whose
	// Enqueue returned before it is in it). A place that queued before the
	// call is then never overtaken; one written while the call runs may
	// be, once, as a waiter that came at the same moment may be.
	//
	// A store (or a wrapper around one) that can check the queue in
	// neither way returns ErrQueued without sending anything, and its
	// caller queues.
	AcquireUnqueued(ctx context.Context, name, holder string, ttl time.Duration, metadata string) (Record, error)
}

// MetadataQueuer is an optional capability of a Queuer whose place becomes
// the term itself (ZooKeeper: a place is a contender node, and the lowest
// holds): Enqueue, with the metadata the term will carry, written with the
// place so that its grant needs no write. The core calls it instead of
// Enqueue when the store has it, with the metadata its Acquire names. A
// grant still carries the metadata its Acquire names: a place written with
// other metadata is not made the term as it is.
type MetadataQueuer interface {
	EnqueueWithMetadata(ctx context.Context, name, holder string, ttl time.Duration, metadata string) (ahead int, err error)
}

// EnqueueWithMetadata writes or refreshes holder's place in q with the
// metadata its term will carry, if q is a MetadataQueuer, else with
// q.Enqueue: the one place where that choice is made (the core, and the
// wrappers that forward the capability).
func EnqueueWithMetadata(ctx context.Context, q Queuer, name, holder string, ttl time.Duration, metadata string) (ahead int, err error) {
	if mq, ok := q.(MetadataQueuer); ok {
		return mq.EnqueueWithMetadata(ctx, name, holder, ttl, metadata)
	}
	return q.Enqueue(ctx, name, holder, ttl)
}

// QueueReporter is implemented by a store that wraps another (such as
// faultstore): it has the Queuer methods whatever it wraps, and Queues
// reports whether the wrapped store really queues. AsQueuer consults it.
type QueueReporter interface {
	Queues() bool
}

// AsQueuer returns st's Queuer if st has one that works: st implements
// Queuer and, if it also implements QueueReporter, Queues reports true.
func AsQueuer(st Store) (Queuer, bool) {
	q, ok := st.(Queuer)
	if !ok {
		return nil, false
	}
	if r, ok := st.(QueueReporter); ok && !r.Queues() {
		return nil, false
	}
	return q, true
}
