package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/storekit"
)

// MinTTL is the smallest TTL the store accepts. A Lease holds its duration
// in whole seconds (spec.leaseDurationSeconds), so every TTL is rounded up to
// a whole second, and Record.TTL reports the rounded value.
const MinTTL = time.Second

// kit builds the store's argument checks and invalid-argument errors.
var kit = storekit.Kit{Store: "kubernetes", MinTTL: MinTTL}

// maxConflicts bounds how often one call re-reads the Lease after losing a
// race (409 Conflict, 409 AlreadyExists). Each loss means another writer got
// in first; the re-read nearly always shows a live term, so the bound is
// only a guard against a livelock.
const maxConflicts = 10

// maxHighWaterRaces bounds how often one Acquire loses the race to raise the
// high-water mark (see raiseHighWater) before it gives up.
const maxHighWaterRaces = 100

// Config configures a Store.
type Config struct {
	// Server is the API server's URL, https://HOST[:PORT][/PATH] (client-go's
	// rest.Config.Host). Required.
	Server string
	// HTTPClient sends the requests, with the credentials and the TLS
	// settings the server wants; for a client-go rest.Config,
	// rest.HTTPClientFor(restConfig). nil means http.DefaultClient.
	HTTPClient *http.Client
	// Namespace holds the Lease objects. Required.
	Namespace string
	// QPS and Burst limit the store's requests on the client side, as
	// client-go's do: QPS requests a second on average, Burst at once. QPS 0
	// means 20 a second (Burst 40); below 0, no limit.
	QPS   float64
	Burst int
	// Now is the store's clock, used only to measure how long it has seen a
	// Lease unchanged. It must carry a monotonic reading, as time.Now does.
	// nil means time.Now.
	Now func() time.Time
}

// Store is a lease store on coordination.k8s.io/v1 Lease objects in one
// namespace. See the package documentation for how it judges expiry and
// what its tokens are.
type Store struct {
	leases *client
	ns     string
	now    func() time.Time

	// life is open or closed; its Done ends the watches, and wg waits for
	// them. A watch is added to wg under mu, and Close takes mu before it
	// waits, so that no watch is added once Close waits.
	life storekit.Lifecycle
	wg   sync.WaitGroup
	// closeIdle closes the idle connections of an HTTP client the store
	// made itself (OpenURL); nil for one it was given.
	closeIdle func()

	mu     sync.Mutex
	seen   map[string]*sighting      // by object name
	queues map[string]*queueSighting // by queue object name
	marks  map[string]*markSighting  // by high-water object name
	// watched counts this store's live watches per Lease object: while
	// one runs, the version in seen is the latest the server has sent it,
	// and Acquire starts from it (see Acquire).
	watched map[string]int
}

// sighting is what this Store has seen of one Lease object.
type sighting struct {
	_ [0]func() // not comparable: spares the binary an equality function
	// last is the latest version of the object this store read or wrote.
	last *lease
	// since is when this store first saw last's resourceVersion: when the
	// answer carrying it arrived.
	since time.Time
	// maxToken is the highest leaseTransitions this store has seen on the
	// object, so that a Lease deleted and created again does not make this
	// store hand out a token it has handed out before.
	maxToken int64
	// watchGen changes whenever a watch of this store on the object starts
	// or ends, or the object is found gone, and each change drops the
	// reservation: reserved, a token this store raised the high-water mark
	// to while it waited (see reserveToken), 0 when none. delivered is the
	// resourceVersion a watch delivered last.
	watchGen  uint64
	delivered string
	reserved  int64
	reserving chan struct{} // closed when the reserveToken under way ends; nil: none
	// waiting: an Acquire through this store found another term live, or
	// this store queued a place for the Lease, and it has written the Lease
	// nothing since. A Watch then serves a waiter (callers subscribe after
	// a refusal, or while queued) and reserves its token; a watch that only
	// observes (the status page) writes nothing.
	waiting bool
}

// gap notes that this store may miss versions of the object from now on,
// or may have missed some: its reservation can no longer be trusted.
func (sg *sighting) gap() { sg.watchGen, sg.reserved = sg.watchGen+1, 0 }

