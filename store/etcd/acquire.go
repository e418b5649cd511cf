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
	"time"

	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/etcd/internal/etcdapi"
)

// Acquire implements store.Store.
//
// The term's key is put on an etcd lease from this handle's pool when one of
// the same TTL is there (the lease of a term this handle released, or of an
// attempt of this handle that was refused). A pooled lease that has lost at
// most an eighth of its TTL backs the grant as it is: one write, no
// keep-alive, and the grant's Remaining is what the lease has left (the core
// shortens the term by the shortfall). An older one gets a keep-alive sent
// alongside the transaction, and the grant's Remaining is the TTL that
// keep-alive restored. Otherwise a new lease is granted first.
// A refused attempt puts its lease back in the pool. See "Reusing etcd
// leases" in the package doc.
func (s *Store) Acquire(ctx context.Context, name, holder string, ttl time.Duration, metadata string) (store.Record, error) {
	return s.acquireTerm(ctx, name, holder, ttl, metadata, false)
}

// AcquireUnqueued implements store.UnqueuedAcquirer. Acquire already
// refuses while any contender key ranks ahead, a place included (etcd's
// queue is the contender keys); this answers store.ErrQueued, rather than
// ErrHeld with the place as the holder, when the key that refused it is a
// leasehold place.
func (s *Store) AcquireUnqueued(ctx context.Context, name, holder string, ttl time.Duration, metadata string) (store.Record, error) {
	return s.acquireTerm(ctx, name, holder, ttl, metadata, true)
}

func (s *Store) acquireTerm(ctx context.Context, name, holder string, ttl time.Duration, metadata string, unqueued bool) (store.Record, error) {
	if err := s.life.Check(ctx); err != nil {
		return store.Record{}, err
	}
	if err := kit.CheckAcquire(name, holder, ttl, metadata); err != nil {
		return store.Record{}, err
	}
	secs, err := ttlSeconds(ttl)
	if err != nil {
		return store.Record{}, fmt.Errorf("leasehold/etcd: acquire %q: %w", name, err)
	}
	// A place this handle wrote becomes the term without a write once it is
	// the lowest key (grantPlace). If it is not known to be, the acquire
	// reads; when that read shows the place lowest, it comes back here
	// (errPlaceFirst) for the write-free grant, once.
	placeFree := true
	for {
		if placeFree {
			rec, ok, err := s.grantPlace(ctx, name, holder, ttl, secs, metadata)
			if err != nil {
				return store.Record{}, fmt.Errorf("leasehold/etcd: acquire %q: %w", name, err)
			}
			if ok {
				return rec, nil
			}
		}
		rec, err := s.acquire(ctx, name, holder, ttl, secs, metadata, true, unqueued, placeFree)
		if errors.Is(err, errPooledGone) {
			rec, err = s.acquire(ctx, name, holder, ttl, secs, metadata, false, unqueued, placeFree)
		}
		if errors.Is(err, errPlaceFirst) {
			placeFree = false
			continue
		}
		return rec, err
	}
}

// errPlaceFirst: a read showed this handle's place lowest, and it can become
// the term without a write (grantPlace); nothing was written.
var errPlaceFirst = errors.New("the place is first")

