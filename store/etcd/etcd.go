// Package etcd is the leasehold store on etcd v3: a consensus-backed lease
// whose fencing token is the etcd revision.
//
// # How a lease is kept
//
// Each live term has its own etcd lease and one key (a lease is reused from
// one term to a later one, never shared by two live terms). For lease name N under the store's
// key prefix P, contenders write keys P+N+"/"+<lease ID in hex>, attached to
// their etcd lease; the key with the lowest create revision is the holder.
// That is the layout of etcd's own concurrency package (Mutex, Election) and
// therefore of `etcdctl lock` and `etcdctl elect`, so leasehold and those
// tools exclude each other on one name (see "Working with etcd's own tools").
//
//   - Acquire takes an etcd lease with the TTL (rounded up to whole seconds:
//     etcd leases have a granularity of one second, and etcd raises a TTL below
//     its own minimum, 2 s with default server timings, silently): one from
//     the handle's pool, refreshed by a keep-alive sent alongside the
//     transaction, or a newly granted one (see "Reusing etcd leases"). In one
//     transaction it writes its key only if no other contender key exists
//     under P+N+"/". A live term of the same holder is deleted in the same
//     transaction. The term's token is the create revision of its key.
//   - Renew sends a keep-alive for exactly that term's etcd lease, then checks
//     with a linearizable read that the term's key still exists with that
//     create revision and holder. etcd never revives an expired lease. A
//     handle renews a term acquired through another handle by moving its key
//     to a lease of its own (see "Reusing etcd leases").
//   - Release deletes the key in a transaction that compares its create
//     revision and holder. The etcd lease, which carries nothing then, goes
//     to the handle's pool, or is revoked.
//   - A crashed holder's key is deleted by etcd when its lease expires; waiters
//     watching the prefix (see Watch) wake on that delete, as on a release,
//     in about one round trip. A refused attempt puts its etcd lease in the
//     pool, so the waiter that wakes takes over with one transaction.
//
// A second key, P+".leasehold/term/"+N, written in the same transaction as each
// grant and never attached to a lease, records the holder and metadata of the
// last grant; its mod revision is that grant's token. It lets Get report the
// last token after a release, and lets Renew, Release and Fence find a term's
// key from its token.
//
// # Reusing etcd leases
//
// A grant on a new etcd lease costs two raft writes (the grant, then the
// transaction) and a release two more (the delete, then the revocation); etcd's
// Mutex on a long-lived session makes two per lock and unlock. So a Store
// handle keeps the etcd leases it granted and uses them again: a lease whose
// term was released through the handle, or whose attempt was refused, goes to
// the handle's pool, and the handle's next Acquire with the same TTL in whole
// seconds (any name, any holder) puts its key on it, sending a keep-alive in
// the same step; the grant is counted only if that keep-alive was answered,
// and its Remaining is the TTL the keep-alive restored. A lock and an unlock
// are then two raft writes. Pooled leases carry no key; they are revoked when
// found too close to expiry to be used, on Close, or when the pool is full
// (128), and otherwise expire on their own. The rules that keep this safe:
//
//   - A lease carries at most one key, the key of one term. It enters the pool
//     only after the delete of a Release through the handle that granted it
//     (the delete's previous value names the lease), or after an attempt that
//     wrote nothing. A crashed holder's key dies with its lease, as before.
//   - Renew extends only its own term. A handle sends a keep-alive for a
//     lease on behalf of term t only while its own table says the lease
//     carries t: once the lease is back in the pool or carries a newer term,
//     t's late renewals get ErrNotHeld with nothing sent. A handle never
//     keeps alive a lease that another handle granted: to renew a term
//     acquired elsewhere it moves the term's key to a lease of its own
//     (keeping the key, so the token) and revokes the old lease, which
//     therefore never returns to a pool (that move reads the old lease's time
//     to live first, and ends the term rather than trust a move whose answer
//     came later than that lease could have lived).
//   - A lease is pooled only if every keep-alive the handle sent for it came
//     back with etcd's answer. A keep-alive without an answer may still be
//     applied by etcd later, on whatever the lease carries then; such a lease
//     is revoked, not reused. (The store sends each keep-alive request itself,
//     one per attempt, rather than through clientv3's KeepAliveOnce, whose
//     internal retries it could not see.)
//   - Release deletes only its term's key (the transaction compares the key's
//     create revision and holder); the token is the key's create revision, so
//     it still rises on every grant, on a reused lease as on a new one.
//
// The acquire path sends its keep-alives on one long-lived stream per handle
// (a new stream per keep-alive costs a stream set-up, and with user/password
// authentication an Authenticate request, itself a raft write, each time).
//
// # What is guaranteed
//
// The token is etcd's store-wide revision: it rises on every write to the
// cluster, so every grant gets a token strictly greater than every token
// granted before on that cluster, for every name, whoever released what.
// Tokens are not consecutive. Restoring an etcd cluster from an old snapshot
// rolls revisions back and breaks this (etcd's own `--bump-revision` restore
// option exists for that reason); so does pointing a store at a different
// cluster.
//
// Expiry is judged only by etcd: a term is live while its key exists, and the
// key exists until the etcd leader has expired and revoked the lease (it checks
// every 500 ms). etcd extends all leases by about one election timeout when
// its raft leader changes, so a leader change makes terms last longer, never
// shorter. A leasehold holder stops trusting its term on its own clock
// (RenewDeadline after sending its last successful renewal) well before that.
//
// A lease alone is best effort: a holder that is paused longer than its lease
// can wake and act after a rival has taken over. Writes that must not come
// from a stale holder should be fenced: inside etcd with [Store.Fence], whose
// comparison makes a transaction apply only while the exact term holds; in
// other resources by comparing the token.
//
// # Working with etcd's own tools
//
// `etcdctl lock P+N` and `etcdctl elect P+N` (and concurrency.NewMutex /
// concurrency.NewElection on that prefix) contend with leasehold for name N.
// The value of a leasehold key is the holder identity, so `etcdctl elect -l`
// prints the leasehold leader. A foreign holder is reported with the Holder
// "etcd:" plus the rest of its key (its lease ID in hex) and its value as the
// Metadata. Leasehold does not queue: it only writes its key when no other
// contender key exists, so etcd tools that are already waiting get the lock
// first. Avoid names that are a path prefix of other names in use ("job" and
// "job/x") when etcd tools share them: the concurrency package counts every key
// under the prefix, nested names included (leasehold itself does not).
//
// # Security
//
// TLS (with or without client certificates) and etcd user/password
// authentication are options of [Config] and of the URL (see [OpenURL]).
// A leasehold user needs read and write on its key prefix only:
//
//	etcdctl role add leasehold
//	etcdctl role grant-permission leasehold --prefix=true readwrite 'P'
//	etcdctl user add leasehold
//	etcdctl user grant-role leasehold leasehold
//
// etcd checks lease grants and keep-alives for authentication only, and lease
// revocation against the keys attached to the lease, which all lie under P.
package etcd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold/leasehold/store"
)

