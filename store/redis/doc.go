// Package redis is a leasehold lease store on Redis (standalone, Sentinel
// failover or Cluster), for leader election over best-effort singleton work
// and for locks, where Redis is already running.
//
// # How it works
//
// A lease is the well-known Redis lock: one key holding a unique holder
// string with a PX expiry, set only if absent (SET NX PX semantics), renewed
// by a script that compares the value and PEXPIREs, released by a script that
// compares and deletes, so a late client can never delete or extend a newer
// holder's key. Expiry is judged by Redis on its own clock. The lock key holds
// the plain holder string, so bsm/redislock and go-redsync clients using the
// same key exclude leasehold holders and are excluded by them.
//
// For a lease name N under the prefix P (default "leasehold:") the store uses
//
//	P{N}          the lock: the holder string, PX = the term's TTL
//	P{N}:token    the fencing token counter: raised by each grant, never expires
//	P{N}:term     the term's record, "token:ttl:metadata", with the same PX as the lock
//	P{N}:events   the pub/sub channel on which releases are published (not grants: a
//	              waiter has nothing to do while the lease is held)
//
// The {N} hash tag puts every key of a lease in one hash slot, so each
// operation is one atomic script on Redis Cluster too. Renew and Release
// compare both the holder and the term's token, so a late call from an older
// term of the same holder cannot touch a newer one.
//
// Each call is one EVALSHA (after a restart or SCRIPT FLUSH, go-redis sends a
// script once more with EVAL). Taking a free lease runs four Redis commands
// inside the script (TIME, SET NX PX, the counter's SET ... GET, and the
// term record's SET PX; with tokens=counter three: SET NX PX, INCR and the
// record's SET) and releasing one runs five (GET of the lock and of the term record, PTTL,
// DEL, PUBLISH), where bsm/redislock's lock and unlock run one and two: the
// counter, the exact-term check and the publish are what the token and the
// instant hand-off cost.
//
// # What is guaranteed, and what is not
//
// A Redis lease is best effort. A holder whose process pauses longer than the
// lease (GC, VM migration, SIGSTOP) wakes up after a rival took over; leasehold
// cancels the holder's context at its local safe deadline, before Redis lets
// a rival in, but work already in flight at that moment is not stopped by
// Redis. Use Redis leases for work where a rare double run is harmless (a cron
// job, a cache warmer), or fence the resource with the token.
//
// The fencing token survives more than the lock does. Redis acknowledges
// writes before they are on disk (unless appendonly yes with appendfsync
// always), and replication is asynchronous, so a restart or a failover to a
// replica can lose the lock (a second holder may then be granted while the
// first still believes it holds) and the token counter. By default
// (Options.Tokens TokensServerTime, URL tokens=server_time) a grant's token is
// max(counter+1, the server's TIME in microseconds), so a grant after the
// counter is lost is still above every earlier token, unless the server's
// clock was stepped back across the loss (see Tokens). With TokensCounter
// (tokens=counter) tokens are 1, 2, 3, ... and start again after a loss; the
// store then detects only the regress it can see: each Store handle
// remembers the highest token it has seen per lease, and an Acquire that
// finds the counter below it (or missing) raises the counter to that token
// and grants nothing, returning a *TokenRegressError (errors.Is
// ErrTokenRegress); the next Acquire is granted a higher token. Get reports
// the same error. Options.Floor (URL token_floor=N) gives every process such
// a floor, for example the highest token the fenced resource has accepted.
// Tokens a forgetful Redis hands out to processes that saw nothing may
// otherwise repeat old ones: a fenced resource refuses the lower ones, and an
// equal one only if it remembers the holder of the highest token.
//
// For a token that does not rest on a clock, use the PostgreSQL, SQLite or etcd store.
// Redlock (a majority of independent Redis masters) is not implemented: it
// still gives no fencing token.
//
// # Capabilities
//
// The Store implements store.Watcher (one pub/sub connection per Store, the
// publish is inside the grant and release scripts; expiry wakes waiters from
// the lock's PTTL), store.BatchRenewer (one pipeline), store.Lister (SCAN of
// the prefix) and store.ForceReleaser.
//
// # Security
//
// Use rediss:// (TLS) across any network, a Redis ACL user limited to the
// key prefix (see the README for the exact ACL), and password_file rather
// than a password in a URL on a command line. Errors and logs of this package
// never print the password.
package redis
