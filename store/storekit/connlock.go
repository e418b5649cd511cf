package storekit

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/leasehold/leasehold/store"
)

// ConnLock is the half of a lock held by one database session, and lost with
// its connection, that does not depend on the dialect (PostgreSQL's advisory
// lock, MySQL's GET_LOCK): the term, a context cancelled when the connection
// is found dead or on release, the loop that checks the connection, and a
// release that runs once. The store keeps the connection and the SQL.
type ConnLock struct {
	term     store.Term
	ctx      context.Context
	cancel   context.CancelCauseFunc
	released error
	stopc    chan struct{}
	done     chan struct{}

	once sync.Once
	err  error
}

// CheckLock checks the arguments of a connection lock for operation op: the
// lease name, the holder, the metadata and the check interval (not
// negative). It returns the interval, one second if it was zero.
func (k Kit) CheckLock(op, name, holder, metadata string, every time.Duration) (time.Duration, error) {
	if err := k.CheckName(op, name); err != nil {
		return 0, err
	}
	if err := k.CheckHolder(op, holder); err != nil {
		return 0, err
	}
	if err := k.CheckMetadata(op, metadata); err != nil {
		return 0, err
	}
	if every < 0 {
		return 0, k.Invalid(op, "check interval %v is negative", every)
	}
	if every == 0 {
		every = time.Second
	}
	return every, nil
}

// StartConnLock starts checking a held lock's session: every interval it
// calls check, bounded by the interval; when check fails, the lock's context
// is cancelled with cause "<lost>: <check's error>" (matching lost), and the
// checks stop. released is the context's cause after Release.
func StartConnLock(term store.Term, every time.Duration, check func(context.Context) error, lost, released error) *ConnLock {
	ctx, cancel := context.WithCancelCause(context.Background())
	l := &ConnLock{term: term, ctx: ctx, cancel: cancel, released: released,
		stopc: make(chan struct{}), done: make(chan struct{})}
	go l.watch(every, check, lost)
	return l
}

func (l *ConnLock) watch(every time.Duration, check func(context.Context) error, lost error) {
	defer close(l.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-l.stopc:
			return
		case <-t.C:
			pctx, cancel := context.WithTimeout(context.Background(), every)
			err := check(pctx)
			cancel()
			if err != nil {
				l.cancel(fmt.Errorf("%w: %v", lost, err))
				return
			}
		}
	}
}

// Term is the lock's term.
func (l *ConnLock) Term() store.Term { return l.term }

// Context is cancelled when a check fails or on Release.
func (l *ConnLock) Context() context.Context { return l.ctx }

// Release stops the checks and waits for them, cancels the context (cause:
// released), and calls release once, telling it whether a check had found
// the connection dead; it returns release's error, on this call and every
// later one.
func (l *ConnLock) Release(release func(lost bool) error) error {
	l.once.Do(func() {
		close(l.stopc)
		<-l.done
		lost := l.ctx.Err() != nil
		l.cancel(l.released)
		l.err = release(lost)
	})
	return l.err
}
