//go:build unix

package demo

import (
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The demo's register identifies a term by (token, holder), as the fence's
// direct form does: the same token from another holder is refused. With the
// number-only form (last_token <= ?) node-2's token 3 is admitted after
// node-1's, and the second step fails.
func TestRegisterRefusesEqualTokenOtherHolder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "register.db")
	if err := InitRegister(path); err != nil {
		t.Fatal(err)
	}
	db, err := openRegister(path, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	steps := []struct {
		node, holder string
		token        int64
		accept       bool
	}{
		{"node-1", "node-1-aaaa", 3, true},
		{"node-2", "node-2-bbbb", 3, false}, // token 3 granted again, to another term
		{"node-1", "node-1-aaaa", 3, true},  // node-1's term writes again
		{"node-2", "node-2-bbbb", 4, true},
		{"node-1", "node-1-aaaa", 4, false},
		{"node-1", "node-1-aaaa", 2, false},
	}
	for i, s := range steps {
		ok, err := write(ctx, db, s.node, s.holder, 1, s.token, i, "")
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if ok != s.accept {
			t.Fatalf("step %d: token %d from %s: accepted %v, want %v", i, s.token, s.holder, ok, s.accept)
		}
	}
	var value, holder string
	var token int64
	if err := db.QueryRow(`SELECT value, last_token, last_holder FROM register WHERE id = 1`).Scan(&value, &token, &holder); err != nil {
		t.Fatal(err)
	}
	if value != "node-2 write #3" || token != 4 || holder != "node-2-bbbb" {
		t.Errorf("register holds %q, token %d, holder %q; want node-2 write #3, 4, node-2-bbbb", value, token, holder)
	}
	// Every attempt is logged with its term and verdict.
	ws, err := readWrites(ctx, db, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(ws) != len(steps) {
		t.Fatalf("%d writes logged, want %d", len(ws), len(steps))
	}
	for i, w := range ws {
		if w.holder != steps[i].holder || w.token != steps[i].token || w.accepted != steps[i].accept {
			t.Errorf("log row %d = %s token %d accepted %v, want %s token %d accepted %v", i, w.holder, w.token, w.accepted, steps[i].holder, steps[i].token, steps[i].accept)
		}
	}
}

// A worker that does not know whose term it runs refuses to start: its
// writes could not be told from another term's with the same token.
func TestWorkerNeedsHolder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "register.db")
	if err := InitRegister(path); err != nil {
		t.Fatal(err)
	}
	err := Worker(context.Background(), WorkerConfig{Register: path, Node: "node-1", Token: 1, Stderr: io.Discard})
	if err == nil || !strings.Contains(err.Error(), "holder") {
		t.Fatalf("Worker without a holder = %v, want an error naming the holder", err)
	}
}
