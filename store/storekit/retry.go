package storekit

import (
	"context"
	"math/rand/v2"
	"sync/atomic"
	"time"
)

// Retrier runs a SQL store's statement again after a transient conflict (a
// serialization failure, a deadlock, a lock wait timeout), with a short
// jittered exponential backoff. The dialect is Retryable; the loop is the
// same for every store. A store declares one, usually as a package variable:
//
//	var retrier = &storekit.Retrier{Retryable: retryable, Max: 10}
//
// Retryable must report only errors after which the statement certainly took
// no effect (the server rolled it back): any other error may mean the write
// happened (SAFETY.md rule 11), and is returned as it is.
type Retrier struct {
	// Retryable reports whether err is a conflict the server rolled back.
	Retryable func(err error) bool
	// Max is how many times a statement is sent again at most.
	Max int

	retried atomic.Int64
}

// Do runs fn, and again while it fails with a retryable error, at most Max
// more times, waiting 1 ms doubling up to 64 ms, plus up to as much again
// at random, between tries. When ctx ends during a wait, or the tries are
// used up, it returns fn's last error.
func (r *Retrier) Do(ctx context.Context, fn func() error) error {
	for attempt := 0; ; attempt++ {
		err := fn()
		if err == nil || attempt == r.Max || !r.Retryable(err) {
			return err
		}
		r.retried.Add(1)
		d := time.Duration(1<<min(attempt, 6)) * time.Millisecond
		d += time.Duration(rand.Int64N(int64(d)))
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

// Retried is how many times Do has sent a statement again, for tests.
func (r *Retrier) Retried() int64 { return r.retried.Load() }