// MinTTL is the smallest TTL the store accepts. etcd leases count whole
// seconds: a TTL is rounded up to the next second, and etcd itself raises a
// TTL below its minimum (1.5 election timeouts rounded up: 2 s with default
// server timings) to that minimum. A longer lease than asked only delays a
// rival; it never shortens a holder's term.
const MinTTL = time.Second

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
	cli    *clientv3.Client
	own    bool // Close closes cli
	prefix string

	mu      sync.Mutex
	closed  bool
	closing chan struct{}
	wg      sync.WaitGroup // watch forwarders and background revocations

	// terms remembers, for terms this handle acquired or looked up, where
	// their key and etcd lease are, to spare a read. It is only a hint: every
	// use is checked against etcd.
	termsMu sync.Mutex
	terms   map[store.Term]termInfo
	// leases are the etcd leases this handle granted (leases.go), and pool
	// those of them that carry no key and may back the next grant, by the
	// TTL asked for in whole seconds, most recently refreshed last.
	leases map[clientv3.LeaseID]*ownLease
	pool   map[int64][]clientv3.LeaseID

	lcOnce sync.Once
	lc     pb.LeaseClient // for keep-alives (see keepAlive)
	// ka is the open keep-alive stream of the acquire path (see kaConn);
	// kaOpening is set while a goroutine opens one.
	kaMu      sync.Mutex
	ka        *kaConn
	kaOpening bool
	kaWG      sync.WaitGroup // the goroutine that opens and reads ka
}

type termInfo struct {
	key      string
	lease    clientv3.LeaseID
	metadata string
}

var (
	_ store.Store         = (*Store)(nil)
	_ store.Watcher       = (*Store)(nil)
	_ store.Lister        = (*Store)(nil)
	_ store.ForceReleaser = (*Store)(nil)
)

// New returns a store that uses cli and keeps its keys under prefix, used
// verbatim (so "locks/" puts name N at "locks/N/"; "" is the root of the
// keyspace, where `etcdctl lock N` contends for N). The store does not close
// cli.
func New(cli *clientv3.Client, prefix string) (*Store, error) {
	if cli == nil {
		return nil, fmt.Errorf("leasehold/etcd: %w: client is nil", store.ErrInvalid)
	}
	if err := validatePrefix(prefix); err != nil {
		return nil, err
	}
	return &Store{cli: cli, prefix: prefix, closing: make(chan struct{}), terms: map[store.Term]termInfo{},
		leases: map[clientv3.LeaseID]*ownLease{}, pool: map[int64][]clientv3.LeaseID{}}, nil
}

func validatePrefix(prefix string) error {
	if len(prefix) > 512 {
		return fmt.Errorf("leasehold/etcd: %w: key prefix is %d bytes, the limit is 512", store.ErrInvalid, len(prefix))
	}
	if strings.ContainsRune(prefix, 0) {
		return fmt.Errorf("leasehold/etcd: %w: key prefix %q contains a NUL byte", store.ErrInvalid, prefix)
	}
	return nil
}

// Client returns the etcd client the store uses, for the caller's own
// transactions (see Fence).
func (s *Store) Client() *clientv3.Client { return s.cli }

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
	Holder   string `json:"holder"`
	Key      string `json:"key"`   // the term's key, after the contender prefix
	Lease    int64  `json:"lease"` // the etcd lease it was granted with
	Metadata string `json:"metadata,omitempty"`
	TTLms    int64  `json:"ttl_ms"` // the TTL asked for
}

func (s *Store) check(ctx context.Context) error {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return store.ErrClosed
	}
	return ctx.Err()
}

