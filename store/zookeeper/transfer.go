package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/leasehold/leasehold/store"
)

var _ store.Transferer = (*Store)(nil)

// errQueued: foreign contenders (zk.Lock, Curator) queue behind the term,
// and would rank before a successor's new node.
var errQueued = errors.New("foreign contenders queue behind the term")

// Transfer implements store.Transferer: one multi-op deletes term t's node
// (found by its holder and czxid, and checked to be the only contender),
// creates the successor's ephemeral sequential node in this handle's term
// session for ttl, and writes the lease path's record; the successor's token
// is that transaction's zxid, above t's. The reservation lives in this
// handle's session and ends at ttl (the handle deletes the node then), or
// sooner if this handle closes; the successor's own Acquire replaces it (a
// node of the same holder), anyone else's is refused while it lives.
//
// The transaction applies only if no contender created a node since
// Transfer looked (it checks the path's data version, which every leasehold
// attempt writes): such a node would rank before the successor's and take
// the lock when t's node goes. Leasehold attempts behind t delete their
// nodes at once, and Transfer waits for them; if foreign contenders queue
// behind t, a new node would rank behind them: Transfer then releases t
// (the queue's first contender gets the lock, as on any release) and
// returns an error saying so.
func (s *Store) Transfer(ctx context.Context, t store.Term, to string, ttl time.Duration, metadata string) (store.Record, error) {
	if err := s.life.Check(ctx); err != nil {
		return store.Record{}, err
	}
	if err := kit.CheckTransfer(t, to, ttl, metadata); err != nil {
		return store.Record{}, err
	}
	if ttl < s.minSession {
		return store.Record{}, kit.Invalid("transfer", "ttl %v is below the shortest session the ensemble grants, %v (its minSessionTimeout, two ticks by default)", ttl, s.minSession)
	}
	if ttl%time.Millisecond != 0 {
		ttl = ttl.Truncate(time.Millisecond) + time.Millisecond
	}
	op := fmt.Sprintf("transfer %s (%s) to %s", t, s.Path(t.Name), to)
	sess, err := s.sessionFor(ctx, ttl)
	if err != nil {
		if errors.Is(err, store.ErrInvalid) || errors.Is(err, store.ErrClosed) {
			return store.Record{}, err
		}
		return store.Record{}, kit.Wrap(op, err)
	}
	rec, err := s.transfer(ctx, sess, t, to, ttl, metadata)
	if errors.Is(err, errQueued) {
		if rerr := s.Release(ctx, t); rerr != nil {
			return store.Record{}, kit.Errorf(op, "%w; releasing instead failed: %w", err, rerr)
		}
		return store.Record{}, kit.Errorf(op, "%w: released instead, the queue's first contender gets the lock", err)
	}
	if err != nil {
		return rec, kit.Wrap(op, s.life.ClosedOr(err))
	}
	return rec, nil
}

func (s *Store) transfer(ctx context.Context, sess *session, t store.Term, to string, ttl time.Duration, metadata string) (store.Record, error) {
	p := s.Path(t.Name)
	s.mu.Lock()
	own := s.byTerm[t]
	s.mu.Unlock()
	var node string
	if own != nil {
		// Hold the entry so that neither its reaper nor a renewal runs
		// meanwhile; it is dropped if the transfer deletes its node.
		own.mu.Lock()
		defer own.mu.Unlock()
		if own.done || !time.Now().Before(own.deadline) {
			return store.Record{}, store.ErrNotHeld
		}
		node = own.node
	} else {
		n, err := s.findNode(ctx, t)
		if err != nil {
			return store.Record{}, err
		}
		node = n
	}
	if node == "" {
		return store.Record{}, store.ErrNotHeld
	}
	for attempt := 0; attempt < 8; attempt++ {
		sent := time.Now()
		type look struct {
			kids []string
			stat *zk.Stat
		}
		l, err := call(ctx, func() (look, error) { k, st, err := s.ctl.conn.Children(p); return look{k, st}, err })
		if errors.Is(err, zk.ErrNoNode) {
			return store.Record{}, store.ErrNotHeld
		}
		if err != nil {
			return store.Record{}, describe(err)
		}
		all := contenders(l.kids)
		if len(all) == 0 || all[0].name != node {
			return store.Record{}, store.ErrNotHeld
		}
		if len(all) > 1 {
			// Leasehold attempts behind the term delete their nodes at
			// once: wait for them. A foreign contender queues.
			transient, err := s.onlyLeaseholdNodes(ctx, s.ctl.conn, p, all[1:])
			if err != nil {
				return store.Record{}, err
			}
			if !transient {
				return store.Record{}, errQueued
			}
			if err := s.waitGone(ctx, s.ctl.conn, p+"/"+all[1].name); err != nil {
				return store.Record{}, err
			}
			continue
		}
		// The transaction checks the path's data version it looked at: an
		// attempt that created a node since (each writes the path's data)
		// would rank before the successor's node, and take the lock when
		// the term's node goes; then nothing is written, and Transfer looks
		// again.
		rec, retry, _, err := s.create(ctx, sess, p, t.Name, to, ttl, metadata, []any{&zk.DeleteRequest{Path: p + "/" + node, Version: -1}}, l.stat.Version, sent)
		if err != nil {
			return store.Record{}, err
		}
		if !retry {
			if own != nil {
				s.dropLocked(own)
			}
			return rec, nil
		}
		// The transaction found the term's node gone (then nothing was
		// written), or it applied and a contender queued in between, so the
		// successor's node was not the lowest and was deleted again: either
		// way t's node is gone now, unless the path itself was missing.
		exists, err := call(ctx, func() (bool, error) { ok, _, err := s.ctl.conn.Exists(p + "/" + node); return ok, err })
		if err != nil {
			return store.Record{}, describe(err)
		}
		if !exists {
			if own != nil {
				s.dropLocked(own)
			}
			return store.Record{}, fmt.Errorf("%w: the term's node is gone (it ended, or this transfer ended it and a contender queued meanwhile took the lock)", store.ErrNotHeld)
		}
	}
	return store.Record{}, errors.New("the lease's contenders kept changing")
}
