package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/etcd"
	"github.com/leasehold/leasehold/store/etcd/etcdv3client"
)

// endpoint is an etcd client URL; these examples run against an embedded etcd.
func endpoint() string { return etcd.SharedEndpoint() }

// prefix is a key prefix of its own for each example.
func prefix() string { return etcd.UniquePrefix("example") }

// An elector on etcd whose leader writes to etcd through a fence: the write
// applies only while this exact term holds. The program has a clientv3
// client of its own, so the store runs on it (package etcdv3client), and the
// fence is a clientv3 comparison.
func Example() {
	ctx := context.Background()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cli.Close()
	st, err := etcdv3client.New(cli, prefix())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer st.Close()

	e, err := leasehold.NewElector(st, "billing", leasehold.Config{Identity: "node-a"})
	if err != nil {
		fmt.Println(err)
		return
	}
	var fence clientv3.Cmp
	err = e.Run(ctx, func(ctx context.Context, l *leasehold.Lease) error {
		fence, err = etcdv3client.Fence(ctx, st, l.Term())
		if err != nil {
			return err
		}
		resp, err := cli.Txn(ctx).If(fence).Then(clientv3.OpPut(st.Prefix()+"config", "v2")).Commit()
		if err != nil {
			return err
		}
		fmt.Println("leader's fenced write applied:", resp.Succeeded)
		return nil // the work is done: Run releases the lease and returns
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	// The term has ended: a late write with its fence is refused.
	resp, err := cli.Txn(ctx).If(fence).Then(clientv3.OpPut(st.Prefix()+"config", "stale")).Commit()
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("late write after release applied:", resp.Succeeded)
	// Output:
	// leader's fenced write applied: true
	// late write after release applied: false
}

// leasehold and `etcdctl lock` (etcd's concurrency.Mutex) exclude each other
// on one name: the Mutex's prefix is the store's prefix plus the name.
func Example_etcdctlLock() {
	ctx := context.Background()
	st, err := etcd.Open(ctx, etcd.Config{Endpoints: []string{endpoint()}, Prefix: prefix()})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer st.Close()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cli.Close()
	session, err := concurrency.NewSession(cli, concurrency.WithTTL(10))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer session.Close()

	// As `etcdctl lock <prefix>nightly-report` would:
	mu := concurrency.NewMutex(session, st.ContenderPrefix("nightly-report"))
	if err := mu.Lock(ctx); err != nil {
		fmt.Println(err)
		return
	}
	lk, err := leasehold.NewLock(st, "nightly-report", leasehold.Config{Identity: "cron-a"})
	if err != nil {
		fmt.Println(err)
		return
	}
	_, err = lk.TryAcquire(ctx)
	var held *leasehold.HeldError
	if errors.As(err, &held) {
		fmt.Println("leasehold refused; holder is an etcd lock:", strings.HasPrefix(held.Record.Holder, "etcd:"))
	}
	mu.Unlock(ctx)

	h, err := lk.TryAcquire(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("leasehold holds after the etcd lock was released")
	if err := mu.TryLock(ctx); errors.Is(err, concurrency.ErrLocked) {
		fmt.Println("etcd lock refused while leasehold holds")
	}
	h.Release(ctx)
	// Output:
	// leasehold refused; holder is an etcd lock: true
	// leasehold holds after the etcd lock was released
	// etcd lock refused while leasehold holds
}

// OpenURL takes the URL form the leasehold CLI uses.
func ExampleOpenURL() {
	host := strings.TrimPrefix(endpoint(), "http://")
	// In production: etcds://leasehold:PASSWORD@etcd-0:2379,etcd-1:2379,etcd-2:2379/apps/billing?cacert=/etc/etcd/ca.pem
	u, err := url.Parse("etcd://" + host + "/apps/billing")
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := etcd.OpenURL(ctx, u)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer st.Close()
	rec, err := st.Acquire(ctx, "report", "node-a-1f2e", 15*time.Second, "")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("key prefix:", st.(*etcd.Store).Prefix())
	fmt.Println("holder:", rec.Holder, "live:", rec.Live())
	fmt.Println(st.Release(ctx, rec.Term), errors.Is(st.Release(ctx, rec.Term), store.ErrNotHeld))
	// Output:
	// key prefix: apps/billing/
	// holder: node-a-1f2e live: true
	// <nil> true
}
