package etcd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/etcd/internal/etcdapi"
	"github.com/leasehold/leasehold/store/storekit"
)

// MinTTL is the smallest TTL the store accepts. etcd leases count whole
// seconds: a TTL is rounded up to the next second, and etcd itself raises a
// TTL below its minimum (1.5 election timeouts rounded up: 2 s with default
// server timings) to that minimum. A longer lease than asked only delays a
// rival; it never shortens a holder's term.
const MinTTL = time.Second

// kit builds the store's argument checks and invalid-argument errors.
var kit = storekit.Kit{Store: "etcd", MinTTL: MinTTL}

// maxTTLSeconds is etcd's largest lease TTL (lease.MaxLeaseTTL).
const maxTTLSeconds = 9_000_000_000

// revokeTimeout bounds a background revocation (and so Close).
const revokeTimeout = 2 * time.Second

// revokeTick is how often the etcd leader looks for expired leases.
const revokeTick = 500 * time.Millisecond

// recordDir is the folder, under the prefix, of the per-name record keys. No
// lease name starts with '.', so it never lies under a name's contender prefix.
const recordDir = ".leasehold/term/"

// Store is a lease store on an etcd cluster. It is safe for concurrent use.
type Store struct {
	cli    etcdapi.Client // the store's own etcdwire client, or etcdv3client's adapter
	own    bool           // Close closes cli
	prefix string

	// life is the closed check, Done (which ends watches and the keep-alive
	// stream), and the watch forwarders and background revocations that Close
	// waits for (storekit.Lifecycle.Go).
	life storekit.Lifecycle

	// acquireKeepAlives counts the keep-alives Acquire sent for pooled
	// leases (for tests).
	acquireKeepAlives atomic.Int64

	// terms remembers, for terms this handle acquired or looked up, where
	// their key and etcd lease are, to spare a read. It is only a hint: every
	// use is checked against etcd.
	termsMu sync.Mutex
	terms   map[store.Term]termInfo
	// leases are the etcd leases this handle granted (leases.go), and pool
	// those of them that carry no key and may back the next grant, by the
	// TTL asked for in whole seconds, most recently refreshed last.
	leases map[etcdapi.LeaseID]*ownLease
	pool   map[int64][]etcdapi.LeaseID

	// ka is the open keep-alive stream of the acquire path (see kaConn);
	// kaOpening is set while a goroutine opens one. kaWG counts that
	// goroutine (it reads the stream until Done): kaConnection checks the
	// closed flag and adds to kaWG in one step under kaMu, and Close takes
	// kaMu once before kaWG.Wait, so no goroutine is added after Close waited.
	kaMu      sync.Mutex
	ka        *kaConn
	kaOpening bool
	kaWG      sync.WaitGroup

	// places remembers the queue places (queue.go) this handle wrote,
	// refreshed or made terms; only a hint, checked on every use.
	placesMu sync.Mutex
	places   map[placeID]place
	// placeLeases are the etcd leases this handle granted for places, and
	// placePool those of them that carry nothing now and may back the
	// handle's next place, by TTL in whole seconds (queue.go).
	placeLeases map[etcdapi.LeaseID]*placeLease
	placePool   map[int64][]etcdapi.LeaseID

	// watches are this handle's live watches, by name, and proofs what
	// they show of the places this handle wrote (watchgrant.go).
	watchMu sync.Mutex
	watches map[string][]*nameWatch
	proofs  map[placeID]*placeProof
}

type termInfo struct {
	_ [0]func() // not comparable: spares the binary an equality function

	key      string
	lease    etcdapi.LeaseID
	metadata string
	// recorded, for a term made from a place without a write (grantPlace),
	// is closed once the transaction that records it has returned; Release
	// and Transfer wait for it, so they never race it.
	recorded <-chan struct{}
}

var (
	_ store.Store         = (*Store)(nil)
	_ store.Watcher       = (*Store)(nil)
	_ store.Lister        = (*Store)(nil)
	_ store.ForceReleaser = (*Store)(nil)
)