// rctx adds etcd's require-leader flag to ctx: a member cut off from its leader
// answers at once with an error (that the client retries on another member,
// for reads) instead of hanging until the deadline.
func rctx(ctx context.Context) context.Context { return clientv3.WithRequireLeader(ctx) }

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
func (s *Store) revokeLater(id clientv3.LeaseID) {
	if id == clientv3.NoLease {
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
	s.mu.Lock()
	tracked := !s.closed
	if tracked {
		s.wg.Add(1)
	}
	s.mu.Unlock()
	go func() {
		if tracked {
			defer s.wg.Done()
		}
		f()
	}()
}

// Acquire implements store.Store.
//
// The term's key is put on an etcd lease from this handle's pool when one of
// the same TTL is there (the lease of a term this handle released, or of an
// attempt of this handle that was refused): a keep-alive for it is sent
// alongside the transaction, so that a grant is one write and its Remaining is
// the TTL that keep-alive restored. Otherwise a new lease is granted first.
// A refused attempt puts its lease back in the pool. See "Reusing etcd
// leases" in the package doc.
func (s *Store) Acquire(ctx context.Context, name, holder string, ttl time.Duration, metadata string) (store.Record, error) {
	if err := s.check(ctx); err != nil {
		return store.Record{}, err
	}
	if err := store.ValidateAcquire(name, holder, ttl, MinTTL, metadata); err != nil {
		return store.Record{}, fmt.Errorf("leasehold/etcd: acquire: %w", err)
	}
	secs, err := ttlSeconds(ttl)
	if err != nil {
		return store.Record{}, fmt.Errorf("leasehold/etcd: acquire %q: %w", name, err)
	}
	rec, err := s.acquire(ctx, name, holder, ttl, secs, metadata, true)
	if errors.Is(err, errPooledGone) {
		rec, err = s.acquire(ctx, name, holder, ttl, secs, metadata, false)
	}
	return rec, err
}

// errPooledGone: the pooled lease an attempt used had expired, so nothing was
// written; the attempt is made again with a new lease.
var errPooledGone = errors.New("pooled lease expired")

type keepAliveResult struct {
	ttl   int64
	clean bool
	err   error
}

func (s *Store) acquire(ctx context.Context, name, holder string, ttl time.Duration, secs int64, metadata string, usePool bool) (store.Record, error) {
	pfx, rk := s.lockPrefix(name), s.recordKey(name)

	sent := time.Now()
	var lease clientv3.LeaseID
	var grantedSecs int64
	var kaWait func() keepAliveResult // set when using a pooled lease
	pooled := false
	if usePool {
		lease, pooled = s.takePooled(secs, sent)
	}
	if pooled {
		kaWait = s.startKeepAlive(rctx(ctx), lease)
	} else {
		g, err := s.cli.Grant(rctx(ctx), secs)
		if err != nil {
			return store.Record{}, fmt.Errorf("leasehold/etcd: acquire %q: grant lease: %w", name, err)
		}
		lease, grantedSecs = g.ID, g.TTL
		s.trackLease(lease, secs, sent.Add(time.Duration(g.TTL)*time.Second))
	}
	// keptAlive waits for the keep-alive of a pooled lease (once) and
	// returns its error.
	var kaErr error
	kaClean := true
	kaWaited := kaWait == nil
	keptAlive := func() error {
		if !kaWaited {
			r := kaWait()
			kaWaited, kaErr, kaClean = true, r.err, r.clean
			if r.err == nil {
				grantedSecs = r.ttl
			}
		}
		return kaErr
	}
	var term store.Term
	granted, refused := false, false
	defer func() {
		keptAlive()
		aliveUntil := sent.Add(time.Duration(grantedSecs) * time.Second)
		switch {
		case granted:
			s.bindLease(lease, term, aliveUntil, !kaClean)
		case refused && kaErr == nil:
			s.putPool(lease, store.Term{}, aliveUntil, !kaClean) // nothing was written with it
		default:
			// Nothing of ours was written, or the outcome is unknown: give the
			// lease (and so any key it may carry) back.
			s.revokeLease(lease)
		}
	}()

	suffix := strconv.FormatInt(int64(lease), 16)
	myKey := pfx + suffix
	rv, _ := json.Marshal(recordValue{Holder: holder, Key: suffix, Lease: int64(lease), Metadata: metadata, TTLms: ttl.Milliseconds()})

	// The transaction writes our key only if the contender prefix holds no
	// key outside the excluded ranges: the subtrees of nested names, and a
	// live term of this same holder, which it deletes.
	var own *ownTerm
	var nested []string
	for attempt := 0; attempt < 8; attempt++ {
		cmps := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(myKey), "=", 0)}
		for _, r := range gaps(pfx, nested, own) {
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(r[0]), "=", 0).WithRange(r[1]))
		}
		var then []clientv3.Op
		if own != nil {
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(own.key), "=", own.rev))
			then = append(then, clientv3.OpDelete(own.key))
		}
		then = append(then,
			clientv3.OpPut(myKey, holder, clientv3.WithLease(lease)),
			clientv3.OpPut(rk, string(rv)))
		resp, err := s.cli.Txn(rctx(ctx)).If(cmps...).Then(then...).Else(
			clientv3.OpGet(pfx, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend)),
			clientv3.OpGet(rk),
		).Commit()
		if err != nil {
			if pooled && errors.Is(err, rpctypes.ErrLeaseNotFound) {
				return store.Record{}, errPooledGone // etcd refused the whole transaction
			}
			return store.Record{}, fmt.Errorf("leasehold/etcd: acquire %q: %w", name, err)
		}
		if resp.Succeeded {
			if err := keptAlive(); err != nil {
				// The pooled lease was not kept alive: the key just written
				// may die with it at any moment. Give it back (deferred).
				return store.Record{}, fmt.Errorf("leasehold/etcd: acquire %q: keep-alive of the pooled lease: %w", name, err)
			}
			granted = true
			if own != nil {
				s.revokeLease(own.lease)
			}
			term = store.Term{Name: name, Holder: holder, Token: resp.Header.Revision}
			s.remember(term, termInfo{key: myKey, lease: lease, metadata: metadata})
			grantedTTL := time.Duration(grantedSecs) * time.Second
			return store.Record{Term: term, Remaining: grantedTTL - time.Since(sent), TTL: grantedTTL, Metadata: metadata}, nil
		}
		kvs := resp.Responses[0].GetResponseRange().Kvs
		var rec *mvccKV
		if r := resp.Responses[1].GetResponseRange().Kvs; len(r) > 0 {
			rec = &mvccKV{r[0].Key, r[0].Value, r[0].CreateRevision, r[0].ModRevision, r[0].Lease}
		}
		contenders, nestedNow := split(pfx, kvs)
		nested = nestedNow
		own = nil
		if len(contenders) == 0 {
			continue // only nested names were in the way: retry around them
		}
		lowest := contenders[0]
		if !isOwnTerm(lowest, rec, holder) {
			refused = true
			r, err := s.describe(ctx, name, lowest, rec)
			if err != nil {
				return store.Record{}, fmt.Errorf("leasehold/etcd: acquire %q: %w", name, err)
			}
			return r, fmt.Errorf("leasehold/etcd: acquire %q: held by %s: %w", name, r.Holder, store.ErrHeld)
		}
		if len(contenders) > 1 {
			// Our own live term holds, but etcd tools queue behind it. A new
			// term of ours would rank behind them: end the old term and let
			// the queue have the lock (the next round reports its holder).
			dresp, err := s.cli.Txn(rctx(ctx)).If(clientv3.Compare(clientv3.CreateRevision(string(lowest.key)), "=", lowest.create)).
				Then(clientv3.OpDelete(string(lowest.key))).Commit()
			if err != nil {
				return store.Record{}, fmt.Errorf("leasehold/etcd: acquire %q: end own earlier term: %w", name, err)
			}
			if dresp.Succeeded {
				s.revokeLease(clientv3.LeaseID(lowest.lease))
			}
			continue
		}
		own = &ownTerm{key: string(lowest.key), rev: lowest.create, lease: clientv3.LeaseID(lowest.lease)}
	}
	return store.Record{}, fmt.Errorf("leasehold/etcd: acquire %q: gave up after 8 transactions that conflicted with changes under %q", name, pfx)
}

