package redis

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/storekit"
)

// observe raises the high-water mark of name to tok.
func (s *Store) observe(name string, tok int64) {
	s.mu.Lock()
	if tok > s.seen[name] {
		s.seen[name] = tok
	}
	s.mu.Unlock()
}

func (s *Store) seenToken(name string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen[name]
}

// floor is the highest token this handle has seen for name, or the caller's
// Floor, whichever is higher.
func (s *Store) floor(ctx context.Context, name string) (int64, error) {
	f := s.seenToken(name)
	if s.opts.Floor != nil {
		g, err := s.opts.Floor(ctx, name)
		if err != nil {
			return 0, kit.Errorf(fmt.Sprintf("token floor of %q", name), "%w", err)
		}
		f = max(f, g)
	}
	return f, nil
}

// remaining converts a PTTL reply: -2 (no key) and 0 are "not live", -1 (a
// key without expiry, which only a foreign writer makes) is "live forever".
func remaining(pttl int64) time.Duration {
	switch {
	case pttl == -1:
		return time.Duration(math.MaxInt64)
	case pttl < 0:
		return 0
	}
	return time.Duration(pttl) * time.Millisecond
}

// wrap gives a Redis error the store's prefix and the operation; a Redis
// client closed by Close is reported as store.ErrClosed.
func (s *Store) wrap(op string, err error) error {
	if errors.Is(err, goredis.ErrClosed) {
		err = s.life.ClosedOr(err)
	}
	return kit.Wrap(op, err)
}

// Acquire implements store.Store with SET NX PX semantics in one script: if
// the lock key is absent (or expired) or holds this same holder, the counter
// is incremented (and, with TokensServerTime, raised to the server's clock in
// microseconds if that is higher), the lock key set to holder with PX ttl, and the term's
// record (token, TTL, metadata) written with the same PX. Grants are not
// published: waiters wake on releases and at expiry. A *TokenRegressError
// reports a counter below a token already seen; nothing was granted then.
func (s *Store) Acquire(ctx context.Context, name, holder string, ttl time.Duration, metadata string) (store.Record, error) {
	return s.acquire(ctx, name, holder, ttl, metadata, false)
}

// AcquireUnqueued implements store.UnqueuedAcquirer: Acquire's script,
// refusing with store.ErrQueued while the name's queue holds a live place
// (two more commands in the script, one request as before).
func (s *Store) AcquireUnqueued(ctx context.Context, name, holder string, ttl time.Duration, metadata string) (store.Record, error) {
	return s.acquire(ctx, name, holder, ttl, metadata, true)
}

func (s *Store) acquire(ctx context.Context, name, holder string, ttl time.Duration, metadata string, unqueued bool) (store.Record, error) {
	if err := s.life.Check(ctx); err != nil {
		return store.Record{}, err
	}
	if err := kit.CheckAcquire(name, holder, ttl, metadata); err != nil {
		return store.Record{}, err
	}
	floor, err := s.floor(ctx, name)
	if err != nil {
		return store.Record{}, err
	}
	ms := storekit.CeilMillis(ttl)
	msArg := strconv.FormatInt(ms, 10)
	clock := "1"
	if s.opts.Tokens == TokensCounter {
		clock = "0"
	}
	keys, args := s.keys(name), []any{holder, msArg, ":" + msArg + ":" + metadata, floor, clock}
	if unqueued {
		keys, args = append(keys, s.queueKeys(name)[1]), append(args, "1")
	}
	res, err := acquireScript.Run(ctx, s.c, keys, args...).Result()
	if err != nil {
		return store.Record{}, s.wrap(acquireOp(name), err)
	}
	if tok, ok := res.(int64); ok {
		// Granted: the script set exactly what was asked; only the token is new.
		s.observe(name, tok)
		return store.Record{
			Term:      store.Term{Name: name, Holder: holder, Token: tok},
			Remaining: time.Duration(ms) * time.Millisecond,
			TTL:       time.Duration(ms) * time.Millisecond,
			Metadata:  metadata,
		}, nil
	}
	v, ok := res.([]any)
	if !ok {
		return store.Record{}, s.wrap(acquireOp(name), fmt.Errorf("script reply is %T, want an integer or an array", res))
	}
	r := reply{v: v}
	switch status := r.int(0); status {
	case acqRegress:
		counter := r.int(1)
		if r.err != nil {
			return store.Record{}, s.wrap(acquireOp(name), r.err)
		}
		return store.Record{}, &TokenRegressError{Name: name, Seen: floor, Found: counter, Granted: true}
	case acqQueued:
		return store.Record{}, kit.Wrap(acquireOp(name), store.ErrQueued)
	case acqHeld, acqHeldRegress:
		holder, tr, pttl, counter := r.str(1), r.term(2), r.int(3), r.int(4)
		if r.err != nil {
			return store.Record{}, s.wrap(acquireOp(name), r.err)
		}
		rec := record(name, holder, tr, pttl)
		if status == acqHeld {
			s.observe(name, max(rec.Token, counter))
			return rec, kit.Wrap(acquireOp(name), store.ErrHeld)
		}
		s.observe(name, rec.Token)
		return rec, kit.Errorf(acquireOp(name), "%w (%w)", store.ErrHeld,
			&TokenRegressError{Name: name, Seen: floor, Found: counter})
	default:
		if r.err != nil {
			return store.Record{}, s.wrap(acquireOp(name), r.err)
		}
		return store.Record{}, s.wrap(acquireOp(name), fmt.Errorf("unexpected script status %d", status))
	}
}

