// Package kubernetes is a leasehold store on coordination.k8s.io/v1 Lease
// objects, the objects client-go's leader election uses. A leasehold elector
// and a client-go LeaderElector (resourcelock.LeaseLock) configured with the
// same namespace and name compete for one Lease correctly: each respects the
// other's terms, and each takeover, by either, raises the fencing token.
//
//	hc, _ := rest.HTTPClientFor(restConfig) // client-go's credentials, if you have a rest.Config
//	st, _ := kubernetes.New(kubernetes.Config{Server: restConfig.Host, HTTPClient: hc, Namespace: "jobs"})
//	e, _ := leasehold.NewElector(st, "nightly-report", leasehold.Config{Identity: podName})
//
// or, for the CLI, kubernetes://NAMESPACE (see OpenURL).
//
// # Client
//
// The store does not link client-go: it speaks JSON over HTTP to the one
// resource it uses, coordination.k8s.io/v1 leases in one namespace (get,
// create, update, list, and watch as a ?watch=true stream), and limits its
// own request rate (Config.QPS). Error answers are *APIError; IsForbidden
// tells an RBAC refusal. OpenURL finds the credentials itself: in a pod, the
// service account's token (read again every minute and after a 401, so a
// rotated token is picked up) and CA; else the kubeconfig, merged from
// $KUBECONFIG's files as kubectl merges them, with tokens, token files,
// client certificates, user name and password, impersonation (as,
// as-groups, as-uid, as-user-extra), exec credential plugins
// (client.authentication.k8s.io v1 and v1beta1, run without a terminal)
// and proxy-url. The legacy auth-provider entries are refused with an
// error saying so.
//
// # What it writes
//
// The Lease's spec is written exactly as client-go's LeaseLock writes it:
// holderIdentity, leaseDurationSeconds, acquireTime, renewTime and
// leaseTransitions. Acquire sets all five (acquireTime = renewTime = now);
// Renew keeps acquireTime and leaseTransitions and sets renewTime and the
// duration; Release writes what client-go's ReleaseOnCancel writes: an empty
// holderIdentity, leaseDurationSeconds 1, new times, and leaseTransitions
// kept. Holder metadata goes in the annotation leasehold.dev/metadata.
//
// Every write starts from the object it read and changes only those five
// fields and leasehold's own annotations: spec.strategy and
// spec.preferredHolder, which Kubernetes' coordinated leader election writes
// and its electors read, and the labels, other annotations and
// ownerReferences others put on the Lease, are kept.
//
// Every update carries the resourceVersion of the object it read, so the API
// server applies it only if nobody wrote in between (an update without one
// would be applied unconditionally; this store never sends one). A 409
// Conflict means another writer won the race: the store reads the Lease again
// and answers from what it finds, usually store.ErrHeld. Some writes start
// from the version this store saw last instead of a fresh read, and let the
// resourceVersion check decide: Renew and Release (the holder's own last
// write), and an Acquire while this store watches the Lease (the version its
// watch delivered last, if that one is free or expired by this store's
// clock, and the high-water mark as it last read or wrote it). A write from
// an out-of-date version is refused, and the next try reads. An Acquire
// refused while this store watches reserves the next token: it raises the
// high-water mark to it then, so that the grant after the release writes
// only the Lease (see the README for when a reserved token is granted).
//
// # Expiry without a server clock
//
// Kubernetes does not expire a Lease: renewTime and leaseDurationSeconds are
// just data, written with the writer's own wall clock. So, as client-go's
// elector does, a store judges a term expired only after it has seen the
// same version of the Lease (the same resourceVersion) unchanged for the
// term's full leaseDurationSeconds, on its own monotonic clock. Record.Remaining
// is that duration less how long this store has seen the version unchanged;
// a store reading a Lease for the first time gives the holder the whole
// duration, whatever its renewTime says, and a takeover of a crashed
// holder's lease comes one full duration after the contender first saw its
// last renewal. Timestamps are never compared across machines, so the rule
// tolerates any skew between the nodes' clocks; it assumes only that their
// clocks run at about the same rate.
//
// The holder's own deadline follows leasehold's rule for every store: it
// stops trusting its term RenewDeadline after it sent the last successful
// renewal. Any contender first saw that renewal after it was sent, and waits
// a whole LeaseDuration from then, so the holder has stopped before a rival
// can take over; LeaseDuration - RenewDeadline is the margin for the clocks'
// rate drift.
//
// This differs from the SQL, Redis and etcd stores, where the server's clock
// decides expiry and every contender agrees on it. Here each contender judges
// for itself. Two consequences: a contender that starts (or restarts) while a
// crashed holder's lease is stale still waits a full duration before taking
// over; and "expired" is an opinion of one store value, not a fact in the
// API server. A store value remembers what it has seen, so keep one per
// process rather than one per call.
//
// # Fencing tokens
//
// The fencing token is the Lease's leaseTransitions. client-go increments it
// whenever the holder changes, so a client-go elector taking over also raises
// it; leasehold increments it on every grant, including a new term of the
// same holder. A leasehold term's token is therefore strictly greater than
// that of every term before it, leasehold's or client-go's, and a resource
// that refuses a token lower than the last it saw refuses a stale leasehold
// writer (a fence that also refuses the last token from another holder, as
// every leasehold fence does, refuses it even where one token was granted
// twice). Renew and Release keep it. (client-go counts changes of holder,
// not terms: a client-go elector that renews its own lapsed lease keeps the
// number.)
//
// What the token is worth rests on the Lease object, which lives in etcd
// behind the API server and survives restarts of both, and on the lease's
// high-water mark: a second Lease object (HighWaterName) that every grant
// raises to its token, with the version it read, before it writes the Lease.
// Deleting the Lease (kubectl delete lease) therefore does not restart its
// tokens: the next grant is above the mark. Deleting the mark too does: a
// process that never saw the old tokens then starts again at 1 (a store that
// saw them still grants above them). leaseTransitions is an int32: a lease
// runs out of tokens after about two billion terms, and Acquire then fails.
//
// A term granted by client-go has no token of leasehold's making: its first
// holder has leaseTransitions 0, which Get reports as token 0. Only
// leasehold's own grants are at least 1.
//
// client-go's elector has no token of its own, and its timing is looser
// than leasehold's: its leader steps down only once renewals have failed for
// RenewDeadline, counted from a RetryPeriod after its last successful renewal
// returned; and with ReleaseOnCancel it clears the Lease before it cancels
// its work's context (client-go asks its users to finish the work first).
// Where client-go and leasehold electors share a Lease, the client-go side
// keeps client-go's guarantees, no more: give it a LeaseDuration well above
// RenewDeadline + RetryPeriod.
//
// # Names
//
// A lease name that is a valid Kubernetes object name (a DNS subdomain:
// lower-case letters, digits, '-', '.') names its Lease directly; use such a
// name to share a Lease with client-go. Other lease names are mapped to an
// object name deterministically (see ObjectName) and recorded in the
// annotation leasehold.dev/name.
//
// # Durations
//
// leaseDurationSeconds is a whole number of seconds: TTLs are rounded up to
// a second, and MinTTL is one second.
//
// # Permissions
//
// The store needs get, create, update, watch and delete on leases in its
// namespace (delete only removes an emptied fair queue; without it the
// object stays); deploy/kubernetes/rbac.yaml is that Role, and the package's
// tests run the conformance suite under it. List (store.Lister, for
// `leasehold status`) also needs list.
//
// # Watch
//
// The store implements store.Watcher with a watch on the one Lease object
// (field selector metadata.name), started from the version it has just read,
// so subscribing costs one read and causes no wake-up of its own. A waiter
// wakes when the holder or token changes, in particular at once when the holder releases, by leasehold's
// Release or client-go's ReleaseOnCancel; renewals do not wake it. A crashed
// holder's expiry is not an event: waiters wake for it on their own timer,
// set from Record.Remaining.
//
// # Fair queue
//
// The store implements store.Queuer (leasehold.Config.Fair) with one more
// Lease object per queued lease, QueueName, holding the places in order in
// an annotation, written with the version read. A place is judged expired
// as a Lease is, by an observer that has seen it unrefreshed for its ttl on
// its own clock, and removed conditional on the version it read; a place
// grants nothing, so a wrong judgement can only reorder waiters. A store
// that has a place in a lease's queue also follows the queue object when it
// watches the lease, and wakes when a place leaves. See queue.go.
package kubernetes