// NewOnAPI returns a store that uses cli and keeps its keys under prefix, used
// verbatim (so "locks/" puts name N at "locks/N/"; "" is the root of the
// keyspace, where `etcdctl lock N` contends for N). The store does not close
// cli. It is for package etcdv3client, whose New gives it an adapter over a
// *clientv3.Client (cli's type is internal to this module): use
// etcdv3client.New, or Open and OpenURL.
func NewOnAPI(cli etcdapi.Client, prefix string) (*Store, error) {
	if cli == nil {
		return nil, kit.Invalid("new", "client is nil")
	}
	if err := validatePrefix(prefix); err != nil {
		return nil, err
	}
	return &Store{cli: cli, prefix: prefix, terms: map[store.Term]termInfo{},
		leases: map[etcdapi.LeaseID]*ownLease{}, pool: map[int64][]etcdapi.LeaseID{},
		places: map[placeID]place{}, placeLeases: map[etcdapi.LeaseID]*placeLease{}, placePool: map[int64][]etcdapi.LeaseID{}}, nil
}

func validatePrefix(prefix string) error {
	if len(prefix) > 512 {
		return kit.Invalid("", "key prefix is %d bytes, the limit is 512", len(prefix))
	}
	if strings.ContainsRune(prefix, 0) {
		return kit.Invalid("", "key prefix %q contains a NUL byte", prefix)
	}
	return nil
}

// Prefix returns the key prefix of the store.
func (s *Store) Prefix() string { return s.prefix }

// ContenderPrefix returns the etcd key prefix of lease name: the prefix that
// etcd's concurrency.NewMutex and NewElection (and etcdctl lock / elect) take,
// without its trailing "/".
func (s *Store) ContenderPrefix(name string) string { return s.prefix + name }

func (s *Store) lockPrefix(name string) string { return s.prefix + name + "/" }
func (s *Store) recordKey(name string) string  { return s.prefix + recordDir + name }

// isContender reports whether key is a contender key of the prefix pfx (a
// direct child: keys of nested names are not).
func isContender(pfx string, key []byte) bool {
	if len(key) <= len(pfx) || string(key[:len(pfx)]) != pfx {
		return false
	}
	for _, c := range key[len(pfx):] {
		if c == '/' {
			return false
		}
	}
	return true
}

// recordValue is the value of a name's record key.
type recordValue struct {
	_ [0]func() // not comparable: spares the binary an equality function

	Holder   string `json:"holder"`
	Key      string `json:"key"`   // the term's key, after the contender prefix
	Lease    int64  `json:"lease"` // the etcd lease it was granted with
	Metadata string `json:"metadata,omitempty"`
	TTLms    int64  `json:"ttl_ms"` // the TTL asked for
	// Token is the grant's token when it is not the record's mod revision:
	// a queue place made the term keeps its key's older create revision.
	Token int64 `json:"token,omitempty"`
}

// parseRecord reads a name's record key: what it records, and the token of
// that grant (the record's mod revision unless the value says otherwise).
// ok is false for a missing or unreadable record (token is then its mod
// revision, or 0).
func parseRecord(rec *mvccKV) (rv recordValue, token int64, ok bool) {
	if rec == nil {
		return recordValue{}, 0, false
	}
	if err := json.Unmarshal(rec.value, &rv); err != nil {
		return recordValue{}, rec.mod, false
	}
	if rv.Token > 0 {
		return rv, rv.Token, true
	}
	return rv, rec.mod, true
}

// rctx adds etcd's require-leader flag to ctx: a member cut off from its leader
// answers at once with an error (that the client retries on another member,
// for reads) instead of hanging until the deadline.
func rctx(ctx context.Context) context.Context { return etcdapi.WithRequireLeader(ctx) }

func ttlSeconds(ttl time.Duration) (int64, error) {
	secs := int64((ttl + time.Second - 1) / time.Second)
	if secs > maxTTLSeconds {
		return 0, fmt.Errorf("%w: ttl %v is above etcd's maximum lease TTL of %d s", store.ErrInvalid, ttl, maxTTLSeconds)
	}
	return secs, nil
}

func (s *Store) remember(t store.Term, ti termInfo) {
	s.termsMu.Lock()
	defer s.termsMu.Unlock()
	if len(s.terms) >= 4096 {
		clear(s.terms)
	}
	s.terms[t] = ti
}

func (s *Store) forget(t store.Term) {
	s.termsMu.Lock()
	delete(s.terms, t)
	s.termsMu.Unlock()
}

func (s *Store) recall(t store.Term) (termInfo, bool) {
	s.termsMu.Lock()
	defer s.termsMu.Unlock()
	ti, ok := s.terms[t]
	return ti, ok
}