var (
	_ store.Store         = (*Store)(nil)
	_ store.Watcher       = (*Store)(nil)
	_ store.ForceReleaser = (*Store)(nil)
	_ store.Lister        = (*Store)(nil)
	_ store.Queuer        = (*Store)(nil)
)

// New returns a Store for cfg. It makes no request.
func New(cfg Config) (*Store, error) {
	if cfg.Server == "" {
		return nil, kit.Invalid("new", "Config.Server is empty")
	}
	if cfg.Namespace == "" {
		return nil, kit.Invalid("new", "Config.Namespace is empty")
	}
	if !isDNSLabel(cfg.Namespace) {
		return nil, kit.Invalid("new", "Config.Namespace %q is not a namespace name (a DNS label: at most 63 lower-case letters, digits and '-', starting and ending with a letter or digit)", cfg.Namespace)
	}
	qps, burst := cfg.QPS, cfg.Burst
	if qps == 0 {
		qps, burst = 20, 40
	}
	if burst <= 0 {
		burst = max(1, int(2*qps))
	}
	c, err := newClient(cfg.Server, cfg.HTTPClient, cfg.Namespace, qps, burst)
	if err != nil {
		return nil, err
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	return &Store{
		leases:  c,
		ns:      cfg.Namespace,
		now:     now,
		seen:    map[string]*sighting{},
		queues:  map[string]*queueSighting{},
		marks:   map[string]*markSighting{},
		watched: map[string]int{},
	}, nil
}

// Namespace is the namespace of the store's Lease objects.
func (s *Store) Namespace() string { return s.ns }

// object maps name to its object name; see ObjectName.
type object struct {
	_ [0]func() // not comparable: spares the binary an equality function

	name     string // the lease name
	obj      string // the Lease object name
	verbatim bool
}

func objectFor(name string) (object, error) {
	obj, verbatim, err := ObjectName(name)
	if err != nil {
		return object{}, err
	}
	return object{name: name, obj: obj, verbatim: verbatim}, nil
}

// claim checks that l belongs to lease o.name and not to another lease
// whose name maps to the same object.
func (o object) claim(l *lease) error {
	owner, ok := l.Metadata.Annotations[AnnotationName]
	switch {
	case isHighWater(l):
		return fmt.Errorf("%w: lease name %q names Lease object %q, which keeps the high-water mark of Lease %q", store.ErrInvalid, o.name, o.obj, l.Metadata.Annotations[AnnotationHighWaterOf])
	case isQueue(l):
		return fmt.Errorf("%w: lease name %q names Lease object %q, which keeps the queue of Lease %q", store.ErrInvalid, o.name, o.obj, l.Metadata.Annotations[AnnotationQueueOf])
	case ok && owner != o.name:
		return fmt.Errorf("%w: lease name %q maps to Lease object %q, which belongs to lease %q", store.ErrInvalid, o.name, o.obj, owner)
	case !ok && !o.verbatim:
		return fmt.Errorf("%w: lease name %q maps to Lease object %q, which leasehold did not create for it (annotation %s missing)", store.ErrInvalid, o.name, o.obj, AnnotationName)
	}
	return nil
}

// ttlSeconds rounds ttl up to whole seconds.
func ttlSeconds(ttl time.Duration) (int32, error) {
	secs := (ttl + time.Second - 1) / time.Second
	if secs > math.MaxInt32 {
		return 0, fmt.Errorf("%w: ttl %v is beyond leaseDurationSeconds' range", store.ErrInvalid, ttl)
	}
	return int32(secs), nil
}

// setSpec sets the five fields client-go's LeaseLock writes and leaves every
// other field of sp as it was: preferredHolder and strategy (Kubernetes'
// coordinated leader election) and any field added later are not
// leasehold's to write, and every write starts from the object it read.
func setSpec(l *lease, holder string, secs int32, acquired, renewed time.Time, transitions int64) {
	t := int32(transitions)
	sp := &l.Spec
	sp.HolderIdentity = &holder
	sp.LeaseDurationSeconds = &secs
	sp.AcquireTime = &microTime{acquired}
	sp.RenewTime = &microTime{renewed}
	sp.LeaseTransitions = &t
}

// setAnnotations sets leasehold's annotations on l for a term of token with
// metadata (removing the metadata ones when metadata is empty).
func (o object) setAnnotations(l *lease, token int64, metadata string) {
	a := l.Metadata.Annotations
	if a == nil {
		a = map[string]string{}
	}
	if !o.verbatim {
		a[AnnotationName] = o.name
	}
	if metadata == "" {
		delete(a, AnnotationMetadata)
		delete(a, AnnotationMetadataToken)
	} else {
		a[AnnotationMetadata] = metadata
		a[AnnotationMetadataToken] = strconv.FormatInt(token, 10)
	}
	if len(a) == 0 {
		a = nil
	}
	l.Metadata.Annotations = a
}

// Acquire implements store.Store. The new term's token is the Lease's
// leaseTransitions plus one, at least the highest this store has seen plus
// one, and above the lease's high-water mark, which it raises to the token
// before it writes the Lease (see raiseHighWater); a new Lease starts at 1. The term is judged live, and Acquire
// refuses with store.ErrHeld, until this store has seen the Lease unchanged
// for its full duration; see the package documentation.
//
// While this store watches the Lease (a waiter woken by its watch), the
// first try starts from the version the watch delivered last instead of
// reading it, if that version is free or expired by this store's clock:
// the write is conditional on that resourceVersion, so it applies only if
// the Lease is still exactly that version, seen unchanged for as long as a
// read would have shown; a conflict sends the next try to read it. A
// refusal while this store watches also reads the high-water mark if the
// Lease's token has changed since this store last saw the mark, so that
// the grant that follows the release writes the mark without reading it.
func (s *Store) Acquire(ctx context.Context, name, holder string, ttl time.Duration, metadata string) (store.Record, error) {
	if err := s.life.Check(ctx); err != nil {
		return store.Record{}, err
	}
	if err := kit.CheckAcquire(name, holder, ttl, metadata); err != nil {
		return store.Record{}, err
	}
	o, err := objectFor(name)
	if err != nil {
		return store.Record{}, err
	}
	secs, err := ttlSeconds(ttl)
	if err != nil {
		return store.Record{}, err
	}
	fail := func(err error) (store.Record, error) {
		return store.Record{}, fmt.Errorf("leasehold/kubernetes: acquire %q: %w", name, err)
	}
	// A lost race on the high-water mark is not a conflict on the Lease:
	// under contention every contender but one loses it each round, and
	// most of them then find the Lease held. They get a larger budget.
	races := 0
	fresh := !s.watching(o.obj)
	for attempt := 0; attempt < maxConflicts+races && races < maxHighWaterRaces; attempt++ {
		if !fresh {
			fresh = true
			if cur, v, ok := s.takeable(o.obj, holder); ok {
				if err := o.claim(cur); err != nil {
					return store.Record{}, err
				}
				rec, err := s.grant(ctx, o, cur, v, holder, secs, metadata)
				if errors.Is(err, errHighWaterRaced) {
					races++
					continue
				}
				if errors.Is(err, errLeaseChanged) {
					continue
				}
				if err != nil {
					return fail(err)
				}
				return rec, nil
			}
		}
		cur, err := s.leases.get(ctx, o.obj)
		if isNotFound(err) {
			s.forget(o.obj)
			token, err := s.raiseHighWater(ctx, o, s.maxToken(o.obj)+1)
			if errors.Is(err, errHighWaterRaced) {
				races++
				continue
			}
			if err != nil {
				return fail(err)
			}
			now := s.now()
			l := new(lease)
			l.Metadata.Name, l.Metadata.Namespace = o.obj, s.ns
			setSpec(l, holder, secs, now, now, token)
			o.setAnnotations(l, token, metadata)
			created, err := s.leases.create(ctx, l)
			if isAlreadyExists(err) {
				continue // lost the race to create it: look again
			}
			if err != nil {
				return fail(err)
			}
			s.wrote(created, s.now())
			return granted(name, holder, token, secs, metadata), nil
		}
		if err != nil {
			return fail(err)
		}
		if err := o.claim(cur); err != nil {
			return store.Record{}, err
		}
		v := s.observe(cur, s.now(), false)
		if v.holder != "" && v.holder != holder && v.remaining() > 0 {
			s.markWaiting(o.obj)
			s.reserveToken(ctx, o, max(v.token, s.maxToken(o.obj)))
			return v.record(name), fmt.Errorf("leasehold/kubernetes: acquire %q: held by %s: %w", name, v.holder, store.ErrHeld)
		}
		rec, err := s.grant(ctx, o, cur, v, holder, secs, metadata)
		if errors.Is(err, errHighWaterRaced) {
			races++
			continue
		}
		if errors.Is(err, errLeaseChanged) {
			continue // lost the race: look again
		}
		if err != nil {
			return fail(err)
		}
		return rec, nil
	}
	return fail(fmt.Errorf("lost the race to write the Lease %d times in a row", maxConflicts))
}

// errLeaseChanged: the Lease is no longer the version a grant was written
// from (409 Conflict), or is gone (404). Acquire reads it again.
var errLeaseChanged = errors.New("the Lease changed")

// grant writes a new term of holder on cur, the version of the Lease seen as
// v, conditional on its resourceVersion, with the token this store reserved
// while it waited (takeReservation) or else one it first raises the
// high-water mark to.
func (s *Store) grant(ctx context.Context, o object, cur *lease, v view, holder string, secs int32, metadata string) (store.Record, error) {
	want := max(v.token, s.maxToken(o.obj)) + 1
	// A reservation under way (its watch started it) is waited for, not
	// raced: it is the raise this grant would otherwise make.
	if !s.awaitReservation(ctx, o.obj) {
		return store.Record{}, ctx.Err()
	}
	token := s.takeReservation(o.obj, cur.Metadata.ResourceVersion, want)
	if token == 0 {
		var err error
		if token, err = s.raiseHighWater(ctx, o, want); err != nil {
			return store.Record{}, err
		}
	}
	next := cur.clone()
	now := s.now()
	setSpec(next, holder, secs, now, now, token)
	o.setAnnotations(next, token, metadata)
	updated, err := s.leases.update(ctx, next)
	if isConflict(err) {
		return store.Record{}, errLeaseChanged
	}
	if isNotFound(err) {
		s.forget(o.obj)
		return store.Record{}, errLeaseChanged
	}
	if err != nil {
		return store.Record{}, err
	}
	s.wrote(updated, s.now())
	return granted(o.name, holder, token, secs, metadata), nil
}

// takeable returns the version of Lease object obj this store saw last, and
// its view, if by that version holder may take it: free, expired by this
// store's clock, or holder's own.
func (s *Store) takeable(obj, holder string) (*lease, view, bool) {
	l, elapsed := s.cached(obj, s.now())
	if l == nil {
		return nil, view{}, false
	}
	v := specView(l)
	v.elapsed = elapsed
	if v.holder != "" && v.holder != holder && v.remaining() > 0 {
		return nil, view{}, false
	}
	return l, v, true
}

// watching reports whether a watch of this store on Lease object obj runs.
func (s *Store) watching(obj string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.watched[obj] > 0
}

func granted(name, holder string, token int64, secs int32, metadata string) store.Record {
	ttl := time.Duration(secs) * time.Second
	return store.Record{
		Term:      store.Term{Name: name, Holder: holder, Token: token},
		Remaining: ttl,
		TTL:       ttl,
		Metadata:  metadata,
	}
}

// liveTerm reads the Lease of t and reports whether t is its live term. It
// tries the version this store last saw first (no request), and reads the
// object when fresh is set or nothing is cached.
func (s *Store) liveTerm(ctx context.Context, o object, t store.Term, fresh bool) (*lease, view, bool, error) {
	var cur *lease
	var v view
	if !fresh {
		now := s.now()
		if l, elapsed := s.cached(o.obj, now); l != nil {
			cur, v = l, specView(l)
			v.elapsed = elapsed
		}
	}
	if cur == nil {
		l, err := s.leases.get(ctx, o.obj)
		if isNotFound(err) {
			s.forget(o.obj)
			return nil, view{}, false, nil
		}
		if err != nil {
			return nil, view{}, false, err
		}
		if err := o.claim(l); err != nil {
			return nil, view{}, false, err
		}
		cur, v = l, s.observe(l, s.now(), false)
	}
	live := v.holder == t.Holder && v.token == t.Token && v.remaining() > 0
	return cur, v, live, nil
}

// Renew implements store.Store. It writes the same holder and token, a new
// renewTime and the new duration, conditional on the resourceVersion it
// read. A term this store has seen unchanged for its full duration is
// expired and is not renewed.
func (s *Store) Renew(ctx context.Context, t store.Term, ttl time.Duration) (store.Record, error) {
	if err := s.life.Check(ctx); err != nil {
		return store.Record{}, err
	}
	if err := kit.CheckRenew(t, ttl); err != nil {
		return store.Record{}, err
	}
	o, err := objectFor(t.Name)
	if err != nil {
		return store.Record{}, err
	}
	secs, err := ttlSeconds(ttl)
	if err != nil {
		return store.Record{}, err
	}
	fail := func(err error) (store.Record, error) {
		return store.Record{}, fmt.Errorf("leasehold/kubernetes: renew %s: %w", t, err)
	}
	var metadata string
	err = s.updateLive(ctx, o, t, func(cur *lease, v view) *lease {
		next := cur.clone()
		acquired := s.now()
		if cur.Spec.AcquireTime != nil {
			acquired = cur.Spec.AcquireTime.Time
		}
		setSpec(next, t.Holder, secs, acquired, s.now(), t.Token)
		metadata = v.metadata
		return next
	})
	if err != nil {
		return fail(err)
	}
	return granted(t.Name, t.Holder, t.Token, secs, metadata), nil
}

// updateLive writes mutate(current Lease) only while t is its live term,
// conditional on the resourceVersion read. The first try writes on the
// version this store saw last, as client-go's fast path does; the server's
// resourceVersion check decides, and a conflict sends the next try to read
// the object first. It returns store.ErrNotHeld when t is not live.
func (s *Store) updateLive(ctx context.Context, o object, t store.Term, mutate func(*lease, view) *lease) error {
	fresh := false
	for range maxConflicts {
		cur, v, live, err := s.liveTerm(ctx, o, t, fresh)
		if err != nil {
			return err
		}
		if !live {
			if !fresh && cur != nil {
				// The version this store saw last says no; read the
				// current one before answering.
				fresh = true
				continue
			}
			return store.ErrNotHeld
		}
		updated, err := s.leases.update(ctx, mutate(cur, v))
		if isConflict(err) {
			fresh = true
			continue
		}
		if isNotFound(err) {
			s.forget(o.obj)
			return store.ErrNotHeld
		}
		if err != nil {
			return err
		}
		s.wrote(updated, s.now())
		return nil
	}
	return fmt.Errorf("lost the race to write the Lease %d times in a row", maxConflicts)
}

// Release implements store.Store. It writes what client-go's elector writes
// on ReleaseOnCancel: an empty holderIdentity, leaseDurationSeconds 1, new
// acquireTime and renewTime, and the same leaseTransitions, conditional on
// the resourceVersion it read. Waiters watching the Lease wake at once.
func (s *Store) Release(ctx context.Context, t store.Term) error {
	if err := s.life.Check(ctx); err != nil {
		return err
	}
	if err := kit.CheckRelease(t); err != nil {
		return err
	}
	o, err := objectFor(t.Name)
	if err != nil {
		return err
	}
	err = s.updateLive(ctx, o, t, func(cur *lease, _ view) *lease {
		next := cur.clone()
		now := s.now()
		setSpec(next, "", 1, now, now, t.Token)
		o.setAnnotations(next, t.Token, "")
		return next
	})
	if err != nil {
		return fmt.Errorf("leasehold/kubernetes: release %s: %w", t, err)
	}
	return nil
}

// ForceRelease implements store.ForceReleaser: it clears whatever term is
// live, whoever holds it (a client-go elector's included), the way Release
// does, and returns the record as it was. A term this store has never seen
// before counts as live: it cannot know how long the holder has been silent.
func (s *Store) ForceRelease(ctx context.Context, name string) (store.Record, error) {
	if err := s.life.Check(ctx); err != nil {
		return store.Record{}, err
	}
	o, err := objectFor(name)
	if err != nil {
		return store.Record{}, err
	}
	fail := func(err error) (store.Record, error) {
		return store.Record{}, fmt.Errorf("leasehold/kubernetes: force release %q: %w", name, err)
	}
	for range maxConflicts {
		cur, err := s.leases.get(ctx, o.obj)
		if isNotFound(err) {
			s.forget(o.obj)
			return fail(store.ErrNotFound)
		}
		if err != nil {
			return fail(err)
		}
		if err := o.claim(cur); err != nil {
			return store.Record{}, err
		}
		v := s.observe(cur, s.now(), false)
		if v.holder == "" || v.remaining() <= 0 {
			return fail(store.ErrNotHeld)
		}
		next := cur.clone()
		now := s.now()
		setSpec(next, "", 1, now, now, v.token)
		o.setAnnotations(next, v.token, "")
		updated, err := s.leases.update(ctx, next)
		if isConflict(err) {
			continue
		}
		if err != nil {
			return fail(err)
		}
		s.wrote(updated, s.now())
		return v.record(name), nil
	}
	return fail(fmt.Errorf("lost the race to write the Lease %d times in a row", maxConflicts))
}

// List implements store.Lister: the record of every Lease in the namespace,
// client-go's included, ordered by lease name (a mapped object is listed
// under its leasehold name; an object whose name is longer than a lease name
// may be is left out). It needs the "list" verb on leases, which the minimal
// Role in deploy/kubernetes does not grant.
func (s *Store) List(ctx context.Context) ([]store.Record, error) {
	if err := s.life.Check(ctx); err != nil {
		return nil, err
	}
	list, err := s.leases.list(ctx)
	if err != nil {
		return nil, fmt.Errorf("leasehold/kubernetes: list: %w", err)
	}
	now := s.now()
	var recs []store.Record
	for _, l := range list {
		if isHighWater(l) || isQueue(l) {
			continue
		}
		name := l.Metadata.Name
		if n, ok := l.Metadata.Annotations[AnnotationName]; ok {
			name = n
		}
		o, err := objectFor(name)
		if err != nil || o.obj != l.Metadata.Name {
			continue
		}
		recs = append(recs, s.observe(l, now, false).record(name))
	}
	sort.Slice(recs, func(i, j int) bool { return recs[i].Name < recs[j].Name })
	return recs, nil
}

// Get implements store.Store. Remaining is the lease duration less how long
// this store has seen the Lease unchanged: a Lease it reads for the first
// time has its full duration left, whatever its renewTime says.
func (s *Store) Get(ctx context.Context, name string) (store.Record, error) {
	if err := s.life.Check(ctx); err != nil {
		return store.Record{}, err
	}
	o, err := objectFor(name)
	if err != nil {
		return store.Record{}, err
	}
	cur, err := s.leases.get(ctx, o.obj)
	if isNotFound(err) {
		s.forget(o.obj)
		return store.Record{}, fmt.Errorf("leasehold/kubernetes: get %q: %w", name, store.ErrNotFound)
	}
	if err != nil {
		return store.Record{}, fmt.Errorf("leasehold/kubernetes: get %q: %w", name, err)
	}
	if err := o.claim(cur); err != nil {
		return store.Record{}, err
	}
	return s.observe(cur, s.now(), false).record(name), nil
}

// Close implements store.Store: it ends the store's watches and waits for
// them. It releases no lease. Later calls do nothing and return nil; every
// other method returns store.ErrClosed after it.
func (s *Store) Close() error {
	return s.life.Close(func() error {
		s.mu.Lock() // a Watch past its closed check has added itself to wg
		s.mu.Unlock()
		s.wg.Wait()
		if s.closeIdle != nil {
			s.closeIdle()
		}
		return nil
	})
}
