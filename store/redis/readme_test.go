package redis_test

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
)

// TestREADMEACLMatchesTested keeps the README's ACL example the one the
// restricted-user conformance run uses.
func TestREADMEACLMatchesTested(t *testing.T) {
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	var rules []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 2 && f[0] == "ACL" && f[1] == "SETUSER" {
			for _, r := range f {
				if strings.HasPrefix(r, "+") || strings.HasPrefix(r, "-") {
					rules = append(rules, r)
				}
			}
		}
	}
	if !slices.Equal(rules, aclCommands) {
		t.Fatalf("README ACL commands %v, tested %v", rules, aclCommands)
	}
}

// TestElectorHandover: two electors on one Redis lease; when the leader
// steps down, the other leads, with a higher token.
func TestElectorHandover(t *testing.T) {
	addr := redisAddr(t)
	prefix := freshPrefix(t, addr)
	ctx := testCtx(t)
	timings := leasehold.Timings{LeaseDuration: 3 * time.Second, RetryPeriod: time.Second}
	type lead struct {
		who   string
		token int64
	}
	leads := make(chan lead, 2)
	stepDown := make(chan struct{})
	run := func(who string) (func() error, context.CancelFunc) {
		st := openStore(t, storeURL(addr, prefix))
		e, err := leasehold.NewElector(st, "leader", leasehold.Config{Identity: who, Timings: timings})
		if err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			done <- e.Run(rctx, func(wctx context.Context, l *leasehold.Lease) error {
				leads <- lead{who, l.Token()}
				select {
				case <-stepDown:
					return nil // step down: Run releases and returns
				case <-wctx.Done():
					return wctx.Err()
				}
			})
		}()
		return func() error { return <-done }, cancel
	}
	waitA, cancelA := run("a")
	defer cancelA()
	waitB, cancelB := run("b")
	defer cancelB()
	first := <-leads
	stepDown <- struct{}{} // the first leader's work returns
	second := <-leads
	if second.who == first.who || second.token <= first.token {
		t.Fatalf("after %v stepped down, %v leads; want the other node with a higher token", first, second)
	}
	close(stepDown)
	for _, wait := range []func() error{waitA, waitB} {
		if err := wait(); err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("Run: %v", err)
		}
	}
}