func acquireOp(name string) string { return fmt.Sprintf("acquire %q", name) }

// Renew implements store.Store: one script compares the lock value with the
// holder and the term record's token with the token, then extends both keys.
func (s *Store) Renew(ctx context.Context, t store.Term, ttl time.Duration) (store.Record, error) {
	if err := s.life.Check(ctx); err != nil {
		return store.Record{}, err
	}
	if err := kit.CheckRenew(t, ttl); err != nil {
		return store.Record{}, err
	}
	ms := storekit.CeilMillis(ttl)
	res, err := renewScript.Run(ctx, s.c, s.termKeys(t.Name), t.Holder, tokenArg(t.Token), ms).Result()
	return s.renewed(t, ms, res, err)
}

// renewed reads renewScript's reply: the term's metadata if renewed, 0 if not.
func (s *Store) renewed(t store.Term, ms int64, res any, err error) (store.Record, error) {
	if err != nil {
		return store.Record{}, s.wrap("renew "+t.String(), err)
	}
	switch x := res.(type) {
	case string:
		s.observe(t.Name, t.Token)
		// The script set the term's PTTL to exactly ms.
		return store.Record{Term: t, Remaining: time.Duration(ms) * time.Millisecond, TTL: time.Duration(ms) * time.Millisecond, Metadata: x}, nil
	case int64:
		if x == renewNotHeld {
			return store.Record{}, kit.Wrap("renew "+t.String(), store.ErrNotHeld)
		}
	}
	return store.Record{}, s.wrap("renew "+t.String(), fmt.Errorf("unexpected script reply %v (%T)", res, res))
}

// RenewMany implements store.BatchRenewer: the renew scripts of all terms go
// in one pipeline of EVALSHA (one round trip per Redis node). If the server
// does not have the script cached (a restart, SCRIPT FLUSH), those commands
// ran nothing and are sent again once, with EVAL, which caches it.
func (s *Store) RenewMany(ctx context.Context, terms []store.Term, ttl time.Duration) ([]store.Record, []error, error) {
	if err := s.life.Check(ctx); err != nil {
		return nil, nil, err
	}
	if err := kit.CheckTTL("renew", ttl); err != nil {
		return nil, nil, err
	}
	ms := storekit.CeilMillis(ttl)
	recs := make([]store.Record, len(terms))
	errs := make([]error, len(terms))
	cmds := make([]*goredis.Cmd, len(terms))
	pipe := s.c.Pipeline()
	for i, t := range terms {
		if errs[i] = kit.CheckTerm("renew", t); errs[i] == nil {
			cmds[i] = renewScript.EvalSha(ctx, pipe, s.termKeys(t.Name), t.Holder, tokenArg(t.Token), ms)
		}
	}
	if n := pipe.Len(); n > 0 {
		if _, err := pipe.Exec(ctx); err != nil {
			// Exec reports the first failed command. NOSCRIPT means that
			// command did nothing; any other error (a script error for one
			// term is not expected: the scripts are fixed) leaves the batch's
			// outcome unknown.
			again := s.c.Pipeline()
			for i, t := range terms {
				if cmds[i] == nil || cmds[i].Err() == nil {
					continue
				}
				if !goredis.HasErrorPrefix(cmds[i].Err(), "NOSCRIPT") {
					return nil, nil, s.wrap(fmt.Sprintf("renew %d terms", n), cmds[i].Err())
				}
				cmds[i] = renewScript.Eval(ctx, again, s.termKeys(t.Name), t.Holder, tokenArg(t.Token), ms)
			}
			if again.Len() == 0 {
				return nil, nil, s.wrap(fmt.Sprintf("renew %d terms", n), err)
			}
			if _, err := again.Exec(ctx); err != nil {
				return nil, nil, s.wrap(fmt.Sprintf("renew %d terms", n), err)
			}
		}
	}
	for i, t := range terms {
		if cmds[i] == nil {
			continue
		}
		res, err := cmds[i].Result()
		recs[i], errs[i] = s.renewed(t, ms, res, err)
	}
	return recs, errs, nil
}

// Release implements store.Store: one script compares the lock value and
// the term's token, deletes the lock and the term record, keeps the counter,
// and publishes on the lease's channel.
func (s *Store) Release(ctx context.Context, t store.Term) error {
	if err := s.life.Check(ctx); err != nil {
		return err
	}
	if err := kit.CheckRelease(t); err != nil {
		return err
	}
	n, err := releaseScript.Run(ctx, s.c, s.termKeys(t.Name), t.Holder, tokenArg(t.Token)).Int64()
	if err != nil {
		return s.wrap("release "+t.String(), err)
	}
	if n != releaseReleased {
		return kit.Wrap("release "+t.String(), store.ErrNotHeld)
	}
	return nil
}