type ownTerm struct {
	key   string
	rev   int64
	lease clientv3.LeaseID
}

// mvccKV is the part of an etcd key-value the store reads.
type mvccKV struct {
	key, value  []byte
	create, mod int64
	lease       int64
}

// split sorts the keys under pfx (already ordered by create revision) into
// contender keys and the sub-prefixes of nested names.
func split(pfx string, kvs []*mvccpb.KeyValue) (contenders []mvccKV, nested []string) {
	seen := map[string]bool{}
	for _, kv := range kvs {
		if isContender(pfx, kv.Key) {
			contenders = append(contenders, mvccKV{kv.Key, kv.Value, kv.CreateRevision, kv.ModRevision, kv.Lease})
			continue
		}
		rest := string(kv.Key[len(pfx):])
		sub := pfx + rest[:strings.IndexByte(rest, '/')+1]
		if !seen[sub] {
			seen[sub] = true
			nested = append(nested, sub)
		}
	}
	sort.Strings(nested)
	return contenders, nested
}

// gaps returns the key ranges [start, end) under pfx outside the nested
// sub-prefixes and outside own's key: the ranges that must hold no key for a
// new term to be granted.
func gaps(pfx string, nested []string, own *ownTerm) [][2]string {
	type span struct{ start, end string }
	var excl []span
	for _, n := range nested {
		excl = append(excl, span{n, clientv3.GetPrefixRangeEnd(n)})
	}
	if own != nil {
		excl = append(excl, span{own.key, own.key + "\x00"})
	}
	sort.Slice(excl, func(i, j int) bool { return excl[i].start < excl[j].start })
	var out [][2]string
	cur, end := pfx, clientv3.GetPrefixRangeEnd(pfx)
	for _, e := range excl {
		if e.start > cur {
			out = append(out, [2]string{cur, e.start})
		}
		if e.end > cur {
			cur = e.end
		}
	}
	if cur < end {
		out = append(out, [2]string{cur, end})
	}
	return out
}

// isOwnTerm reports whether kv is the leasehold term recorded in rec, held by
// holder.
func isOwnTerm(kv mvccKV, rec *mvccKV, holder string) bool {
	if rec == nil || rec.mod != kv.create || string(kv.value) != holder {
		return false
	}
	var rv recordValue
	return json.Unmarshal(rec.value, &rv) == nil && rv.Holder == holder
}

// describe returns the record of the live contender kv (the lowest), reading
// the time left on its etcd lease.
func (s *Store) describe(ctx context.Context, name string, kv mvccKV, rec *mvccKV) (store.Record, error) {
	r := store.Record{Term: store.Term{Name: name, Token: kv.create}}
	var rv recordValue
	if rec != nil && rec.mod == kv.create && json.Unmarshal(rec.value, &rv) == nil && rv.Holder == string(kv.value) {
		r.Holder, r.Metadata = rv.Holder, rv.Metadata
	} else {
		r.Holder = foreignHolder(name, kv, s.lockPrefix(name))
		r.Metadata = string(kv.value)
		if len(r.Metadata) > store.MaxMetadataLen {
			r.Metadata = r.Metadata[:store.MaxMetadataLen]
		}
	}
	if kv.lease == 0 {
		// A key without a lease (written by hand) never expires.
		r.Remaining = time.Duration(math.MaxInt64)
		return r, nil
	}
	ttl, err := s.cli.TimeToLive(rctx(ctx), clientv3.LeaseID(kv.lease))
	switch {
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		return r, nil // ended since the read: Remaining 0
	case err != nil:
		return store.Record{}, fmt.Errorf("time to live of lease %x: %w", kv.lease, err)
	case ttl.TTL < 0:
		return r, nil
	}
	r.TTL = time.Duration(ttl.GrantedTTL) * time.Second
	// etcd reports whole seconds rounded down; the key exists, so the term is
	// live until etcd revokes the lease. Report the most it can have left,
	// and at least one revocation tick while the key is still there.
	r.Remaining = time.Duration(ttl.TTL+1) * time.Second
	if r.Remaining < revokeTick {
		r.Remaining = revokeTick
	}
	return r, nil
}

