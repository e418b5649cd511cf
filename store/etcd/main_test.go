package etcd

import (
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "leasehold-etcd-test-")
	if err != nil {
		panic(err)
	}
	packageDir = dir
	code := m.Run()
	for i := len(packageCleanups) - 1; i >= 0; i-- {
		packageCleanups[i]()
	}
	os.RemoveAll(dir)
	os.Exit(code)
}
