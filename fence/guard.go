package fence

import (
	"context"
	"fmt"
	"sync"
)

// Persister keeps the highest admitted token per resource across restarts.
// Implementations are safe for concurrent use; a Guard calls Load once per
// resource and Save for the same resource never concurrently.
type Persister interface {
	// Load returns the highest token saved for resource, or 0 if none was.
	Load(ctx context.Context, resource string) (int64, error)
	// Save records token as the highest for resource. It must return only
	// once the record is durable (on disk, fsynced): the Guard admits the
	// write only after Save returned nil. An error means the record may or
	// may not have been made durable.
	Save(ctx context.Context, resource string, token int64) error
}

// Guard is the fence of an in-process resource: it remembers the highest
// token admitted per resource and refuses lower ones. A Guard is safe for
// concurrent use.
//
// Why Save comes before the write: if the Guard admitted a write and only then
// recorded its token, a crash between the two would forget the token; after
// the restart a stale holder's lower token would be admitted again and could
// overwrite what the newer holder wrote. Saving first, the worst a crash can do
// is remember a token whose write never happened, which only refuses tokens
// that are stale anyway.
type Guard struct {
	p  Persister
	mu sync.Mutex
	rs map[string]*slot
}

// slot is one resource. sem (capacity 1) is held while the resource is
// checked and, in Do, while the write runs; the fields are guarded by it.
type slot struct {
	sem     chan struct{}
	loaded  bool
	highest int64 // highest token seen; may exceed durable after a failed Save
	durable int64 // highest token Save confirmed
}

// NewGuard returns a Guard that keeps its tokens in p. With a nil p the Guard
// keeps them in memory only, and a restart forgets them: use that only where
// a restart also resets the resource.
func NewGuard(p Persister) *Guard {
	return &Guard{p: p, rs: make(map[string]*slot)}
}

func (g *Guard) slot(resource string) *slot {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := g.rs[resource]
	if s == nil {
		s = &slot{sem: make(chan struct{}, 1)}
		g.rs[resource] = s
	}
	return s
}

func (s *slot) lock(ctx context.Context) error {
	select {
	case s.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *slot) unlock() { <-s.sem }

// admit decides, with s held, whether token may write resource.
func (g *Guard) admit(ctx context.Context, s *slot, resource string, token int64) error {
	if !s.loaded {
		if g.p != nil {
			h, err := g.p.Load(ctx, resource)
			if err != nil {
				return fmt.Errorf("leasehold/fence: load highest token of %q: %w", resource, err)
			}
			s.highest, s.durable = h, h
		}
		s.loaded = true
	}
	if token < s.highest {
		return &StaleError{Resource: resource, Token: token, Highest: s.highest}
	}
	s.highest = token // refusing lower tokens from now on is always safe
	if g.p == nil {
		s.durable = token
		return nil
	}
	if token > s.durable {
		if err := g.p.Save(ctx, resource, token); err != nil {
			return fmt.Errorf("leasehold/fence: save token %d of %q: %w", token, resource, err)
		}
		s.durable = token
	}
	return nil
}

// Do admits token for resource and, if it is not stale, runs fn while no
// other Check or Do of resource runs: writes of one resource through Do are
// serialised, like rows locked by a SQL fence, so a stale writer that arrives
// last still loses and an admitted write cannot be overtaken by an older one
// while it runs.
//
// It returns a *StaleError (matching ErrStale) without calling fn if token is
// lower than the highest admitted for resource; an error matching ErrInvalid
// for a bad resource or token; a wrapped Persister error (fn not called) if
// the token could not be recorded; ctx's error if ctx ended while waiting for
// the resource; otherwise fn's error. The token stays admitted even if fn
// fails. Keep fn short: it holds up every other write of the resource.
func (g *Guard) Do(ctx context.Context, resource string, token int64, fn func(ctx context.Context) error) error {
	if err := validate(resource, token); err != nil {
		return err
	}
	s := g.slot(resource)
	if err := s.lock(ctx); err != nil {
		return fmt.Errorf("leasehold/fence: wait for %q: %w", resource, err)
	}
	defer s.unlock()
	if err := g.admit(ctx, s, resource, token); err != nil {
		return err
	}
	return fn(ctx)
}

// Check admits token for resource and returns at once, with the same errors
// as Do. After it returns nil, a write with a lower token is refused.
//
// Check alone is a fence only if the caller applies writes in the order their
// Checks returned (one goroutine consuming a queue, say). Two concurrent
// requests can pass Check in token order and then write in the other order;
// use Do, which holds the resource while the write runs.
func (g *Guard) Check(ctx context.Context, resource string, token int64) error {
	return g.Do(ctx, resource, token, func(context.Context) error { return nil })
}

// Highest returns the highest token admitted for resource (0 if none).
func (g *Guard) Highest(ctx context.Context, resource string) (int64, error) {
	if err := ValidateResource(resource); err != nil {
		return 0, err
	}
	s := g.slot(resource)
	if err := s.lock(ctx); err != nil {
		return 0, fmt.Errorf("leasehold/fence: wait for %q: %w", resource, err)
	}
	defer s.unlock()
	if !s.loaded && g.p != nil {
		h, err := g.p.Load(ctx, resource)
		if err != nil {
			return 0, fmt.Errorf("leasehold/fence: load highest token of %q: %w", resource, err)
		}
		s.highest, s.durable, s.loaded = h, h, true
	}
	return s.highest, nil
}

func validate(resource string, token int64) error {
	if err := ValidateResource(resource); err != nil {
		return err
	}
	return ValidateToken(token)
}