// revokeLater revokes an etcd lease in the background, bounded in time. It is
// used for leases that no longer carry a live term's key (or a key that is to
// be given back): if the revocation fails, the lease expires on its own.
func (s *Store) revokeLater(id etcdapi.LeaseID) {
	if id == etcdapi.NoLease {
		return
	}
	s.spawn(func() {
		ctx, cancel := context.WithTimeout(context.Background(), revokeTimeout)
		defer cancel()
		s.cli.Revoke(ctx, id) //nolint:errcheck // best effort; the lease expires anyway
	})
}

// spawn runs f in a goroutine that Close waits for; once Close has begun, f
// runs untracked (a call in flight during Close may still need to give a
// lease back; it is bounded in time).
func (s *Store) spawn(f func()) {
	if !s.life.Go(f) {
		go f()
	}
}

// Release implements store.Store: it deletes exactly the term's key (in a
// transaction comparing its create revision and holder); waiters wake on the
// delete. The term's etcd lease, which now carries no key, goes back to this
// handle's pool for its next grant if this handle granted it and no
// keep-alive for it is unanswered; otherwise it is revoked in the background.
func (s *Store) Release(ctx context.Context, t store.Term) error {
	if err := s.life.Check(ctx); err != nil {
		return err
	}
	if err := kit.CheckRelease(t); err != nil {
		return err
	}
	ti, err := s.lookup(ctx, t)
	if err == nil {
		err = s.waitRecorded(ctx, ti)
	}
	if err != nil {
		return fmt.Errorf("leasehold/etcd: release %s: %w", t, err)
	}
	resp, err := s.cli.Txn(rctx(ctx), []etcdapi.Cmp{
		etcdapi.CreateRevisionIs(ti.key, t.Token),
		etcdapi.ValueIs(ti.key, t.Holder),
	}, []etcdapi.Op{etcdapi.Delete(ti.key, true)}, nil)
	if err != nil {
		return fmt.Errorf("leasehold/etcd: release %s: %w", t, err)
	}
	s.forget(t)
	if !resp.Succeeded {
		s.endedTerm(ti.lease, t)
		return fmt.Errorf("leasehold/etcd: release %s: %w", t, store.ErrNotHeld)
	}
	if prev := resp.Responses[0].PrevKvs; len(prev) > 0 {
		// The key was on this lease when it was deleted: it carries nothing
		// of t now, and (a lease carries one key at a time) nothing else.
		p := etcdapi.LeaseID(prev[0].Lease)
		if p != ti.lease {
			s.endedTerm(ti.lease, t)
		}
		s.releasedTerm(p, t)
	}
	return nil
}

// Get implements store.Store. A live term's Remaining is etcd's figure
// rounded up to the next whole second (etcd reports whole seconds, rounded
// down), and at least 500 ms while the key exists: etcd ends a term only when
// it revokes the expired lease, which it checks for every 500 ms. A name held
// by an etcd tool (Mutex, Election) reports that holder (see the package
// doc). A released or expired name reports an empty Holder and the last token
// leasehold granted for it.
func (s *Store) Get(ctx context.Context, name string) (store.Record, error) {
	if err := s.life.Check(ctx); err != nil {
		return store.Record{}, err
	}
	if err := kit.CheckName("get", name); err != nil {
		return store.Record{}, err
	}
	r, err := s.get(ctx, name)
	if err != nil {
		return store.Record{}, fmt.Errorf("leasehold/etcd: get %q: %w", name, err)
	}
	return r, nil
}

func (s *Store) get(ctx context.Context, name string) (store.Record, error) {
	pfx, rk := s.lockPrefix(name), s.recordKey(name)
	resp, err := s.cli.Txn(rctx(ctx), nil, []etcdapi.Op{contendersOp(pfx), etcdapi.Get(rk), etcdapi.GetPrefix(s.markerPrefix(name))}, nil)
	if err != nil {
		return store.Record{}, err
	}
	var rec *mvccKV
	if r := resp.Responses[1].Kvs; len(r) > 0 {
		rec = &mvccKV{r[0].Key, r[0].Value, r[0].CreateRevision, r[0].ModRevision, r[0].Lease}
	}
	v := s.queueView(name, resp.Responses[0].Kvs, resp.Responses[2].Kvs)
	if len(v.contenders) > 0 {
		return s.describe(ctx, name, v.contenders[0], rec, v)
	}
	if rec == nil {
		return store.Record{}, store.ErrNotFound
	}
	_, token, _ := parseRecord(rec)
	return store.Record{Term: store.Term{Name: name, Token: token}}, nil
}

