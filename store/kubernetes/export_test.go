package kubernetes

import (
	"context"
	"time"
)

// SetInCluster points the in-cluster config at dir instead of the service
// account's mount, and sets how long a token read from a file is used, until
// the test ends (restore).
func SetInCluster(dir string, reread time.Duration) (restore func()) {
	oldDir, oldReread := inClusterDir, tokenReread
	inClusterDir, tokenReread = dir, reread
	return func() { inClusterDir, tokenReread = oldDir, oldReread }
}

// Delivered is the resourceVersion of Lease object obj that a watch of s
// delivered last ("" if none).
func Delivered(s *Store, obj string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sg := s.seen[obj]; sg != nil {
		return sg.delivered
	}
	return ""
}

// AwaitReservation waits until no token reservation of s for Lease object
// obj is under way (Watch starts one in the background).
func AwaitReservation(ctx context.Context, s *Store, obj string) bool {
	return s.awaitReservation(ctx, obj)
}
