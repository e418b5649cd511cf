package zookeeper

import (
	"strings"
	"testing"
)

func TestSequence(t *testing.T) {
	for _, c := range []struct {
		child string
		seq   int64
		ok    bool
	}{
		{"_c_0123456789abcdef0123456789abcdef-lock-0000000042", 42, true},    // leasehold, zk.Lock
		{"_c_6f1c7c2e-8d3a-4a8b-9c1d-2b3e4f5a6b7c-lock-0000000007", 7, true}, // Curator
		{"lock-0000000003", 3, true},                                         // zk.Lock unprotected
		{"2f4e3c1a9b8d4e7f__lock__0000000011", 11, true},                     // Kazoo
		{"job", 0, false},                     // a nested lease's path
		{"job__12", 0, false},                 // a nested name with underscores
		{"lock-12", 0, false},                 // not a server sequence
		{"x-lock-00000000zz", 0, false},       // not digits
		{"_c_abc-latch-0000000001", 0, false}, // Curator's LeaderLatch: another recipe
	} {
		seq, ok := sequence(c.child)
		if ok != c.ok || seq != c.seq {
			t.Errorf("sequence(%q) = %d, %v; want %d, %v", c.child, seq, ok, c.seq, c.ok)
		}
	}
	got := contenders([]string{"job", "b-lock-0000000003", "a-lock-0000000001", "c-lock-0000000002"})
	var names []string
	for _, c := range got {
		names = append(names, c.name)
	}
	if strings.Join(names, " ") != "a-lock-0000000001 c-lock-0000000002 b-lock-0000000003" {
		t.Fatalf("contenders in order: %v", names)
	}
}

func TestNodeNames(t *testing.T) {
	a, b := newNodePrefix("node-a"), newNodePrefix("node-a")
	if a == b {
		t.Fatal("two attempts of one holder got the same node name")
	}
	if !isHolders(a+"0000000001", "node-a") || isHolders(a+"0000000001", "node-b") {
		t.Fatal("a node is not told apart by its holder")
	}
	if !strings.HasPrefix(a, "_c_") || !strings.HasSuffix(a, "-lock-") || len(a) != len("_c_")+32+len("-lock-") {
		t.Fatalf("node prefix %q, want _c_<32 hex>-lock- (go-zookeeper/zk's protected form)", a)
	}
	if _, ok := sequence(a + "0000000001"); !ok {
		t.Fatal("a leasehold node is not a contender")
	}
}