// foreignHolder names a contender key that leasehold did not write (an etcd
// Mutex or Election, or a term whose record was overwritten).
func foreignHolder(name string, kv mvccKV, pfx string) string {
	h := "etcd:" + string(kv.key[len(pfx):])
	if store.ValidateHolder(h) != nil {
		h = "etcd:rev-" + strconv.FormatInt(kv.create, 10)
	}
	return h
}

// lookup finds the key and etcd lease of term t, from this handle's memory
// or from the name's record key. It does not check that the key exists.
func (s *Store) lookup(ctx context.Context, t store.Term) (termInfo, error) {
	if ti, ok := s.recall(t); ok {
		return ti, nil
	}
	resp, err := s.cli.Get(rctx(ctx), s.recordKey(t.Name))
	if err != nil {
		return termInfo{}, err
	}
	if len(resp.Kvs) == 0 || resp.Kvs[0].ModRevision != t.Token {
		return termInfo{}, store.ErrNotHeld
	}
	var rv recordValue
	if err := json.Unmarshal(resp.Kvs[0].Value, &rv); err != nil || rv.Holder != t.Holder || rv.Key == "" || strings.ContainsRune(rv.Key, '/') {
		return termInfo{}, store.ErrNotHeld
	}
	ti := termInfo{key: s.lockPrefix(t.Name) + rv.Key, lease: clientv3.LeaseID(rv.Lease), metadata: rv.Metadata}
	return ti, nil
}

// current reads the key of term t and reports whether it is still t's live
// key: created at t's token, holding t's holder. It returns the key's lease.
func (s *Store) current(ctx context.Context, t store.Term, key string) (clientv3.LeaseID, bool, error) {
	resp, err := s.cli.Get(rctx(ctx), key)
	if err != nil {
		return 0, false, err
	}
	if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != t.Token || string(resp.Kvs[0].Value) != t.Holder {
		return 0, false, nil
	}
	return clientv3.LeaseID(resp.Kvs[0].Lease), true, nil
}

// Renew implements store.Store. It sends a keep-alive for exactly the term's
// etcd lease and then checks, with a linearizable read, that the term's key
// still exists with the term's token and holder: only then has the keep-alive
// extended the live term. etcd cannot change a lease's TTL; a renewal that
// asks for a longer TTL than the lease has moves the key to a new lease with
// that TTL (keeping its create revision, so the token), and a renewal that
// asks for a shorter one keeps the longer lease. The keep-alive is sent only
// for a lease this handle granted and whose table entry says it carries the
// term; a term whose key is on any other lease is renewed by moving the key
// to a new lease of this handle (see "Reusing etcd leases" and adopt).
func (s *Store) Renew(ctx context.Context, t store.Term, ttl time.Duration) (store.Record, error) {
	if err := s.check(ctx); err != nil {
		return store.Record{}, err
	}
	if err := store.ValidateTerm(t); err != nil {
		return store.Record{}, fmt.Errorf("leasehold/etcd: renew: %w", err)
	}
	if err := store.ValidateTTL(ttl, MinTTL); err != nil {
		return store.Record{}, fmt.Errorf("leasehold/etcd: renew %s: %w", t, err)
	}
	secs, err := ttlSeconds(ttl)
	if err != nil {
		return store.Record{}, fmt.Errorf("leasehold/etcd: renew %s: %w", t, err)
	}
	rec, err := s.renew(ctx, t, secs)
	if err != nil {
		if errors.Is(err, store.ErrNotHeld) {
			s.forget(t)
		}
		return store.Record{}, fmt.Errorf("leasehold/etcd: renew %s: %w", t, err)
	}
	return rec, nil
}

func (s *Store) renew(ctx context.Context, t store.Term, secs int64) (store.Record, error) {
	ti, err := s.lookup(ctx, t)
	if err != nil {
		return store.Record{}, err
	}
	for attempt := 0; attempt < 4; attempt++ {
		sent := time.Now()
		ttl, ours, err := s.keepAliveFor(rctx(ctx), ti.lease, t)
		if !ours {
			// Nothing was sent: this handle does not keep ti.lease alive for
			// t (another handle granted it, or it went back to the pool when t
			// was released here). Find where t's key is now.
			lease, ok, err := s.current(ctx, t, ti.key)
			if err != nil {
				return store.Record{}, err
			}
			if !ok {
				return store.Record{}, store.ErrNotHeld
			}
			if lease != ti.lease && s.carries(lease, t) {
				ti.lease = lease // on a lease of ours meanwhile: keep that alive
				continue
			}
			ti.lease = lease
			rec, err := s.adopt(ctx, t, ti, secs)
			if errors.Is(err, errMoved) {
				continue
			}
			return rec, err
		}
		switch {
		case errors.Is(err, rpctypes.ErrLeaseNotFound):
			// The lease is gone. If the key moved to another lease (a renewal
			// with a longer TTL, or through another handle), follow it.
			lease, ok, cerr := s.current(ctx, t, ti.key)
			if cerr != nil {
				return store.Record{}, cerr
			}
			if !ok || lease == ti.lease {
				s.endedTerm(ti.lease, t)
				return store.Record{}, store.ErrNotHeld
			}
			ti.lease = lease
			continue
		case err != nil:
			return store.Record{}, err
		}
		lease, ok, err := s.current(ctx, t, ti.key)
		if err != nil {
			return store.Record{}, err
		}
		if !ok {
			s.endedTerm(ti.lease, t)
			return store.Record{}, store.ErrNotHeld
		}
		if lease != ti.lease {
			ti.lease = lease // moved to another lease meanwhile: renew that one
			continue
		}
		s.remember(t, ti)
		if ttl < secs {
			return s.extend(ctx, t, ti, secs)
		}
		granted := time.Duration(ttl) * time.Second
		return store.Record{Term: t, Remaining: granted - time.Since(sent), TTL: granted, Metadata: ti.metadata}, nil
	}
	return store.Record{}, fmt.Errorf("the term's key kept moving between etcd leases")
}

