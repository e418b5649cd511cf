package interop_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// fakeLock is a resourcelock.Interface holding one record in memory.
type fakeLock struct {
	id      string
	rec     resourcelock.LeaderElectionRecord
	updates int
}

func (f *fakeLock) Get(context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	r := f.rec
	return &r, []byte(r.HolderIdentity), nil
}
func (f *fakeLock) Create(_ context.Context, r resourcelock.LeaderElectionRecord) error {
	f.rec = r
	return nil
}
func (f *fakeLock) Update(_ context.Context, r resourcelock.LeaderElectionRecord) error {
	f.rec = r
	f.updates++
	return nil
}
func (f *fakeLock) RecordEvent(string) {}
func (f *fakeLock) Identity() string   { return f.id }
func (f *fakeLock) Describe() string   { return "fake" }

// The test's wrapper of client-go's lock refuses a release of a Lease that
// shows another holder (client-go's tryRelease would clear it), lets the
// peer's release of its own Lease through and ends its deadline at the
// release's send, and lets a release of a free Lease through.
func TestDeadlineLockRelease(t *testing.T) {
	ctx := context.Background()
	inner := &fakeLock{id: "cg"}
	var strays []string
	l := &deadlineLock{Interface: inner, onStray: func(h string) { strays = append(strays, h) }}
	acquired := time.Now()
	if err := l.Update(ctx, resourcelock.LeaderElectionRecord{HolderIdentity: "cg", LeaseDurationSeconds: 2}); err != nil {
		t.Fatal(err)
	}
	if d := l.Deadline(); d.Before(acquired.Add(2 * time.Second)) {
		t.Fatalf("deadline after the acquire: %v, want 2 s after it", d.Sub(acquired))
	}

	// Another contender took the Lease since: the release is refused.
	inner.rec = resourcelock.LeaderElectionRecord{HolderIdentity: "lh-1"}
	l.Get(ctx)
	if err := l.Update(ctx, resourcelock.LeaderElectionRecord{}); !errors.Is(err, errStrayRelease) || inner.rec.HolderIdentity != "lh-1" || len(strays) != 1 || strays[0] != "lh-1" {
		t.Fatalf("release over lh-1's Lease: %v, Lease holder %q, strays %q; want refused, lh-1 kept, one stray", err, inner.rec.HolderIdentity, strays)
	}

	// Its own Lease: released, and its term ends at the release.
	inner.rec = resourcelock.LeaderElectionRecord{HolderIdentity: "cg"}
	l.Get(ctx)
	released := time.Now()
	if err := l.Update(ctx, resourcelock.LeaderElectionRecord{}); err != nil || inner.rec.HolderIdentity != "" {
		t.Fatalf("release of its own Lease: %v, holder %q; want released", err, inner.rec.HolderIdentity)
	}
	if d := l.Deadline(); d.Before(released) || d.After(time.Now()) {
		t.Errorf("deadline after its release: %v after the release began, want at its send", d.Sub(released))
	}

	// A free Lease: written through, nothing refused.
	inner.rec = resourcelock.LeaderElectionRecord{}
	l.Get(ctx)
	n := inner.updates
	if err := l.Update(ctx, resourcelock.LeaderElectionRecord{}); err != nil || inner.updates != n+1 || len(strays) != 1 {
		t.Errorf("release of a free Lease: %v, %d updates, strays %q; want it written, no stray", err, inner.updates-n, strays)
	}
}
