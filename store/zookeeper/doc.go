// Package zookeeper is the leasehold store on Apache ZooKeeper: the lock
// recipe of ZooKeeper's own documentation (an ephemeral sequential node per
// contender, the lowest holds), whose fencing token is the holder node's
// creation zxid.
//
// # How a lease is kept
//
// Lease name N lives at the path Root/N (Config.Root, the store's chroot).
// A contender creates an ephemeral sequential child there, named
// "_c_<id>-lock-<sequence>", the form zk.Lock (go-zookeeper/zk) and
// Curator's InterProcessMutex use, so that those clients and leasehold
// exclude each other on one path (see "Working with zk.Lock and Curator").
// The child with the lowest sequence holds the lease.
//
//   - Acquire lists the children. If another contender's node is there, it
//     creates nothing and answers ErrHeld with that holder's record.
//     Otherwise it creates its node, in one transaction (a multi) with a
//     write of a small record on the path node and the deletion of any node
//     of the same holder (an earlier term, which the new one replaces). The
//     term is granted if its node is the lowest: the path node's stat,
//     which the record's write returns from inside that transaction, says
//     so when the new node is the path's only child; else the children are
//     listed again. A node that is not the lowest is deleted again.
//     Leasehold does not queue, unless it is fair (Config.Fair): a fair
//     waiter's place is a contender node in the path, which becomes the
//     term once lowest (see the README's "The fair queue"); a refused
//     Acquire leaves nothing behind.
//   - A handle that saw a lease go free last (it released the term, or its
//     watch saw the node its waiters wait on deleted) skips the first
//     listing on the next Acquire of that name: it creates its node at
//     once, and the same check decides. A node that is not the lowest (the
//     guess was wrong, or the holder's own earlier node is below it) is
//     deleted again and the Acquire goes on as above. An uncontended
//     acquire and release, or a hand-off to a waiting leasehold client, is
//     then one write to take the lease and one to give it back.
//   - The token is the node's czxid, the zxid of the transaction that
//     created it: the ensemble's transaction id, which rises with every
//     write to the ensemble and is never reused. The sequence number is not
//     a token: it counts the path node's child changes and starts again at
//     0 when the path node is deleted and created again.
//   - A term lives in a ZooKeeper session (see "Sessions"), and its node is
//     deleted by ZooKeeper when that session expires: when the ensemble has
//     not heard from the session for its timeout, which is the term's ttl.
//   - Renew sends a sync on the term's session, which a follower forwards to
//     the leader and the leader refuses for an expired session, then checks
//     that the node still exists in that session with the term's czxid.
//     The term then lives ttl from the moment the renewal was sent.
//   - Release deletes exactly the term's node (its name holds a random
//     part, unique to the attempt that created it); waiters wake on the
//     delete.
//   - Get reads through the store's control session after a sync. With no
//     contender, the lease is free and Get reports the token of the last
//     node leasehold created there (the path node's mzxid: the record was
//     written in the node's own transaction).
//
// # Sessions
//
// ZooKeeper fixes a session's timeout when the session opens, and the
// client keeps a session alive by itself (it pings) for as long as its
// process runs. So a handle keeps one term session per ttl (the timeout
// the server grants must be at least the ttl; Acquire refuses a ttl above
// the ensemble's maxSessionTimeout, and below its minSessionTimeout, with
// ErrInvalid), shared by the terms of every name and holder with that ttl,
// and ends each term itself at its deadline: the send time of its last
// successful acquire or renewal plus its ttl, when it deletes the node. A
// term whose process stops (crash, pause, partition) is ended by ZooKeeper
// instead, a session timeout after it last heard from the process, which
// is never before the holder's deadline. Hence:
//
//   - A renewal cannot lengthen a term past the ttl it was acquired with
//     (the session's timeout): Renew refuses a longer ttl with ErrInvalid.
//     leasehold's core always renews with the ttl it acquired with.
//   - A term is renewed through the handle that acquired it: only that
//     handle has its session. Release, Get and ForceRelease work through
//     any handle.
//   - Close does not release a lease: it severs the sessions that carry
//     terms (closes their connections without ZooKeeper's closeSession,
//     which would delete their nodes at once), so their terms end when
//     ZooKeeper expires them, as if the process had stopped.
//   - A connection loss ends nothing by itself: the client moves to another
//     server and keeps its session, if it can within the session timeout.
//     Until then renewals fail, and the holder stops trusting its term at
//     its own deadline (leasehold's core: RenewDeadline after it sent its
//     last successful renewal). A session the ensemble expired meanwhile
//     makes the term's renewals answer ErrNotHeld; nothing ever extends a
//     term but a renewal that reached the leader.
//
// # Time
//
// The leader of the ensemble expires sessions, on its own clock: a session
// expires when the leader has not heard of it for its timeout (rounded up
// to the next tick). The leader hears of a session that talks to a
// follower from that follower, which reports the sessions it heard from
// every half tick; the store touches each term session every half tick. So
// the leader may date a term's last renewal up to a tick before it was
// sent, and the store's Limits say so: TimeResolution is a tick, and a
// holder's margin LeaseDuration - RenewDeadline must exceed it (leasehold
// checks this when an elector, lock or keeper is built). MinLeaseDuration
// is the ensemble's minSessionTimeout (two ticks unless configured). Open
// learns both by asking a server for the shortest and longest sessions it
// grants; set minSessionTimeout no lower than two ticks, or the store
// underestimates the tick. A new leader gives every session a full timeout
// from its election, so a leader change makes terms longer, never shorter.
//
// A lease alone is best effort: a holder that is paused longer than its
// lease can wake and act after a rival has taken over. Writes that must
// not come from a stale holder should be fenced: compare the token (the
// czxid) in the resource, or, inside ZooKeeper, make the write a multi
// that checks the term's node still exists.
//
// # Working with zk.Lock and Curator
//
// go-zookeeper/zk's Lock (zk.NewLock(conn, Store.Path(N), acl)) and
// Curator's InterProcessMutex (and LeaderSelector) on the path Store.Path(N)
// contend with leasehold for name N: they order the children by the digits
// after the last "lock-", and leasehold's nodes carry such a sequence. A
// foreign holder is reported with the Holder "zookeeper:" plus its node's
// name, its czxid as the token, and its node's data (if printable) as the
// Metadata; its Remaining is the ensemble's maxSessionTimeout, the longest
// its lock can outlive its client. zk.Lock and Curator queue: their waiters
// watch their predecessor and take the lock in order, and a fair leasehold
// waiter's place queues with them. Leasehold without Fair does not queue
// (a refused Acquire leaves nothing behind), so it takes a lease only once
// every queued contender is gone; its waiters watch the last
// contender node, the one a new node would queue behind, and only that
// node's deletion wakes them. Avoid lease names that are a path prefix of
// other names in use ("job" and "job/x") when zk.Lock or Curator share
// them: they take every child of the path for a contender, and fail on the
// nested path's node (leasehold itself skips children without a sequence).
//
// # Security
//
// Config.Username and Config.Password add ZooKeeper digest credentials to
// every session. The nodes the store creates get Config.ACL: by default,
// all permissions for the authenticated user only (with credentials), or
// for anyone (without). A leasehold user needs, on each lease's path node:
// READ (list the contenders, read the holder), CREATE (its contender
// nodes), DELETE (deleting a child needs DELETE on its parent) and WRITE
// (the record on the path node); on the nodes above it, CREATE where
// leasehold is to create a missing path, and READ to List. It never needs
// ADMIN. The store refuses nothing itself: a missing permission comes back
// from ZooKeeper as "zk: not authenticated" on the request that needed it.
package zookeeper
