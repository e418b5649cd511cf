//go:build !unix

package cli

import "os"

// makeRunDir creates run's private directory. (run itself needs Unix; see
// proc_other.go.)
func makeRunDir() (dir string, release func(), err error) {
	dir, err = os.MkdirTemp("", "leasehold-run-")
	if err != nil {
		return "", nil, err
	}
	return dir, func() { os.RemoveAll(dir) }, nil
}