// errMoved: adopt found that the term's key had left the lease it read.
var errMoved = errors.New("the term's key moved to another lease")

// extend moves term t's key (just kept alive, so live) to a new etcd lease of
// secs seconds, keeping the key and so its create revision, and revokes the
// old lease.
func (s *Store) extend(ctx context.Context, t store.Term, ti termInfo, secs int64) (store.Record, error) {
	g, sent, aliveUntil, moved, err := s.moveKey(ctx, t, ti, secs)
	if err != nil {
		return store.Record{}, err
	}
	if !moved {
		return store.Record{}, store.ErrNotHeld
	}
	s.bindLease(g.ID, t, aliveUntil, false)
	s.revokeLease(ti.lease)
	ti.lease = g.ID
	s.remember(t, ti)
	granted := time.Duration(g.TTL) * time.Second
	return store.Record{Term: t, Remaining: granted - time.Since(sent), TTL: granted, Metadata: ti.metadata}, nil
}

// moveKey grants a new etcd lease of secs seconds and moves term t's key onto
// it, in a transaction that applies only while the key is still t's (create
// revision, holder) and still on ti.lease; the key, and so its create
// revision and the token, are kept. It returns the grant, when its request
// was sent, how long the new lease surely lives, and whether the move
// applied. If it did not (or failed), the new lease is revoked.
func (s *Store) moveKey(ctx context.Context, t store.Term, ti termInfo, secs int64) (*clientv3.LeaseGrantResponse, time.Time, time.Time, bool, error) {
	sent := time.Now()
	g, err := s.cli.Grant(rctx(ctx), secs)
	if err != nil {
		return nil, sent, time.Time{}, false, fmt.Errorf("grant a lease: %w", err)
	}
	aliveUntil := sent.Add(time.Duration(g.TTL) * time.Second)
	s.trackLease(g.ID, secs, aliveUntil)
	resp, err := s.cli.Txn(rctx(ctx)).If(
		clientv3.Compare(clientv3.CreateRevision(ti.key), "=", t.Token),
		clientv3.Compare(clientv3.Value(ti.key), "=", t.Holder),
		clientv3.Compare(clientv3.LeaseValue(ti.key), "=", ti.lease),
	).Then(clientv3.OpPut(ti.key, t.Holder, clientv3.WithLease(g.ID))).Commit()
	if err != nil {
		s.revokeLease(g.ID)
		return nil, sent, time.Time{}, false, fmt.Errorf("move the key to a new lease: %w", err)
	}
	if !resp.Succeeded {
		s.revokeLease(g.ID)
		return g, sent, aliveUntil, false, nil
	}
	return g, sent, aliveUntil, true, nil
}

// adopt renews term t, whose live key is on ti.lease, a lease this handle
// does not keep alive for t, by moving the key onto a new lease of this
// handle's (keeping the key, so its create revision and token) and revoking
// the old one. It never sends a keep-alive for ti.lease: the handle that
// granted it reuses it for its next term once t is released there, and a
// keep-alive from here, sent before that release and applied after it, would
// extend that next term.
//
// The move must not revive a term whose lease has expired but whose key etcd
// has not deleted yet (it revokes expired leases on a 500 ms tick): adopt
// first reads the old lease's time to live, and if the move's answer comes
// back later than that, it revokes the new lease (ending t: the renewal fails
// with ErrNotHeld) rather than trust a move that may have come too late.
// It returns errMoved if the key left ti.lease meanwhile.
func (s *Store) adopt(ctx context.Context, t store.Term, ti termInfo, secs int64) (store.Record, error) {
	sent := time.Now()
	tl, err := s.cli.TimeToLive(rctx(ctx), ti.lease)
	if err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return store.Record{}, fmt.Errorf("time to live of lease %x: %w", int64(ti.lease), err)
	}
	if err != nil || tl.TTL <= 0 {
		// The lease has ended (or has expired and etcd is about to delete
		// the key). If the key is still on it, the term has ended.
		lease, ok, err := s.current(ctx, t, ti.key)
		if err != nil {
			return store.Record{}, err
		}
		if !ok || lease == ti.lease {
			return store.Record{}, store.ErrNotHeld
		}
		return store.Record{}, errMoved
	}
	// etcd rounds the time left down to whole seconds, and the lease lives at
	// least that long after etcd answered, which was after sent.
	oldAliveUntil := sent.Add(time.Duration(tl.TTL) * time.Second)
	g, gsent, aliveUntil, moved, err := s.moveKey(ctx, t, ti, secs)
	if err != nil {
		return store.Record{}, err
	}
	if !moved {
		return store.Record{}, errMoved
	}
	if !time.Now().Before(oldAliveUntil) {
		// The move may have landed after the old lease expired. End the term
		// by revoking the new lease, which deletes the key.
		s.termsMu.Lock()
		s.dropLocked(g.ID)
		s.termsMu.Unlock()
		rctx2, cancel := context.WithTimeout(context.WithoutCancel(ctx), revokeTimeout)
		defer cancel()
		if _, err := s.cli.Revoke(rctx2, g.ID); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			s.revokeLater(g.ID)
			return store.Record{}, fmt.Errorf("moved the key to a new lease too late to trust, and revoking that lease failed: %w", err)
		}
		return store.Record{}, store.ErrNotHeld
	}
	s.bindLease(g.ID, t, aliveUntil, false)
	s.revokeLease(ti.lease)
	ti.lease = g.ID
	s.remember(t, ti)
	granted := time.Duration(g.TTL) * time.Second
	return store.Record{Term: t, Remaining: granted - time.Since(gsent), TTL: granted, Metadata: ti.metadata}, nil
}