// grantPlace makes holder's place the term with no write, if this handle
// wrote the place, has not made it a term yet, and its etcd lease (of the
// term's TTL) can carry the term: a read-only transaction (etcd serves it
// from its linearizable read path, no raft write) checks that the place is
// still there, still a place, and the lowest key under the name, as etcd's
// Mutex takes the lock once its key is lowest; no read is sent when this
// handle's watch has shown it so already (watchgrant.go). In etcd's terms
// the place already holds: every other contender waits for its key to go.
// The term's token is the place key's create revision, its etcd lease the
// place's, whose last keep-alive (sent alongside the read if the lease has
// lost more than freshSlack of its TTL) bounds the grant's Remaining.
//
// The term is then recorded by a transaction sent in the background
// (recordPlace): it deletes the marker, writes the name's record (holder,
// metadata, token) and puts the key again on its lease, which wakes the
// name's watchers as any grant does. Until it lands, Get shows the term
// with no metadata, and only this handle knows that the place is a term:
// any other handle that finds this holder's place lowest takes it for the
// holder's live term (acquire), never a place to make a term, so no token
// names two terms. ok is false, with nothing changed, if the place is not
// one this handle can grant so, or the check failed: the caller acquires as
// usual.
func (s *Store) grantPlace(ctx context.Context, name, holder string, ttl time.Duration, secs int64, metadata string) (rec store.Record, ok bool, err error) {
	id := placeID{name, holder}
	p, known := s.placeOf(id)
	if !known || !p.written {
		return store.Record{}, false, nil
	}
	sent := time.Now()
	aliveUntil, usable := s.placeLeaseForTerm(p.lease, secs)
	if !usable || !s.claimPlace(id, p.rev) {
		return store.Record{}, false, nil
	}
	granted := false
	defer func() {
		if !granted {
			s.unclaimPlace(id, p.rev)
		}
	}()
	var kaDone chan keepAliveResult
	if aliveUntil.Sub(sent) < ttl-freshSlack(ttl) {
		kaDone = make(chan keepAliveResult, 1)
		go func() {
			ttl, clean, err := s.keepAlive(rctx(ctx), p.lease)
			kaDone <- keepAliveResult{ttl: ttl, clean: clean, err: err}
		}()
	}
	// The watch may have shown the place lowest already (watchgrant.go):
	// then nothing is read.
	succeeded := s.provenLowest(id, p.rev)
	if !succeeded {
		var resp *etcdapi.TxnResponse
		resp, err = s.cli.Txn(rctx(ctx), s.placeCmps(name, p), nil, nil)
		succeeded = err == nil && resp.Succeeded
	}
	if kaDone != nil {
		r := <-kaDone
		if !r.clean {
			s.placeLeaseTainted(p.lease)
		}
		if r.err != nil || !r.clean {
			// The place's lease was not kept alive, or a keep-alive for it
			// may still land: acquire as usual (a grant moves the key to a
			// term lease, or finds it gone).
			return store.Record{}, false, nil
		}
		aliveUntil = sent.Add(time.Duration(r.ttl) * time.Second)
		s.placeLeaseAlive(p.lease, aliveUntil)
	}
	if err != nil {
		return store.Record{}, false, err
	}
	remaining := time.Until(aliveUntil)
	if !succeeded || remaining < ttl/2 {
		return store.Record{}, false, nil
	}
	term := store.Term{Name: name, Holder: holder, Token: p.rev}
	granted = true // the claim stands: the place is the term
	s.placeLeaseToTerm(p.lease, term, aliveUntil)
	recorded := make(chan struct{})
	s.remember(term, termInfo{key: p.key, lease: p.lease, metadata: metadata, recorded: recorded})
	s.spawn(func() { s.recordPlace(name, p, metadata, ttl, recorded) })
	return store.Record{Term: term, Remaining: remaining, TTL: time.Duration(secs) * time.Second, Metadata: metadata}, true, nil
}

// recordTimeout bounds recordPlace's tries (and so Close, which waits for
// them), as revokeTimeout bounds a revocation's.
const recordTimeout = revokeTimeout

