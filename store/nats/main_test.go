package nats

import (
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "leasehold-nats-test-")
	if err != nil {
		panic(err)
	}
	packageDir = dir
	code := m.Run()
	if sharedServer != nil {
		sharedServer.stop()
	}
	os.RemoveAll(dir)
	os.Exit(code)
}