// Release implements store.Store: it deletes exactly the term's key (in a
// transaction comparing its create revision and holder); waiters wake on the
// delete. The term's etcd lease, which now carries no key, goes back to this
// handle's pool for its next grant if this handle granted it and no
// keep-alive for it is unanswered; otherwise it is revoked in the background.
func (s *Store) Release(ctx context.Context, t store.Term) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	if err := store.ValidateTerm(t); err != nil {
		return fmt.Errorf("leasehold/etcd: release: %w", err)
	}
	ti, err := s.lookup(ctx, t)
	if err != nil {
		return fmt.Errorf("leasehold/etcd: release %s: %w", t, err)
	}
	resp, err := s.cli.Txn(rctx(ctx)).If(
		clientv3.Compare(clientv3.CreateRevision(ti.key), "=", t.Token),
		clientv3.Compare(clientv3.Value(ti.key), "=", t.Holder),
	).Then(clientv3.OpDelete(ti.key, clientv3.WithPrevKV())).Commit()
	if err != nil {
		return fmt.Errorf("leasehold/etcd: release %s: %w", t, err)
	}
	s.forget(t)
	if !resp.Succeeded {
		s.endedTerm(ti.lease, t)
		return fmt.Errorf("leasehold/etcd: release %s: %w", t, store.ErrNotHeld)
	}
	if prev := resp.Responses[0].GetResponseDeleteRange().PrevKvs; len(prev) > 0 {
		// The key was on this lease when it was deleted: it carries nothing
		// of t now, and (a lease carries one key at a time) nothing else.
		p := clientv3.LeaseID(prev[0].Lease)
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
	if err := s.check(ctx); err != nil {
		return store.Record{}, err
	}
	if err := store.ValidateName(name); err != nil {
		return store.Record{}, fmt.Errorf("leasehold/etcd: get: %w", err)
	}
	r, err := s.get(ctx, name)
	if err != nil {
		return store.Record{}, fmt.Errorf("leasehold/etcd: get %q: %w", name, err)
	}
	return r, nil
}

func (s *Store) get(ctx context.Context, name string) (store.Record, error) {
	pfx, rk := s.lockPrefix(name), s.recordKey(name)
	resp, err := s.cli.Txn(rctx(ctx)).Then(
		clientv3.OpGet(pfx, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend)),
		clientv3.OpGet(rk),
	).Commit()
	if err != nil {
		return store.Record{}, err
	}
	var rec *mvccKV
	if r := resp.Responses[1].GetResponseRange().Kvs; len(r) > 0 {
		rec = &mvccKV{r[0].Key, r[0].Value, r[0].CreateRevision, r[0].ModRevision, r[0].Lease}
	}
	contenders, _ := split(pfx, resp.Responses[0].GetResponseRange().Kvs)
	if len(contenders) > 0 {
		return s.describe(ctx, name, contenders[0], rec)
	}
	if rec == nil {
		return store.Record{}, store.ErrNotFound
	}
	return store.Record{Term: store.Term{Name: name, Token: rec.mod}}, nil
}

// Fence returns the comparison that makes an etcd transaction apply only
// while term t holds: the term's key still exists with the term's create
// revision. Put it in your own transaction, on the same etcd cluster:
//
//	cmp, err := st.Fence(ctx, lease.Term())
//	resp, err := cli.Txn(ctx).If(cmp).Then(clientv3.OpPut("config", v)).Commit()
//	if err == nil && !resp.Succeeded { /* the term has ended: nothing was written */ }
//
// The comparison holds until the term is released, expires or is replaced, and
// never again afterwards (create revisions are never reused). Fence itself
// returns an error matching store.ErrNotHeld if t is not the live term now.
func (s *Store) Fence(ctx context.Context, t store.Term) (clientv3.Cmp, error) {
	if err := s.check(ctx); err != nil {
		return clientv3.Cmp{}, err
	}
	if err := store.ValidateTerm(t); err != nil {
		return clientv3.Cmp{}, fmt.Errorf("leasehold/etcd: fence: %w", err)
	}
	ti, err := s.lookup(ctx, t)
	if err != nil {
		return clientv3.Cmp{}, fmt.Errorf("leasehold/etcd: fence %s: %w", t, err)
	}
	if _, ok, err := s.current(ctx, t, ti.key); err != nil {
		return clientv3.Cmp{}, fmt.Errorf("leasehold/etcd: fence %s: %w", t, err)
	} else if !ok {
		s.forget(t)
		return clientv3.Cmp{}, fmt.Errorf("leasehold/etcd: fence %s: %w", t, store.ErrNotHeld)
	}
	return FenceCmp(ti.key, t.Token), nil
}

// FenceCmp is the comparison Fence returns, for a caller that already knows
// the term's key (Store.TermKey): key exists with create revision token.
func FenceCmp(key string, token int64) clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(key), "=", token)
}

// TermKey returns the etcd key of term t (the contender key it holds the
// lease with), or an error matching store.ErrNotHeld if t is not the term
// leasehold last granted for its name.
func (s *Store) TermKey(ctx context.Context, t store.Term) (string, error) {
	if err := s.check(ctx); err != nil {
		return "", err
	}
	if err := store.ValidateTerm(t); err != nil {
		return "", fmt.Errorf("leasehold/etcd: term key: %w", err)
	}
	ti, err := s.lookup(ctx, t)
	if err != nil {
		return "", fmt.Errorf("leasehold/etcd: term key %s: %w", t, err)
	}
	return ti.key, nil
}

