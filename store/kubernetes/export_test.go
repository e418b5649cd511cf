package kubernetes

import "time"

// SetInCluster points the in-cluster config at dir instead of the service
// account's mount, and sets how long a token read from a file is used, until
// the test ends (restore).
func SetInCluster(dir string, reread time.Duration) (restore func()) {
	oldDir, oldReread := inClusterDir, tokenReread
	inClusterDir, tokenReread = dir, reread
	return func() { inClusterDir, tokenReread = oldDir, oldReread }
}
