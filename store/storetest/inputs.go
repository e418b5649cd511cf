package storetest

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/leasehold/leasehold/store"
)

func testLimits(s *suite) {
	st := s.store()
	ttl := s.longTTL()
	longName := strings.Repeat("n", store.MaxNameLen)
	longHolder := strings.Repeat("h", store.MaxHolderLen)
	longMeta := strings.Repeat("m", store.MaxMetadataLen)
	rec, err := st.Acquire(s.ctx(), longName, longHolder, ttl, longMeta)
	if err != nil {
		s.t.Fatalf("Acquire at the limits (name %d, holder %d, metadata %d bytes): %v", len(longName), len(longHolder), len(longMeta), err)
	}
	g, err := st.Get(s.ctx(), longName)
	if err != nil || g.Term != rec.Term || g.Metadata != longMeta {
		s.t.Fatalf("Get at the limits = %+v, %v; want the term and metadata round-tripped", g.Term, err)
	}
	bad := []struct {
		what               string
		name, holder, meta string
		ttl                time.Duration
	}{
		{"empty name", "", "h", "", ttl},
		{"name too long", longName + "n", "h", "", ttl},
		{"name with a space", "a b", "h", "", ttl},
		{"name with a quote", "x'; DROP TABLE y", "h", "", ttl},
		{"name starting with /", "/x", "h", "", ttl},
		{"empty holder", "x", "", "", ttl},
		{"holder too long", "x", longHolder + "h", "", ttl},
		{"holder with a newline", "x", "a\nb", "", ttl},
		{"metadata too long", "x", "h", longMeta + "m", ttl},
		{"zero ttl", "x", "h", "", 0},
		{"negative ttl", "x", "h", "", -time.Second},
	}
	if l, ok := st.(store.Limiter); ok {
		// The declared minimum is what Acquire enforces: the core refuses
		// timings below it at construction, so the two must agree.
		lim := l.Limits()
		if lim.MinLeaseDuration <= 0 || lim.TimeResolution < 0 {
			s.t.Errorf("Limits() = %+v: want a positive MinLeaseDuration and a non-negative TimeResolution", lim)
		}
		if lim.MinLeaseDuration > 1 {
			bad = append(bad, struct {
				what               string
				name, holder, meta string
				ttl                time.Duration
			}{"ttl below the declared MinLeaseDuration", "x", "h", "", lim.MinLeaseDuration - 1})
		}
		if s.h.MinTTL < lim.MinLeaseDuration {
			s.t.Errorf("the harness's MinTTL %v is below the store's declared MinLeaseDuration %v", s.h.MinTTL, lim.MinLeaseDuration)
		}
	}
	for _, c := range bad {
		if _, err := st.Acquire(s.ctx(), c.name, c.holder, c.ttl, c.meta); !errors.Is(err, store.ErrInvalid) {
			s.t.Errorf("Acquire with %s: err = %v, want ErrInvalid", c.what, err)
		}
	}
	if _, err := st.Renew(s.ctx(), store.Term{Name: "x", Holder: "h", Token: 0}, ttl); !errors.Is(err, store.ErrInvalid) {
		s.t.Errorf("Renew with token 0: err = %v, want ErrInvalid", err)
	}
	if err := st.Release(s.ctx(), store.Term{Name: "", Holder: "h", Token: 1}); !errors.Is(err, store.ErrInvalid) {
		s.t.Errorf("Release with an empty name: err = %v, want ErrInvalid", err)
	}
	if _, err := st.Get(s.ctx(), "a b"); !errors.Is(err, store.ErrInvalid) {
		s.t.Errorf("Get of a bad name: err = %v, want ErrInvalid", err)
	}
	if _, err := st.Get(s.ctx(), "x"); !errors.Is(err, store.ErrNotFound) {
		s.t.Errorf("after refused calls, Get(x): err = %v, want ErrNotFound (nothing written)", err)
	}
}

func testCancelledContext(s *suite) {
	st := s.store()
	held := s.acquire(st, "job", "node-a", s.longTTL())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	calls := map[string]func() error{
		"Acquire": func() error { _, err := st.Acquire(ctx, "other", "node-a", s.longTTL(), ""); return err },
		"Renew":   func() error { _, err := st.Renew(ctx, held.Term, s.longTTL()); return err },
		"Release": func() error { return st.Release(ctx, held.Term) },
		"Get":     func() error { _, err := st.Get(ctx, "job"); return err },
	}
	for name, call := range calls {
		done := make(chan error, 1)
		go func() { done <- call() }()
		timer := time.NewTimer(10 * time.Second)
		select {
		case err := <-done:
			if err == nil {
				s.t.Errorf("%s with a cancelled context returned nil, want an error", name)
			}
		case <-timer.C:
			s.t.Fatalf("%s with a cancelled context did not return", name)
		}
		timer.Stop()
	}
}

func testCloseIdempotent(s *suite) {
	st, err := s.open()
	if err != nil {
		s.t.Fatalf("open: %v", err)
	}
	other := s.store()
	held := s.acquire(st, "job", "node-a", s.longTTL())
	if err := st.Close(); err != nil {
		s.t.Fatalf("Close: %v", err)
	}
	if err := st.Close(); err != nil {
		s.t.Fatalf("second Close: %v", err)
	}
	if _, err := st.Get(s.ctx(), "job"); !errors.Is(err, store.ErrClosed) {
		s.t.Fatalf("Get after Close: err = %v, want ErrClosed", err)
	}
	if _, err := st.Acquire(s.ctx(), "job2", "node-a", s.longTTL(), ""); !errors.Is(err, store.ErrClosed) {
		s.t.Fatalf("Acquire after Close: err = %v, want ErrClosed", err)
	}
	g, err := other.Get(s.ctx(), "job")
	if err != nil || g.Term != held.Term || !g.Live() {
		s.t.Fatalf("Close released the lease or broke other handles: Get = %+v, %v", g, err)
	}
}
