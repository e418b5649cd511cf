package fence

import (
	"context"
	"fmt"
	"sync"
)

// Admitted is the highest term a resource has admitted: its token and the
// holder it was admitted for. The zero value means none. A Holder of "" with
// a Token above 0 is a token recorded before fences kept holders: an equal
// token is then refused whoever presents it, since the fence cannot tell
// whose term it was (a higher token is admitted as always).
type Admitted struct {
	Token  int64
	Holder string
}

// Persister keeps the highest admitted term per resource across restarts.
// Implementations are safe for concurrent use; a Guard calls Load once per
// resource and Save for the same resource never concurrently.
type Persister interface {
	// Load returns the highest term saved for resource, or the zero
	// Admitted if none was.
	Load(ctx context.Context, resource string) (Admitted, error)
	// Save records a as the highest term of resource. The Guard calls it
	// only with a token higher than the one saved before (a new term). It
	// must return only once the record is durable (on disk, fsynced): the
	// Guard admits the write only after Save returned nil. An error means
	// the record may or may not have been made durable.
	Save(ctx context.Context, resource string, a Admitted) error
}

// Guard is the fence of an in-process resource: it remembers the highest
// term (token and holder) admitted per resource and refuses lower tokens, and
// an equal token from another holder. A Guard is safe for concurrent use.
//
// Why Save comes before the write: if the Guard admitted a write and only then
// recorded its term, a crash between the two would forget it; after the
// restart a stale holder's lower token would be admitted again and could
// overwrite what the newer holder wrote. Saving first, the worst a crash can
// do is remember a term whose write never happened, which only refuses terms
// that are stale anyway.
type Guard struct {
	p  Persister
	mu sync.Mutex
	rs map[string]*slot
}

// slot is one resource. sem (capacity 1) is held while the resource is
// checked and, in Do, while the write runs; the fields are guarded by it.
type slot struct {
	_ [0]func() // not comparable: spares the binary an equality function

	sem     chan struct{}
	loaded  bool
	highest Admitted // highest term seen; may be above durable after a failed Save
	durable Admitted // highest term Save confirmed
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

// admit decides, with s held, whether the term (holder, token) may write
// resource.
func (g *Guard) admit(ctx context.Context, s *slot, resource, holder string, token int64) error {
	if err := g.load(ctx, s, resource); err != nil {
		return err
	}
	if token < s.highest.Token || token == s.highest.Token && holder != s.highest.Holder {
		return &StaleError{Resource: resource, Token: token, Highest: s.highest.Token, Holder: holder, HighestHolder: s.highest.Holder}
	}
	// From here the term is the highest: refusing lower tokens, and this
	// token from any other holder, is always safe.
	s.highest = Admitted{Token: token, Holder: holder}
	if g.p == nil {
		s.durable = s.highest
		return nil
	}
	if s.durable != s.highest {
		if err := g.p.Save(ctx, resource, s.highest); err != nil {
			return fmt.Errorf("leasehold/fence: save token %d of %q for %q: %w", token, holder, resource, err)
		}
		s.durable = s.highest
	}
	return nil
}

func (g *Guard) load(ctx context.Context, s *slot, resource string) error {
	if s.loaded {
		return nil
	}
	if g.p != nil {
		a, err := g.p.Load(ctx, resource)
		if err != nil {
			return fmt.Errorf("leasehold/fence: load highest token of %q: %w", resource, err)
		}
		s.highest, s.durable = a, a
	}
	s.loaded = true
	return nil
}

// Do admits the term (holder, token) for resource and, if it is not stale,
// runs fn while no other Check or Do of resource runs: writes of one resource through Do are
// serialised, like rows locked by a SQL fence, so a stale writer that arrives
// last still loses and an admitted write cannot be overtaken by an older one
// while it runs.
//
// It returns a *StaleError (matching ErrStale) without calling fn if token is
// lower than the highest admitted for resource, or equal to it but admitted
// for another holder (then it also matches ErrTokenReused); an error matching
// ErrInvalid for a bad resource, an empty or malformed holder, or a token
// below 1; a wrapped Persister error (fn not called) if the term could not be
// recorded; ctx's error if ctx ended while waiting for
// the resource; otherwise fn's error. The token stays admitted even if fn
// fails. Keep fn short: it holds up every other write of the resource.
func (g *Guard) Do(ctx context.Context, resource, holder string, token int64, fn func(ctx context.Context) error) error {
	if err := ValidateTerm(resource, holder, token); err != nil {
		return err
	}
	s := g.slot(resource)
	if err := s.lock(ctx); err != nil {
		return fmt.Errorf("leasehold/fence: wait for %q: %w", resource, err)
	}
	defer s.unlock()
	if err := g.admit(ctx, s, resource, holder, token); err != nil {
		return err
	}
	return fn(ctx)
}

// Check admits the term (holder, token) for resource and returns at once,
// with the same errors as Do. After it returns nil, a write with a lower
// token, or with this token and another holder, is refused.
//
// Check alone is a fence only if the caller applies writes in the order their
// Checks returned (one goroutine consuming a queue, say). Two concurrent
// requests can pass Check in token order and then write in the other order;
// use Do, which holds the resource while the write runs.
func (g *Guard) Check(ctx context.Context, resource, holder string, token int64) error {
	return g.Do(ctx, resource, holder, token, func(context.Context) error { return nil })
}

// Highest returns the highest term admitted for resource (the zero Admitted
// if none).
func (g *Guard) Highest(ctx context.Context, resource string) (Admitted, error) {
	if err := ValidateResource(resource); err != nil {
		return Admitted{}, err
	}
	s := g.slot(resource)
	if err := s.lock(ctx); err != nil {
		return Admitted{}, fmt.Errorf("leasehold/fence: wait for %q: %w", resource, err)
	}
	defer s.unlock()
	if err := g.load(ctx, s, resource); err != nil {
		return Admitted{}, err
	}
	return s.highest, nil
}