// Get implements store.Store. A lock key written by another library
// (redislock, redsync) shows as a live term with token 0. If the counter is
// below a token this handle has seen, Get returns the record as Redis holds
// it together with a *TokenRegressError.
func (s *Store) Get(ctx context.Context, name string) (store.Record, error) {
	if err := s.life.Check(ctx); err != nil {
		return store.Record{}, err
	}
	if err := kit.CheckName("get", name); err != nil {
		return store.Record{}, err
	}
	return s.get(ctx, name)
}

func (s *Store) get(ctx context.Context, name string) (store.Record, error) {
	op := fmt.Sprintf("get %q", name)
	v, err := getScript.Run(ctx, s.c, s.keys(name)).Slice()
	if err != nil {
		return store.Record{}, s.wrap(op, err)
	}
	r := reply{v: v}
	holder, ctrs, tr, pttl := r.str(0), r.str(1), r.term(2), r.int(3)
	if r.err != nil {
		return store.Record{}, s.wrap(op, r.err)
	}
	rec := store.Record{Term: store.Term{Name: name}}
	if holder != "" {
		rec = record(name, holder, tr, pttl)
	}
	var counter int64
	if ctrs != "" {
		if counter, err = strconv.ParseInt(ctrs, 10, 64); err != nil {
			return store.Record{}, s.wrap(op, fmt.Errorf("token counter %q: %w", ctrs, err))
		}
		if holder == "" {
			rec.Token = counter // free: the last token granted
		}
	}
	if seen := s.seenToken(name); counter < seen {
		return rec, &TokenRegressError{Name: name, Seen: seen, Found: counter}
	}
	if holder == "" && ctrs == "" {
		return store.Record{}, kit.Wrap(op, store.ErrNotFound)
	}
	s.observe(name, max(counter, rec.Token))
	return rec, nil
}

// ForceRelease implements store.ForceReleaser: it deletes the lock key of
// name whoever holds it (a redislock or redsync holder too), keeps the
// counter, and publishes on the lease's channel.
func (s *Store) ForceRelease(ctx context.Context, name string) (store.Record, error) {
	if err := s.life.Check(ctx); err != nil {
		return store.Record{}, err
	}
	if err := kit.CheckName("force-release", name); err != nil {
		return store.Record{}, err
	}
	op := fmt.Sprintf("force-release %q", name)
	v, err := forceReleaseScript.Run(ctx, s.c, s.keys(name)).Slice()
	if err != nil {
		return store.Record{}, s.wrap(op, err)
	}
	r := reply{v: v}
	switch r.int(0) {
	case -1:
		return store.Record{}, kit.Wrap(op, store.ErrNotFound)
	case 0:
		rec := store.Record{Term: store.Term{Name: name, Token: r.int(1)}}
		if r.err != nil {
			return store.Record{}, s.wrap(op, r.err)
		}
		return rec, kit.Wrap(op, store.ErrNotHeld)
	}
	holder, tr, pttl := r.str(1), r.term(2), r.int(3)
	if r.err != nil {
		return store.Record{}, s.wrap(op, r.err)
	}
	rec := record(name, holder, tr, pttl)
	return rec, nil
}

// List implements store.Lister: it SCANs for the token counters under the
// prefix (on every master of a cluster) and reads each lease. Leases whose
// counter is below a token this handle has seen are listed, and reported in
// a joined error of *TokenRegressError.
func (s *Store) List(ctx context.Context) ([]store.Record, error) {
	if err := s.life.Check(ctx); err != nil {
		return nil, err
	}
	pattern := globEscape(s.prefix) + "{*}:token"
	var mu sync.Mutex
	var names []string
	scan := func(ctx context.Context, c goredis.Cmdable) error {
		it := c.Scan(ctx, 0, pattern, 256).Iterator()
		for it.Next(ctx) {
			k := strings.TrimPrefix(it.Val(), s.prefix)
			if !strings.HasPrefix(k, "{") || !strings.HasSuffix(k, "}:token") {
				continue
			}
			name := k[1 : len(k)-len("}:token")]
			if store.ValidateName(name) != nil {
				continue
			}
			mu.Lock()
			names = append(names, name)
			mu.Unlock()
		}
		return it.Err()
	}
	var err error
	if cc, ok := s.c.(*goredis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *goredis.Client) error { return scan(ctx, c) })
	} else {
		err = scan(ctx, s.c)
	}
	if err != nil {
		return nil, s.wrap("list", err)
	}
	slices.Sort(names)
	names = slices.Compact(names)
	recs := make([]store.Record, 0, len(names))
	var regress []error
	for _, name := range names {
		rec, err := s.get(ctx, name)
		var re *TokenRegressError
		switch {
		case err == nil:
		case errors.Is(err, store.ErrNotFound):
			continue // deleted since the scan
		case errors.As(err, &re):
			regress = append(regress, err)
		default:
			return nil, err
		}
		recs = append(recs, rec)
	}
	return recs, errors.Join(regress...)
}

// globEscape escapes the characters SCAN MATCH treats as special.
func globEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if strings.IndexByte(`*?[]\`, s[i]) >= 0 {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