// List implements store.Lister: the record of every name leasehold has
// granted under the prefix, ordered by name. Names only etcd tools used are
// not listed.
func (s *Store) List(ctx context.Context) ([]store.Record, error) {
	if err := s.life.Check(ctx); err != nil {
		return nil, err
	}
	dir := s.prefix + recordDir
	op := etcdapi.GetPrefix(dir)
	op.KeysOnly = true
	resp, err := s.cli.Range(rctx(ctx), op)
	if err != nil {
		return nil, fmt.Errorf("leasehold/etcd: list: %w", err)
	}
	out := make([]store.Record, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		name := string(kv.Key[len(dir):])
		if store.ValidateName(name) != nil {
			continue
		}
		r, err := s.get(ctx, name)
		if errors.Is(err, store.ErrNotFound) {
			continue // deleted meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("leasehold/etcd: list: get %q: %w", name, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// ForceRelease implements store.ForceReleaser: it deletes the live holder's
// key, whoever wrote it. A leasehold term's etcd lease is revoked too; an etcd
// tool's lease (its session) is left alone, only its key is deleted, as
// `etcdctl del` would.
func (s *Store) ForceRelease(ctx context.Context, name string) (store.Record, error) {
	if err := s.life.Check(ctx); err != nil {
		return store.Record{}, err
	}
	if err := kit.CheckName("force release", name); err != nil {
		return store.Record{}, err
	}
	for attempt := 0; attempt < 4; attempt++ {
		r, err := s.get(ctx, name)
		if err != nil {
			return store.Record{}, fmt.Errorf("leasehold/etcd: force release %q: %w", name, err)
		}
		if r.Holder == "" {
			return r, fmt.Errorf("leasehold/etcd: force release %q: %w", name, store.ErrNotHeld)
		}
		// Find the key of the live term by its create revision.
		op := etcdapi.GetPrefix(s.lockPrefix(name))
		op.MinCreate, op.MaxCreate = r.Token, r.Token
		resp, err := s.cli.Range(rctx(ctx), op)
		if err != nil {
			return store.Record{}, fmt.Errorf("leasehold/etcd: force release %q: %w", name, err)
		}
		if len(resp.Kvs) == 0 {
			continue
		}
		kv := resp.Kvs[0]
		dresp, err := s.cli.Txn(rctx(ctx), []etcdapi.Cmp{etcdapi.CreateRevisionIs(string(kv.Key), r.Token)},
			[]etcdapi.Op{etcdapi.Delete(string(kv.Key), false)}, nil)
		if err != nil {
			return store.Record{}, fmt.Errorf("leasehold/etcd: force release %q: %w", name, err)
		}
		if !dresp.Succeeded {
			continue
		}
		if !strings.HasPrefix(r.Holder, "etcd:") {
			s.revokeLease(etcdapi.LeaseID(kv.Lease))
		}
		return r, nil
	}
	return store.Record{}, fmt.Errorf("leasehold/etcd: force release %q: the holder kept changing", name)
}

// Close implements store.Store. It ends this handle's watches, waits for its
// background revocations (a few seconds at most), and closes the etcd client
// if the store opened it (Open, OpenURL). It does not release any lease.
func (s *Store) Close() error {
	return s.life.Close(s.release)
}

// release is Close's work, run once, after the handle is marked closed and
// Done is closed.
func (s *Store) release() error {
	// Revoke the pooled leases (they carry no key) and let background
	// revocations finish (each is bounded by revokeTimeout) before the client
	// goes: a revoked lease frees etcd at once, while one left behind lingers
	// until its TTL runs out.
	var revokes sync.WaitGroup
	for _, id := range append(s.pooledLeases(), s.pooledPlaceLeases()...) {
		revokes.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), revokeTimeout)
			defer cancel()
			s.cli.Revoke(ctx, id) //nolint:errcheck // best effort; the lease expires anyway
		})
	}
	revokes.Wait()
	s.life.Wait()
	// A kaConnection that saw the handle open has added to kaWG under kaMu
	// before this lock is taken; one that takes kaMu later sees it closed.
	s.kaMu.Lock()
	s.kaMu.Unlock() //nolint:staticcheck // a barrier, see above
	// The keep-alive stream ends with Done.
	s.kaWG.Wait()
	var err error
	if s.own {
		err = s.cli.Close()
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("leasehold/etcd: close: %w", err)
	}
	return nil
}
