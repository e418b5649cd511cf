package zookeeper

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/store"
)

// handOffWhileDescribing makes the lease change hands each time an
// Acquire's look is about to read the head's node, until it has changed
// hands n times: the rival's term is released and a new rival takes the
// lease through another handle, so the node the look listed is gone when it
// reads it. It returns the rivals' terms in order.
func handOffWhileDescribing(t *testing.T, rivals *Store, n int, ttl time.Duration) *[]store.Record {
	ctx := testCtx(t, 60*time.Second)
	first, err := rivals.Acquire(ctx, "job", "rival-0", ttl, "")
	if err != nil {
		t.Fatal(err)
	}
	terms := &[]store.Record{first}
	testHookBeforeDescribe = func(string) {
		if len(*terms) > n {
			return
		}
		cur := (*terms)[len(*terms)-1]
		if err := rivals.Release(ctx, cur.Term); err != nil {
			t.Errorf("release %v: %v", cur.Term, err)
			return
		}
		next, err := rivals.Acquire(ctx, "job", fmt.Sprintf("rival-%d", len(*terms)), ttl, "")
		if err != nil {
			t.Errorf("rival acquire: %v", err)
			return
		}
		*terms = append(*terms, next)
	}
	t.Cleanup(func() { testHookBeforeDescribe = nil })
	return terms
}

// TestAcquireFollowsFastHandOffs: a lease that changes hands between each of
// an Acquire's looks and its read of the holder's node (20 times here, more
// than the 8 attempts an Acquire has for conflicts of its own) is answered
// ErrHeld with the holder it finally read, not with an error: an error is an
// unknown outcome to the core, which then waits a whole retry period instead
// of the next release, and 8 contenders taking turns back to back in one
// process starved 4 of 8 that way. The control: hand-offs that never stop
// end in an error once maxHeadsGone and the attempts are spent, so the
// Acquire does not loop for ever.
func TestAcquireFollowsFastHandOffs(t *testing.T) {
	ttl := 10 * time.Second
	t.Run("20 hand-offs", func(t *testing.T) {
		root := uniqueRoot("handoffs")
		st, rivals := openStore(t, root), openStore(t, root)
		terms := handOffWhileDescribing(t, rivals, 20, ttl)
		rec, err := st.Acquire(testCtx(t, 60*time.Second), "job", "waiter", ttl, "")
		if !errors.Is(err, store.ErrHeld) {
			t.Fatalf("Acquire = %+v, %v after %d hand-offs; want ErrHeld", rec, err, len(*terms)-1)
		}
		last := (*terms)[len(*terms)-1]
		if len(*terms) != 21 || rec.Term != last.Term {
			t.Fatalf("Acquire's ErrHeld names %v after %d hand-offs; want the last rival's term %v after 20", rec.Term, len(*terms)-1, last.Term)
		}
	})
	t.Run("hand-offs that never stop", func(t *testing.T) {
		root := uniqueRoot("handoffs-endless")
		st, rivals := openStore(t, root), openStore(t, root)
		terms := handOffWhileDescribing(t, rivals, 1000, ttl)
		rec, err := st.Acquire(testCtx(t, 60*time.Second), "job", "waiter", ttl, "")
		if err == nil || errors.Is(err, store.ErrHeld) || !strings.Contains(err.Error(), "kept changing") {
			t.Fatalf("Acquire = %+v, %v; want the error that the contenders kept changing", rec, err)
		}
		if n := len(*terms) - 1; n != maxHeadsGone-1+maxAcquireAttempts {
			t.Fatalf("Acquire gave up after %d hand-offs; want %d (maxHeadsGone-1 free, then maxAcquireAttempts)", n, maxHeadsGone-1+maxAcquireAttempts)
		}
	})
}
