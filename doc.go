// Package leasehold makes exactly one node do work that must never run twice,
// and gives the resource that work writes to a number with which to refuse a
// node that has lost that role.
//
// It offers four things built on one lease mechanism:
//
//   - an [Elector] for leader election: a long-lived role kept by renewal,
//     whose guarded work runs under a context cancelled before any rival could
//     legally take over;
//   - a [Lock] for a short critical section, with optional keep-alive;
//   - a [Keeper] for many leases of one process (one per shard), renewed
//     together in one batch;
//   - a [Scheduler] for a job that must run at most once per period across
//     nodes (a cron job every replica carries), whose periods are claimed in
//     the store, not by any node's wall clock.
//
// A [Semaphore] is N locks under one name (N slots, each an ordinary lease,
// see [SlotName]): up to N holders at once, each with its slot's own token,
// which rises per slot; a resource fences each slot by its lease name.
//
// Config.MaxHold caps how long an Elector's or a Lock's term is kept, so a
// holder whose work is stuck cannot keep a lease for ever.
//
// All of them take one [Config], and hand out each term this process holds as
// a [Lease]: its name, its fencing token, its safe-until deadline, a context
// cancelled when the term must no longer be trusted, and Release. The
// fencing token is a number that rises on every grant of the lease, on every
// store. The stores (PostgreSQL, SQLite, Redis,
// etcd, Kubernetes Lease objects, and the in-memory store) live in packages
// under store/, behind the small contract in package store.
//
// # What is guaranteed, and what is not
//
// A lease alone is best effort. A holder can be paused (a GC pause, a VM
// migration, SIGSTOP), cut off, or slow, and wake believing it still leads.
// leasehold does two things about it:
//
//  1. The holder stops trusting itself early, on its own monotonic clock:
//     at safeUntil = (send time of its last successful acquire or renew) +
//     RenewDeadline, the work's context is cancelled, whatever a renewal in
//     flight may still say. RenewDeadline is below LeaseDuration, and a rival
//     may only take over once the store's own clock says LeaseDuration has
//     passed since the store granted or renewed the term. If the holder's
//     process is scheduled normally, its work has been told to stop before any
//     rival could start. A process frozen past its lease is not told anything
//     until it wakes; code that does not check its context is not stopped at all.
//
//  2. Every term carries a fencing token. A resource that checks the token in
//     the same statement or transaction as the write (see package fence)
//     refuses the writes of a stale holder, however late it wakes. With a fenced
//     resource, a stale holder's writes are refused; without one, they are not.
//
// Fencing is only as strong as the store's durability: a store that can lose
// its last write (Redis without fsync, an asynchronously replicated database
// after a failover) can hand out a token twice; each store's documentation
// says what it guarantees. Expiry is judged only by the store's clock (by the
// database's now(), Redis's PX, etcd's lease TTL); the Kubernetes store, whose
// server has no lease clock, follows client-go's rule of watching a record
// unchanged for a full lease duration.
//
// # Timings
//
// The defaults are a 15 s lease, renewed every 5 s, trusted for 10 s after each
// successful renewal was sent, retried every 2 s: see [Timings] for the
// arithmetic. After a loss a node keeps contending unless StopOnLoss is set.
// The lease is released only after the guarded work has returned.
//
// # Handing over
//
// [Handover] asks an Elector that leads to step down: its work's context is
// cancelled with [ErrHandedOver], and once the work has returned the term is
// ended, on a store with [store.Transferer] in the same write that reserves
// the lease for a named successor for a bounded window (on the store's clock),
// so that no other node takes it meanwhile. A request to a dead holder blocks
// nothing: it expires on the store's clock, and so does the dead term. Every
// Elector reads its lease's request once per renew interval while it leads.
//
// # Identities
//
// The holder identity is the configured identity (a host or pod name) plus a
// random suffix per process, so two processes configured alike are never the
// same holder.
package leasehold
