// Package storekit is the plumbing every lease store repeats, written once:
// for leasehold's own stores and for a third party writing one. It holds no
// rule of the lease contract itself (package store does, and the
// conformance suite in storetest checks it); it holds the shape around it.
// Standard library only.
//
// # Messages and bad input: Kit
//
// A store declares its Kit once:
//
//	var kit = storekit.Kit{Store: "mysql", MinTTL: MinTTL}
//
// kit.Invalid(op, format, args...) is the one way to build a bad-input
// error: "leasehold/mysql: <op>: invalid argument: <detail>", matching
// store.ErrInvalid. kit.Wrap(op, err) wraps a definite answer or a driver's
// error once: kit.Wrap("renew "+t.String(), store.ErrNotHeld). kit.Errorf is
// the same with a format.
//
// The argument checks every method starts with are kit.CheckAcquire,
// CheckRenew, CheckRelease, CheckName (Get, Watch, ForceRelease, History),
// CheckTerm and CheckTTL (RenewMany), and CheckHolder and CheckMetadata for
// a store's own operations. They apply package store's rules
// (store.ValidateName and the others) and the store's MinTTL, and report in
// the Invalid form. A method of a store then reads:
//
//	func (s *Store) Renew(ctx context.Context, t store.Term, ttl time.Duration) (store.Record, error) {
//		if err := s.life.Check(ctx); err != nil {
//			return store.Record{}, err
//		}
//		if err := kit.CheckRenew(t, ttl); err != nil {
//			return store.Record{}, err
//		}
//		...
//		if notLive {
//			return store.Record{}, kit.Wrap("renew "+t.String(), store.ErrNotHeld)
//		}
//		...
//	}
//
// # Open and closed: Lifecycle
//
// A Lifecycle field (life storekit.Lifecycle; a named field, so that its
// methods do not join the store's API) is the closed flag and the Close
// every store writes:
//
//	if err := s.life.Check(ctx); err != nil { ... }   // ErrClosed, or ctx.Err()
//	func (s *Store) Close() error { return s.life.Close(s.db.Close) }
//
// Close is idempotent (later calls return nil) and closes life.Done(), on
// which watches and background goroutines end. life.ClosedOr(err) turns a
// driver's error after Close into store.ErrClosed. life.Go(f) starts a
// background goroutine (a watch forwarder, a revocation) that Close waits
// for: it checks the closed flag and counts the goroutine in one step, and
// after Close has begun starts nothing; the store's Close release calls
// life.Wait(), as etcd's does.
//
// # Watches: Hub
//
// A Hub is the fan-out half of store.Watcher: hub.Watch(ctx, name) gives a
// channel that holds at most one pending wake-up and is closed when ctx ends
// or hub.Close is called; the store calls hub.Notify(name) (or NotifyAll
// after a reconnect) when it learns of a change. A store that subscribes
// upstream per key uses Subscribe, waits for its upstream subscription,
// then binds the subscription to ctx with Until (or ends it with Stop); and
// sets Hub.Idle to unsubscribe upstream when a key's last watch ends. A
// store whose connection breaks closes the hub (every watch channel closes:
// a change may have been missed) and starts a new one, as Redis does per
// pub/sub session; a store that restores its connection by itself keeps the
// hub and calls NotifyAll once it is back, as PostgreSQL's listener does.
//
// # URL parameters: Params
//
// kit.Params(u) reads a store URL's query: p.String, p.Bool, p.Duration,
// p.Int and p.OneOf take one parameter each and check its value; p.Done()
// then refuses any parameter not taken, naming it and the known ones (a typo
// is never ignored); or p.Rest() hands the rest to a driver that parses its
// own. A parameter given twice is refused. Errors name the URL through
// store.RedactURL and never quote a secret parameter's value.
//
// # TLS: TLSFiles
//
// One spelling for every store: ca_file, cert_file, key_file, server_name
// (etcd's older cacert, cert and key stay accepted as aliases).
// p.TLSFiles() takes them, p.ApplyTLS(files, cfg) loads the files into a
// tls.Config (a CA file with no certificate is refused). LoadCertPool and
// NewTLSConfig serve files given through a store's Options.
//
// # Secrets
//
// store.RedactURL is the one way to show a store URL. Secrets(u) lists the
// secret values a URL carries, in every escaped form, and Scrub(text,
// secrets) removes them from a driver's error that may repeat them.
//
// # Units
//
// CeilMillis(ttl) is a ttl in whole milliseconds, rounded up, for a store
// that keeps expiry in milliseconds: the lease is never kept shorter than
// asked.
//
// # SQL identifiers
//
// kit.SQLIdent(op, "table", name, maxLen) is the one rule for a configured
// table or schema name: lower-case ASCII letters, digits and '_', not
// starting with a digit, at most 63 bytes (maxLen lower, to leave room for
// suffixes such as "_history"). Such a name needs no quoting and means the
// same to PostgreSQL, MySQL and SQLite. kit.SQLIdentFold is the same rule
// for an engine that ignores the case of identifiers (SQLite), where
// upper-case letters are allowed too. fence/sqlfence checks each part of a
// schema.table fence table name with SQLIdentFold: it writes the name
// unquoted in every statement, so each engine reads it the same way each
// time.
//
// # SQL retries and session locks
//
// A Retrier (retrier.Do(ctx, fn)) sends a statement again after a conflict
// the server rolled back (serialization failure, deadlock, lock wait
// timeout), with a short jittered backoff; the store's Retryable says which
// errors those are, and must name no error after which the write may have
// happened. ConnLock is the dialect-free half of a lock held by one database
// session and lost with its connection (PostgreSQL's advisory lock, MySQL's
// GET_LOCK): kit.CheckLock checks its arguments, StartConnLock pings the
// session with the store's check and cancels the lock's context when it
// fails, and Release runs the store's release once.
package storekit