// recordPlace writes the record of term p.rev, made from place p without a
// write (grantPlace), and deletes the place's marker, in one transaction
// that applies only while the key is still that term's, on the place's
// lease; it closes done when it has returned. If the term has already
// ended (released, expired or replaced), it writes the record only if no
// later grant wrote one, so that Get still reports the term's token as the
// last one.
func (s *Store) recordPlace(name string, p place, metadata string, ttl time.Duration, done chan<- struct{}) {
	defer close(done)
	ctx, cancel := context.WithTimeout(context.Background(), recordTimeout)
	defer cancel()
	rk, rv := s.recordKey(name), s.placeTermRecord(name, p, p.lease, metadata, ttl)
	// The grant saw the place lowest: it stays so while it exists.
	p.first = true
	cmps := append(s.placeCmps(name, p), etcdapi.LeaseIs(p.key, p.lease))
	ops := s.placeTermOps(name, p, p.lease, rv)
	for attempt := 0; ; attempt++ {
		resp, err := s.cli.Txn(rctx(ctx), cmps, ops, nil)
		if err == nil && !resp.Succeeded {
			_, err = s.cli.Txn(rctx(ctx), []etcdapi.Cmp{etcdapi.ModRevisionBelow(rk, p.rev)},
				[]etcdapi.Op{etcdapi.Put(rk, rv, etcdapi.NoLease)}, nil)
		}
		if err == nil || ctx.Err() != nil {
			return
		}
		t := time.NewTimer(time.Duration(min(attempt+1, 10)) * 20 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// waitRecorded waits until the record of term t, if t was made from a place
// without a write, has been written (recordPlace).
func (s *Store) waitRecorded(ctx context.Context, ti termInfo) error {
	if ti.recorded == nil {
		return nil
	}
	select {
	case <-ti.recorded:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// errPooledGone: the pooled lease an attempt used had expired, so nothing was
// written; the attempt is made again with a new lease.
var errPooledGone = errors.New("pooled lease expired")

type keepAliveResult struct {
	ttl   int64
	clean bool
	err   error
}

func (s *Store) acquire(ctx context.Context, name, holder string, ttl time.Duration, secs int64, metadata string, usePool, unqueued, placeFree bool) (store.Record, error) {
	pfx, rk := s.lockPrefix(name), s.recordKey(name)

	sent := time.Now()
	var lease etcdapi.LeaseID
	var grantedSecs int64
	var kaWait func() keepAliveResult // set when using a pooled lease
	pooled := false
	var poolAlive time.Time // the pooled lease's known expiry, when no keep-alive is sent
	if usePool {
		lease, poolAlive, pooled = s.takePooled(secs, sent)
	}
	if pooled && poolAlive.Sub(sent) >= ttl-freshSlack(ttl) {
		// Fresh enough: the grant is what the lease has left, no keep-alive.
	} else if pooled {
		poolAlive = time.Time{}
		kaWait = s.startKeepAlive(rctx(ctx), lease)
	} else {
		id, gttl, err := s.cli.Grant(rctx(ctx), secs)
		if err != nil {
			return store.Record{}, fmt.Errorf("leasehold/etcd: acquire %q: grant lease: %w", name, err)
		}
		lease, grantedSecs = id, gttl
		s.trackLease(lease, secs, sent.Add(time.Duration(gttl)*time.Second))
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
		if !poolAlive.IsZero() {
			aliveUntil = poolAlive
		}
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

	// A holder with a place in the name's queue (queue.go) takes the lease
	// by making its place the term, once the place is the lowest key. Any
	// other attempt writes our key only if the contender prefix holds no key
	// outside the excluded ranges: the subtrees of nested names, and a live
	// term of this same holder, which it deletes.
	id := placeID{name, holder}
	p, queued := s.placeOf(id)
	var own *ownTerm
	var nested []string
	for attempt := 0; attempt < 8; attempt++ {
		var cmps []etcdapi.Cmp
		var then []etcdapi.Op
		claimed := queued && s.claimPlace(id, p.rev)
		if queued && !claimed {
			// Made a term (or being made one) meanwhile by another call
			// through this handle: a term of this holder's, not a place.
			queued = false
			continue
		}
		if queued {
			cmps, then = s.convertOps(name, p, lease, metadata, ttl)
		} else {
			cmps = []etcdapi.Cmp{etcdapi.CreateRevisionIs(myKey, 0)}
			for _, r := range gaps(pfx, nested, own) {
				cmps = append(cmps, etcdapi.NoKeyIn(r[0], r[1]))
			}
			if own != nil {
				cmps = append(cmps, etcdapi.CreateRevisionIs(own.key, own.rev))
				then = append(then, etcdapi.Delete(own.key, false))
				if own.marker != "" {
					cmps = append(cmps, etcdapi.CreateRevisionIs(own.marker, own.rev))
					then = append(then, etcdapi.Delete(own.marker, false))
				}
			}
			then = append(then,
				etcdapi.Put(myKey, holder, lease),
				etcdapi.Put(rk, string(rv), etcdapi.NoLease))
		}
		resp, err := s.cli.Txn(rctx(ctx), cmps, then, []etcdapi.Op{contendersOp(pfx), etcdapi.Get(rk), etcdapi.GetPrefix(s.markerPrefix(name))})
		if claimed && (err != nil || !resp.Succeeded) {
			// The transaction did not make the place the term (or its
			// outcome is unknown: the key then goes with the lease, which
			// is revoked, and the marker with the place's lease).
			s.unclaimPlace(id, p.rev)
		}
		if err != nil {
			if pooled && errors.Is(err, etcdapi.ErrLeaseNotFound) {
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
			term = store.Term{Name: name, Holder: holder, Token: resp.Revision}
			key := myKey
			if queued {
				// The place is the term (claimed above): its key, and its
				// create revision as the token. Its own lease carries
				// nothing now.
				term.Token, key = p.rev, p.key
				s.placeLeaseFreed(p.lease)
			}
			s.remember(term, termInfo{key: key, lease: lease, metadata: metadata})
			if !poolAlive.IsZero() {
				// No keep-alive: the term lives as long as the pooled lease.
				return store.Record{Term: term, Remaining: time.Until(poolAlive), TTL: time.Duration(secs) * time.Second, Metadata: metadata}, nil
			}
			grantedTTL := time.Duration(grantedSecs) * time.Second
			return store.Record{Term: term, Remaining: grantedTTL - time.Since(sent), TTL: grantedTTL, Metadata: metadata}, nil
		}
		var rec *mvccKV
		if r := resp.Responses[1].Kvs; len(r) > 0 {
			rec = &mvccKV{r[0].Key, r[0].Value, r[0].CreateRevision, r[0].ModRevision, r[0].Lease}
		}
		v := s.queueView(name, resp.Responses[0].Kvs, resp.Responses[2].Kvs)
		contenders := v.contenders
		nested = v.nested
		own = nil
		if q, ok := v.byHolder[holder]; ok {
			mine := queued && p.written && q.rev == p.rev
			switch {
			case mine && q.first && placeFree:
				if _, usable := s.placeLeaseForTerm(q.lease, secs); usable {
					q.written = true
					s.keepPlace(id, q)
					refused = true // nothing was written with the lease taken above
					return store.Record{}, errPlaceFirst
				}
				fallthrough
			case mine || !q.first:
				q.written = mine
				p, queued = q, true
				s.keepPlace(id, q)
				if q.first {
					continue // make it the term in the next round
				}
			default:
				// The holder's place is the lowest key, but this handle did
				// not write it, or has made it a term already: the handle
				// that wrote it may have made it the term without a write
				// (grantPlace). It is this holder's live term, replaced
				// below as any other.
				if queued {
					s.takePlace(id)
				}
				queued = false
			}
		} else if queued {
			// Gone: expired, dequeued, or made a term through another handle.
			s.dropPlace(id, p)
			queued = false
		}
		if len(contenders) == 0 {
			continue // only nested names were in the way: retry around them
		}
		lowest := contenders[0]
		ownMarker := ""
		if pl, ok := v.places[lowest.create]; ok && pl.holder == holder {
			ownMarker = pl.marker // the holder's place, taken for its live term above
		}
		if !isOwnTerm(lowest, rec, holder) && ownMarker == "" {
			refused = true
			if _, place := v.places[lowest.create]; place && unqueued {
				return store.Record{}, fmt.Errorf("leasehold/etcd: acquire %q: %w", name, store.ErrQueued)
			}
			if queued && p.written {
				// Behind the holder in the queue: the watch may show the
				// place lowest from this read on (watchgrant.go).
				s.followBelow(name, id, p, resp.Revision, v)
			}
			r, err := s.describe(ctx, name, lowest, rec, v)
			if err != nil {
				return store.Record{}, fmt.Errorf("leasehold/etcd: acquire %q: %w", name, err)
			}
			return r, fmt.Errorf("leasehold/etcd: acquire %q: held by %s: %w", name, r.Holder, store.ErrHeld)
		}
		if len(contenders) > 1 {
			// Our own live term holds, but others queue behind it (etcd
			// tools, leasehold places, this holder's own included). A new
			// term of ours would rank behind them: end the old term and let
			// the queue have the lock (the next round reports its holder).
			dcmps := []etcdapi.Cmp{etcdapi.CreateRevisionIs(string(lowest.key), lowest.create)}
			dops := []etcdapi.Op{etcdapi.Delete(string(lowest.key), false)}
			if ownMarker != "" {
				dcmps = append(dcmps, etcdapi.CreateRevisionIs(ownMarker, lowest.create))
				dops = append(dops, etcdapi.Delete(ownMarker, false))
			}
			dresp, err := s.cli.Txn(rctx(ctx), dcmps, dops, nil)
			if err != nil {
				return store.Record{}, fmt.Errorf("leasehold/etcd: acquire %q: end own earlier term: %w", name, err)
			}
			if dresp.Succeeded {
				s.revokeLease(etcdapi.LeaseID(lowest.lease))
			}
			continue
		}
		own = &ownTerm{key: string(lowest.key), rev: lowest.create, lease: etcdapi.LeaseID(lowest.lease), marker: ownMarker}
	}
	return store.Record{}, fmt.Errorf("leasehold/etcd: acquire %q: gave up after 8 transactions that conflicted with changes under %q", name, pfx)
}

// convertOps is the transaction that makes holder's place p the term, on
// etcd lease lease: it applies only while p's marker is the one written with
// it (so p is still a place: a place becomes a term only in the transaction
// that deletes its marker) and p is the lowest key under the contender
// prefix. Once a read showed p lowest (p.first), that check is left out: p
// stays lowest while it exists, as no key created later ranks before it (and
// the read ignored nested names' keys, which etcd's comparison counts). The
// key is put on the term's lease, keeping its create revision, which is the
// token; the record notes it (Token), as its own mod revision is later.
func (s *Store) convertOps(name string, p place, lease etcdapi.LeaseID, metadata string, ttl time.Duration) ([]etcdapi.Cmp, []etcdapi.Op) {
	return s.placeCmps(name, p), s.placeTermOps(name, p, lease, s.placeTermRecord(name, p, lease, metadata, ttl))
}

// placeTermRecord is the name's record of the term place p becomes, on etcd
// lease lease: its token is the place key's create revision.
func (s *Store) placeTermRecord(name string, p place, lease etcdapi.LeaseID, metadata string, ttl time.Duration) string {
	rv, _ := json.Marshal(recordValue{Holder: p.holder, Key: p.key[len(s.lockPrefix(name)):], Lease: int64(lease), Metadata: metadata,
		TTLms: ttl.Milliseconds(), Token: p.rev})
	return string(rv)
}

// placeTermOps record place p as its holder's term: its key put on lease
// (keeping its create revision), its marker deleted, and the name's record
// rv written (convertOps, which moves the key to a term's lease, and
// recordPlace, which keeps it on the place's).
func (s *Store) placeTermOps(name string, p place, lease etcdapi.LeaseID, rv string) []etcdapi.Op {
	return []etcdapi.Op{
		etcdapi.Put(p.key, p.holder, lease),
		etcdapi.Delete(p.marker, false),
		etcdapi.Put(s.recordKey(name), rv, etcdapi.NoLease),
	}
}

// placeCmps hold while holder's place p is still a place (its marker is the
// one written with it: a place becomes a term only in the transaction that
// deletes its marker, or in grantPlace, on this handle) and the lowest key
// under the contender prefix. Once a read showed p lowest (p.first), that
// check is left out: p stays lowest while it exists, as no key created later
// ranks before it (and the read ignored nested names' keys, which etcd's
// comparison counts).
func (s *Store) placeCmps(name string, p place) []etcdapi.Cmp {
	cmps := []etcdapi.Cmp{
		etcdapi.CreateRevisionIs(p.marker, p.rev),
		etcdapi.CreateRevisionIs(p.key, p.rev),
		etcdapi.ValueIs(p.key, p.holder),
	}
	if !p.first {
		pfx := s.lockPrefix(name)
		cmps = append(cmps, etcdapi.NoneCreatedBefore(pfx, etcdapi.PrefixEnd(pfx), p.rev))
	}
	return cmps
}

type ownTerm struct {
	key   string
	rev   int64
	lease etcdapi.LeaseID
	// marker is set when the term is a place of the holder's: its marker
	// goes with it.
	marker string
}

// mvccKV is the part of an etcd key-value the store reads.
type mvccKV struct {
	key, value  []byte
	create, mod int64
	lease       int64
}

// split sorts the keys under pfx (already ordered by create revision) into
// contender keys and the sub-prefixes of nested names.
func split(pfx string, kvs []etcdapi.KeyValue) (contenders []mvccKV, nested []string) {
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
		excl = append(excl, span{n, etcdapi.PrefixEnd(n)})
	}
	if own != nil {
		excl = append(excl, span{own.key, own.key + "\x00"})
	}
	sort.Slice(excl, func(i, j int) bool { return excl[i].start < excl[j].start })
	var out [][2]string
	cur, end := pfx, etcdapi.PrefixEnd(pfx)
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
	rv, token, ok := parseRecord(rec)
	return ok && token == kv.create && string(kv.value) == holder && rv.Holder == holder
}

// describe returns the record of the live contender kv (the lowest), reading
// the time left on its etcd lease. A leasehold place that is lowest (v's
// places) shows its holder, with the token it will have: it holds in etcd's
// terms, and its holder's next Acquire makes it the term.
func (s *Store) describe(ctx context.Context, name string, kv mvccKV, rec *mvccKV, v queueView) (store.Record, error) {
	r := store.Record{Term: store.Term{Name: name, Token: kv.create}}
	if rv, token, ok := parseRecord(rec); ok && token == kv.create && rv.Holder == string(kv.value) {
		r.Holder, r.Metadata = rv.Holder, rv.Metadata
	} else if p, ok := v.places[kv.create]; ok {
		r.Holder = p.holder
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
	ttl, grantedTTL, err := s.cli.TimeToLive(rctx(ctx), etcdapi.LeaseID(kv.lease))
	switch {
	case errors.Is(err, etcdapi.ErrLeaseNotFound):
		return r, nil // ended since the read: Remaining 0
	case err != nil:
		return store.Record{}, fmt.Errorf("time to live of lease %x: %w", kv.lease, err)
	case ttl < 0:
		return r, nil
	}
	r.TTL = time.Duration(grantedTTL) * time.Second
	// etcd reports whole seconds rounded down; the key exists, so the term is
	// live until etcd revokes the lease. Report the most it can have left,
	// and at least one revocation tick while the key is still there.
	r.Remaining = time.Duration(ttl+1) * time.Second
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
	resp, err := s.cli.Range(rctx(ctx), etcdapi.Get(s.recordKey(t.Name)))
	if err != nil {
		return termInfo{}, err
	}
	if len(resp.Kvs) == 0 {
		return termInfo{}, store.ErrNotHeld
	}
	kv := resp.Kvs[0]
	rv, token, ok := parseRecord(&mvccKV{kv.Key, kv.Value, kv.CreateRevision, kv.ModRevision, kv.Lease})
	if !ok || token != t.Token || rv.Holder != t.Holder || rv.Key == "" || strings.ContainsRune(rv.Key, '/') {
		return termInfo{}, store.ErrNotHeld
	}
	ti := termInfo{key: s.lockPrefix(t.Name) + rv.Key, lease: etcdapi.LeaseID(rv.Lease), metadata: rv.Metadata}
	return ti, nil
}

// current reads the key of term t and reports whether it is still t's live
// key: created at t's token, holding t's holder. It returns the key's lease.
func (s *Store) current(ctx context.Context, t store.Term, key string) (etcdapi.LeaseID, bool, error) {
	resp, err := s.cli.Range(rctx(ctx), etcdapi.Get(key))
	if err != nil {
		return 0, false, err
	}
	if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != t.Token || string(resp.Kvs[0].Value) != t.Holder {
		return 0, false, nil
	}
	return etcdapi.LeaseID(resp.Kvs[0].Lease), true, nil
}

// contendersOp reads the keys under pfx in the order of their create
// revisions: the queue of contenders, lowest (the holder) first.
func contendersOp(pfx string) etcdapi.Op {
	op := etcdapi.GetPrefix(pfx)
	op.SortByCreate = true
	return op
}
