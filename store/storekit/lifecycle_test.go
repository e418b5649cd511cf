package storekit_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/storekit"
)

func TestLifecycle(t *testing.T) {
	var life storekit.Lifecycle
	ctx := context.Background()
	if err := life.Check(ctx); err != nil {
		t.Fatalf("Check on an open handle: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := life.Check(cctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Check with a cancelled context = %v, want context.Canceled", err)
	}
	driverErr := errors.New("pool closed")
	if got := life.ClosedOr(driverErr); got != driverErr {
		t.Errorf("ClosedOr on an open handle = %v, want the error itself", got)
	}
	done := life.Done()
	select {
	case <-done:
		t.Fatal("Done is closed before Close")
	default:
	}
	calls := 0
	releaseErr := errors.New("release failed")
	release := func() error { calls++; return releaseErr }
	if err := life.Close(release); err != releaseErr {
		t.Errorf("first Close = %v, want release's error", err)
	}
	if err := life.Close(release); err != nil {
		t.Errorf("second Close = %v, want nil", err)
	}
	if calls != 1 {
		t.Errorf("release called %d times, want once", calls)
	}
	<-done // closed by Close, or the test hangs
	<-life.Done()
	if !life.Closed() {
		t.Errorf("Closed() is false after Close")
	}
	if err := life.Check(ctx); !errors.Is(err, store.ErrClosed) {
		t.Errorf("Check after Close = %v, want ErrClosed", err)
	}
	if got := life.ClosedOr(driverErr); !errors.Is(got, store.ErrClosed) {
		t.Errorf("ClosedOr after Close = %v, want ErrClosed", got)
	}
	if got := life.ClosedOr(nil); got != nil {
		t.Errorf("ClosedOr(nil) after Close = %v, want nil", got)
	}
	var nilRelease storekit.Lifecycle
	if err := nilRelease.Close(nil); err != nil {
		t.Errorf("Close(nil) = %v", err)
	}
}

// TestLifecycleGo: a goroutine started by Go is waited for by Wait in Close's
// release; after Close, Go starts nothing.
func TestLifecycleGo(t *testing.T) {
	var life storekit.Lifecycle
	var finished atomic.Bool
	started := make(chan struct{})
	if !life.Go(func() {
		close(started)
		<-life.Done()
		finished.Store(true)
	}) {
		t.Fatal("Go on an open handle started nothing")
	}
	<-started
	if finished.Load() {
		t.Fatal("the goroutine finished before Close")
	}
	if err := life.Close(func() error { life.Wait(); return nil }); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if !finished.Load() {
		t.Error("Close's release returned from Wait before the goroutine Go started had finished")
	}
	ran := make(chan struct{}, 1)
	if life.Go(func() { ran <- struct{}{} }) {
		t.Error("Go after Close reported that it started f")
	}
	life.Wait()
	select {
	case <-ran:
		t.Error("Go after Close ran f")
	default:
	}
}