// Watch implements store.Watcher. It watches the name's contender prefix and
// wakes on every key created or deleted there: a grant, a release, an etcd
// tool queueing, and the delete etcd makes when a crashed holder's lease
// expires. Watch returns only once etcd has created the watch (a watch from
// the revision after the server's current one, so it starts in etcd's synced
// group and an event reaches it in about one round trip, with no wait for the
// 100 ms resync of watchers that start in the past); every change after
// Watch returns is seen. If the client switches members, clientv3 resumes the
// watch from the revision after the last one seen. The channel closes when ctx
// ends, the store closes, or the watch breaks (for instance when the member
// loses its raft leader); the caller then polls and may watch again.
func (s *Store) Watch(ctx context.Context, name string) (<-chan struct{}, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	if err := store.ValidateName(name); err != nil {
		return nil, fmt.Errorf("leasehold/etcd: watch: %w", err)
	}
	pfx := s.lockPrefix(name)
	wctx, cancel := context.WithCancel(ctx)
	// clientv3.Watch returns once the server created the watch (or it
	// failed), which can take long on a member cut off from its cluster:
	// bound it. The created notice is then the first response.
	timer := time.NewTimer(watchCreateTimeout)
	defer timer.Stop()
	created := make(chan clientv3.WatchChan, 1)
	go func() {
		created <- s.cli.Watch(rctx(wctx), pfx, clientv3.WithPrefix(), clientv3.WithCreatedNotify())
	}()
	var wch clientv3.WatchChan
	select {
	case wch = <-created:
	case <-timer.C:
	case <-s.closing:
	}
	if wch == nil {
		cancel()
		<-created
		if err := s.check(ctx); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("leasehold/etcd: watch %q: not created within %v", name, watchCreateTimeout)
	}
	select {
	case wr, ok := <-wch:
		if !ok || wr.Err() != nil || !wr.Created {
			cancel()
			err := errors.New("watch closed before it was created")
			if ok && wr.Err() != nil {
				err = wr.Err()
			}
			return nil, fmt.Errorf("leasehold/etcd: watch %q: %w", name, err)
		}
	case <-timer.C:
		cancel()
		return nil, fmt.Errorf("leasehold/etcd: watch %q: not created within %v", name, watchCreateTimeout)
	case <-s.closing:
		cancel()
		return nil, store.ErrClosed
	}
	out := make(chan struct{}, 1)
	s.spawn(func() {
		defer close(out)
		defer cancel()
		for {
			select {
			case <-s.closing:
				return
			case wr, ok := <-wch:
				if !ok || wr.Canceled || wr.Err() != nil {
					return
				}
				for _, ev := range wr.Events {
					if isContender(pfx, ev.Kv.Key) {
						select {
						case out <- struct{}{}:
						default:
						}
						break
					}
				}
			}
		}
	})
	return out, nil
}

// watchCreateTimeout bounds how long Watch waits for etcd to create a watch, so
// that a candidate on a member cut off from the cluster falls back to polling.
const watchCreateTimeout = 3 * time.Second

// List implements store.Lister: the record of every name leasehold has
// granted under the prefix, ordered by name. Names only etcd tools used are
// not listed.
func (s *Store) List(ctx context.Context) ([]store.Record, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	dir := s.prefix + recordDir
	resp, err := s.cli.Get(rctx(ctx), dir, clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
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
	if err := s.check(ctx); err != nil {
		return store.Record{}, err
	}
	if err := store.ValidateName(name); err != nil {
		return store.Record{}, fmt.Errorf("leasehold/etcd: force release: %w", err)
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
		resp, err := s.cli.Get(rctx(ctx), s.lockPrefix(name), clientv3.WithPrefix(),
			clientv3.WithMinCreateRev(r.Token), clientv3.WithMaxCreateRev(r.Token))
		if err != nil {
			return store.Record{}, fmt.Errorf("leasehold/etcd: force release %q: %w", name, err)
		}
		if len(resp.Kvs) == 0 {
			continue
		}
		kv := resp.Kvs[0]
		dresp, err := s.cli.Txn(rctx(ctx)).If(clientv3.Compare(clientv3.CreateRevision(string(kv.Key)), "=", r.Token)).
			Then(clientv3.OpDelete(string(kv.Key))).Commit()
		if err != nil {
			return store.Record{}, fmt.Errorf("leasehold/etcd: force release %q: %w", name, err)
		}
		if !dresp.Succeeded {
			continue
		}
		if !strings.HasPrefix(r.Holder, "etcd:") {
			s.revokeLease(clientv3.LeaseID(kv.Lease))
		}
		return r, nil
	}
	return store.Record{}, fmt.Errorf("leasehold/etcd: force release %q: the holder kept changing", name)
}

// Close implements store.Store. It ends this handle's watches, waits for its
// background revocations (a few seconds at most), and closes the etcd client
// if the store opened it (Open, OpenURL). It does not release any lease.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.closing)
	s.mu.Unlock()
	// Revoke the pooled leases (they carry no key) and let background
	// revocations finish (each is bounded by revokeTimeout) before the client
	// goes: a revoked lease frees etcd at once, while one left behind lingers
	// until its TTL runs out.
	var revokes sync.WaitGroup
	for _, id := range s.pooledLeases() {
		revokes.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), revokeTimeout)
			defer cancel()
			s.cli.Revoke(ctx, id) //nolint:errcheck // best effort; the lease expires anyway
		})
	}
	revokes.Wait()
	s.wg.Wait()
	s.kaWG.Wait() // its stream ends with s.closing
	var err error
	if s.own {
		err = s.cli.Close()
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("leasehold/etcd: close: %w", err)
	}
	return nil
}
