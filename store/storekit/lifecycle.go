package storekit

import (
	"context"
	"sync"

	"github.com/leasehold/leasehold/store"
)

// Lifecycle is the open/closed state of one store handle, and the Close
// every store repeats: the first Close marks the handle closed, closes
// Done, and releases the handle's resources; a later Close does nothing and
// returns nil; every other call after Close returns store.ErrClosed.
//
// Keep it as a named field of the store (life storekit.Lifecycle), not an
// embedded one: embedding would add its methods to the store's own API. The
// zero value is an open handle. It must not be copied after first use.
type Lifecycle struct {
	mu     sync.Mutex
	closed bool
	done   chan struct{}
	wg     sync.WaitGroup // the goroutines started by Go
}

// Check is the first line of every store method: store.ErrClosed if the
// handle is closed, else ctx.Err().
func (l *Lifecycle) Check(ctx context.Context) error {
	if l.Closed() {
		return store.ErrClosed
	}
	return ctx.Err()
}

// Closed reports whether Close was called.
func (l *Lifecycle) Closed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}

// Done is closed by the first Close: the handle's watches and background
// goroutines select on it.
func (l *Lifecycle) Done() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.doneLocked()
}

func (l *Lifecycle) doneLocked() chan struct{} {
	if l.done == nil {
		l.done = make(chan struct{})
	}
	return l.done
}

// ClosedOr returns store.ErrClosed if the handle is closed, else err: a
// driver's error from a call that raced with Close ("connection pool
// closed") is reported as the close it was, not as an unknown outcome.
func (l *Lifecycle) ClosedOr(err error) error {
	if err != nil && l.Closed() {
		return store.ErrClosed
	}
	return err
}

// Close marks the handle closed, closes Done, and then (without holding
// the lifecycle's lock) calls release, if not nil, and returns its error.
// Only the first Close does so; later calls return nil.
func (l *Lifecycle) Close(release func() error) error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	close(l.doneLocked())
	l.mu.Unlock()
	if release == nil {
		return nil
	}
	return release()
}

// Go starts f in a goroutine that Wait waits for, if the handle is open, and
// reports whether it did. Once Close has begun it starts nothing and returns
// false: the check and the count are one step under the lifecycle's lock, so
// no goroutine is counted after Close marked the handle closed, and Wait,
// called after that, sees every goroutine Go started. f must end once Done is
// closed (or within a bound of its own).
func (l *Lifecycle) Go(f func()) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.wg.Go(f)
	return true
}

// Wait waits for the goroutines started by Go. Close's release calls it, once
// the handle is marked closed and Go starts nothing more. Called on an open
// handle (a test waiting for a store's background work), it waits only for
// the goroutines Go started before it, and must not race with a Go.
func (l *Lifecycle) Wait() { l.wg.Wait() }
