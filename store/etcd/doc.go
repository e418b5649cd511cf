// Package etcd is the leasehold store on etcd v3: a consensus-backed lease
// whose fencing token is the etcd revision.
//
// # Two clients
//
// [Open] and [OpenURL] (what the leasehold command uses) reach etcd through
// the store's own small client, internal/etcdwire: the few gRPC calls the
// store makes, over net/http's HTTP/2, with messages encoded by hand. It
// links neither go.etcd.io/etcd/client/v3 nor google.golang.org/grpc (about
// 20 MB of the command). A program with a *clientv3.Client of its own runs
// the same store code on it with package etcdv3client (New, and Fence as a
// clientv3.Cmp). Both pass the same conformance suite; README.md compares
// them.
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
// last grant; its mod revision is that grant's token (for a grant made from a
// queue place, the token is in its value). It lets Get report the
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
// seconds (any name, any holder) puts its key on it. A pooled lease that has
// lost at most an eighth of its TTL (its expiry known from the send time of
// its last answered grant or keep-alive) backs the grant as it is, and the
// grant's Remaining is what it has left: the core shortens the term by the
// shortfall, counted from its own send time (store.Store's Acquire). An older
// one gets a keep-alive sent in the same step; the grant is counted only if
// that keep-alive was answered, and its Remaining is the TTL the keep-alive
// restored. A lock and an unlock are then two raft writes, and a keep-alive
// only once per eighth of the TTL of reuse. Pooled leases carry no key; they are revoked when
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
//     one per attempt, on a stream of its own, and so knows which were
//     answered; clientv3's KeepAliveOnce hid its internal retries.)
//   - Release deletes only its term's key (the transaction compares the key's
//     create revision and holder); the token is the key's create revision, so
//     it still rises on every grant, on a reused lease as on a new one.
//
// The acquire path sends its keep-alives on one long-lived stream per handle
// (a new stream per keep-alive costs a stream set-up each time; on clientv3
// with user/password authentication also an Authenticate request, itself a
// raft write).
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
// condition (etcdv3client.Fence gives it as a clientv3 comparison) makes a
// transaction apply only while the exact term holds; in other resources by
// comparing the token.
//
// # Working with etcd's own tools
//
// `etcdctl lock P+N` and `etcdctl elect P+N` (and concurrency.NewMutex /
// concurrency.NewElection on that prefix) contend with leasehold for name N.
// The value of a leasehold key is the holder identity, so `etcdctl elect -l`
// prints the leasehold leader. A foreign holder is reported with the Holder
// "etcd:" plus the rest of its key (its lease ID in hex) and its value as the
// Metadata. Without Config.Fair leasehold does not queue: it only writes its
// key when no other contender key exists, so etcd tools that are already
// waiting get the lock first. With Config.Fair (store.Queuer, queue.go) a
// waiter's place is a contender key in etcd's own queue, ahead of the etcd
// tools that queue after it and behind those before it; its holder's Acquire
// makes the place the term once it is the lowest key, with a read and no
// write (as etcd's Mutex takes the lock; the record follows in a transaction
// sent after the grant), and the term's token is the place key's create
// revision (the record notes it: its own mod revision is later). Avoid names that are a path prefix of other names in use ("job" and
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
