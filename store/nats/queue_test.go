package nats

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leasehold/leasehold/store"
)

// TestQueueKeyLayout: a holder is one subject token, one to one, and a
// place's key is never a lease's key.
func TestQueueKeyLayout(t *testing.T) {
	for holder, want := range map[string]string{
		"node-1_a/b": "node-1_a/b",
		"host.lan":   "host=2Elan",
		"*":          "=2A",
		">":          "=3E",
		"a=2Eb":      "a=3D2Eb",
		"a#b~":       "a=23b=7E",
	} {
		if got := holderToken(holder); got != want {
			t.Errorf("holderToken(%q) = %q, want %q", holder, got, want)
		}
	}
	// Holders that a careless escape would write alike.
	seen := map[string]string{}
	for _, h := range []string{"a.b", "a=2Eb", "a=2eb", "a_b", "a/b", "a-b", "a==b", "a=3Db"} {
		tok := holderToken(h)
		if other, ok := seen[tok]; ok {
			t.Errorf("holders %q and %q both write %q", other, h, tok)
		}
		seen[tok] = h
		if strings.ContainsAny(tok, ".*> ") {
			t.Errorf("holderToken(%q) = %q is not one subject token", h, tok)
		}
	}
	for _, name := range []string{"job", "app.leader", "a.", "a..b", "x/y", strings.Repeat("n", store.MaxNameLen)} {
		if store.ValidateName(name) != nil {
			t.Fatalf("test name %q is not a valid lease name", name)
		}
		if k := keyOf(name); strings.HasPrefix(k, "=") {
			t.Errorf("lease key %q of %q begins with '=', as the queue's keys do", k, name)
		}
		pk := placeKey(name, "node-1")
		if !strings.HasPrefix(pk, queuePrefix) || store.ValidateName(nameOf(pk)) == nil {
			t.Errorf("place key %q of %q reads as a lease name", pk, name)
		}
		// Dequeue purges the place key as a subject filter: a wildcard
		// in it would purge other keys.
		if pk := placeKey(name, "*.>"); strings.ContainsAny(pk, "*>") {
			t.Errorf("place key %q has a wildcard", pk)
		}
	}
}

// TestQueueNamesApart: the queues of names that share a prefix ("app",
// "app.x", "app.", "app..x") are apart, and a queue's places are not leases
// (List, Get and Acquire do not see them).
func TestQueueNamesApart(t *testing.T) {
	srv := shared(t)
	st := openStore(t, srv.url(), uniqueBucket("qnames"))
	ctx := testCtx(t, 30*time.Second)
	// An empty queue's listing: the only server of an R1 bucket answered,
	// as of now (the cluster test has the R3 case).
	if places, upTo, err := st.listQueue(ctx, "app"); err != nil || len(places) != 0 || upTo != math.MaxUint64 {
		t.Fatalf("listing of an empty queue on R1: %v up to %d, %v; want none, as of now", places, upTo, err)
	}
	names := []string{"app", "app.x", "app.", "app..x"}
	for _, name := range names {
		for i, holder := range []string{"first", "second"} {
			if n, err := st.Enqueue(ctx, name, holder, time.Minute); err != nil || n != i {
				t.Fatalf("Enqueue(%q, %q) = %d, %v; want %d ahead", name, holder, n, err, i)
			}
		}
	}
	recs, err := st.List(ctx)
	if err != nil || len(recs) != 0 {
		t.Fatalf("List with only queue places: %v, %v; want no leases", recs, err)
	}
	if _, err := st.Get(ctx, "app"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Get of a name with places only: %v, want ErrNotFound", err)
	}
	if _, err := st.Acquire(ctx, "app", "third", time.Minute, ""); err != nil {
		t.Fatalf("Acquire of a name with places (the queue is advisory): %v", err)
	}
	if err := st.Dequeue(ctx, "app", "first"); err != nil {
		t.Fatal(err)
	}
	if n, err := st.Enqueue(ctx, "app", "second", time.Minute); err != nil || n != 0 {
		t.Fatalf("after the first of app left, second has %d ahead (%v), want 0", n, err)
	}
	for _, name := range names[1:] {
		if n, err := st.Enqueue(ctx, name, "second", time.Minute); err != nil || n != 1 {
			t.Fatalf("the first of app left, and second of %q has %d ahead (%v), want still 1", name, n, err)
		}
	}
}

// TestQueueMessages counts the messages (requests) each call sends, as the
// README states them: a new place two in a row (its write, then the
// listing), a refresh two at once, a dequeue two in a row (the purge, the
// leave signal), or one when there is no place.
func TestQueueMessages(t *testing.T) {
	srv := shared(t)
	bucket := uniqueBucket("qmsgs")
	st := openStore(t, srv.url(), bucket)
	other := openStore(t, srv.url(), bucket)
	ctx := testCtx(t, 30*time.Second)
	sent := func(what string, call func() error) uint64 {
		t.Helper()
		before := st.nc.Stats().OutMsgs
		start := time.Now()
		if err := call(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		n := st.nc.Stats().OutMsgs - before
		t.Logf("%s: %d messages, %v", what, n, time.Since(start))
		return n
	}
	enqueue := func(want int) func() error {
		return func() error {
			n, err := st.Enqueue(ctx, "job", "me", time.Minute)
			if err == nil && n != want {
				err = fmt.Errorf("%d ahead, want %d", n, want)
			}
			return err
		}
	}
	if _, err := other.Enqueue(ctx, "job", "ahead", time.Minute); err != nil {
		t.Fatal(err)
	}
	// The handle's first call of the queue opens the queues' bucket (two
	// stream infos more): not counted below.
	if _, err := st.Enqueue(ctx, "warm", "me", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := st.Dequeue(ctx, "warm", "me"); err != nil {
		t.Fatal(err)
	}
	// AcquireUnqueued of a free lease with nobody queued: the queue's
	// listing and the lease's read, sent together, then the write.
	var rec store.Record
	if n := sent("acquire on an empty queue", func() (err error) {
		rec, err = st.AcquireUnqueued(ctx, "free", "me", time.Minute, "")
		return err
	}); n != 3 {
		t.Errorf("AcquireUnqueued of a free lease with nobody queued sent %d messages, want 3 (the listing, the read, the write)", n)
	}
	if err := st.Release(ctx, rec.Term); err != nil {
		t.Fatal(err)
	}
	// With a place queued through another handle it writes nothing.
	before := st.nc.Stats().OutMsgs
	if rec, err := st.AcquireUnqueued(ctx, "job", "me", time.Minute, ""); !errors.Is(err, store.ErrQueued) {
		t.Fatalf("AcquireUnqueued with another handle's place queued: %+v, %v; want ErrQueued", rec, err)
	}
	if n := st.nc.Stats().OutMsgs - before; n != 2 {
		t.Errorf("AcquireUnqueued refused for a place queued sent %d messages, want 2 (the listing, the read)", n)
	}
	if rec, err := other.Get(ctx, "job"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("after AcquireUnqueued was refused, Get: %+v, %v; want nothing granted", rec, err)
	}
	for _, c := range []struct {
		what string
		call func() error
		want uint64
	}{
		{"first enqueue of the handle", enqueue(1), 2},
		{"refresh", enqueue(1), 2},
		{"dequeue", func() error { return st.Dequeue(ctx, "job", "me") }, 2},
		{"dequeue without a place", func() error { return st.Dequeue(ctx, "job", "me") }, 1},
		{"enqueue after a dequeue", enqueue(1), 2},
	} {
		if n := sent(c.what, c.call); n != c.want {
			t.Errorf("%s sent %d messages, want %d", c.what, n, c.want)
		}
	}
	// A hint gone wrong (another handle dequeued the place) costs a read
	// more, and a listing after the new place at the back.
	if err := other.Dequeue(ctx, "job", "me"); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Enqueue(ctx, "job", "later", time.Minute); err != nil {
		t.Fatal(err)
	}
	if n := sent("refresh of a place another handle dequeued", enqueue(2)); n != 5 {
		t.Errorf("the refresh of a place gone sent %d messages, want 5 (the listing and the refused write, a read, the new place, the listing)", n)
	}
}

// TestQueueWatch: a watch of a name wakes when a place of its queue
// leaves (a dequeue, or the server's expiry of a place), and not when one
// is written or refreshed.
func TestQueueWatch(t *testing.T) {
	srv := shared(t)
	bucket := uniqueBucket("qwatch")
	st := openStore(t, srv.url(), bucket)
	waiter := openStore(t, srv.url(), bucket)
	ctx := testCtx(t, 60*time.Second)
	enqueue := func(s *Store, holder string, ttl time.Duration) int {
		t.Helper()
		n, err := s.Enqueue(ctx, "job", holder, ttl)
		if err != nil {
			t.Fatalf("Enqueue(%q): %v", holder, err)
		}
		return n
	}
	enqueue(st, "first", time.Minute)
	enqueue(waiter, "second", time.Minute)
	ch, err := waiter.Watch(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	wake := func(what string, within time.Duration) bool {
		t.Helper()
		timer := time.NewTimer(within)
		defer timer.Stop()
		select {
		case <-ch:
			return true
		case <-timer.C:
			return false
		}
	}
	// Writes and refreshes of places: no wake-up. (An observation over
	// 500 ms: a slow machine can only make it miss a wrong wake-up, never
	// fail a right store. The wake-ups below are its positive control.)
	enqueue(st, "first", time.Minute)
	enqueue(waiter, "second", time.Minute)
	enqueue(st, "third", time.Minute)
	if wake("writes and refreshes", 500*time.Millisecond) {
		t.Fatal("the watch woke for places written or refreshed, not for one that left")
	}
	if err := st.Dequeue(ctx, "job", "first"); err != nil {
		t.Fatal(err)
	}
	if !wake("dequeue", 10*time.Second) {
		t.Fatal("the watch did not wake when the place ahead left")
	}
	// A place that dies (not refreshed) expires on the server's clock; the
	// server's marker wakes the watch (a new one, on another name, so that
	// no wake-up of the dequeues above is left pending).
	ch, err = waiter.Watch(ctx, "job2")
	if err != nil {
		t.Fatal(err)
	}
	if n, err := st.Enqueue(ctx, "job2", "dead", time.Second); err != nil || n != 0 {
		t.Fatalf("Enqueue(dead): %d, %v", n, err)
	}
	if n, err := waiter.Enqueue(ctx, "job2", "alive", time.Minute); err != nil || n != 1 {
		t.Fatalf("behind a live place: %d ahead (%v), want 1", n, err)
	}
	start := time.Now()
	if !wake("expiry", 10*time.Second) {
		t.Fatal("the watch did not wake within 10s when a place of ttl 1s expired")
	}
	if n, err := waiter.Enqueue(ctx, "job2", "alive", time.Minute); err != nil || n != 0 {
		t.Fatalf("after the place ahead expired (woken %v after): %d ahead (%v), want 0", time.Since(start), n, err)
	}
}

// TestQueueDeadPlaceNotRevived: a waiter whose place expired, and that
// refreshes it afterwards, queues again at the back, behind those that
// queued after it; it does not get its old position back.
func TestQueueDeadPlaceNotRevived(t *testing.T) {
	srv := shared(t)
	bucket := uniqueBucket("qrevive")
	st := openStore(t, srv.url(), bucket)
	other := openStore(t, srv.url(), bucket)
	ctx := testCtx(t, 60*time.Second)
	if n, err := st.Enqueue(ctx, "job", "slow", time.Second); err != nil || n != 0 {
		t.Fatalf("Enqueue(slow): %d, %v", n, err)
	}
	if n, err := other.Enqueue(ctx, "job", "patient", time.Minute); err != nil || n != 1 {
		t.Fatalf("Enqueue(patient): %d, %v", n, err)
	}
	// Poll the queue (the server's state) until the slow place expired.
	deadline := time.Now().Add(20 * time.Second)
	for {
		n, err := other.Enqueue(ctx, "job", "patient", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a place of ttl 1s still ahead after 20s")
		}
		time.Sleep(100 * time.Millisecond) // polling the server
	}
	// The slow waiter's handle still hints its old place: the refresh's
	// compare-and-set is refused, and it queues anew.
	if n, err := st.Enqueue(ctx, "job", "slow", time.Minute); err != nil || n != 1 {
		t.Fatalf("the refresh of an expired place: %d ahead, %v; want 1 (behind patient)", n, err)
	}
}

// TestQueueClusterR3: on an R3 bucket, whose listings any of the three
// servers may answer (a follower perhaps behind), waiters connected to
// different servers that race to queue still get a total order.
func TestQueueClusterR3(t *testing.T) {
	if testing.Short() {
		t.Skip("three-server cluster test")
	}
	c := startCluster(t, 3)
	bucket := uniqueBucket("qr3")
	urls := c.urls()
	var handles []*Store
	for i := range 6 {
		st, err := Open(testCtx(t, 30*time.Second), Config{Servers: []string{urls[i%len(urls)]}, Options: Options{Bucket: bucket, Replicas: 3}})
		if err != nil {
			t.Fatalf("open on %s: %v", urls[i%len(urls)], err)
		}
		t.Cleanup(func() { st.Close() })
		handles = append(handles, st)
	}
	ctx := testCtx(t, 60*time.Second)
	// An empty queue's listing may come from a follower: it says nothing
	// of how far that follower had got.
	if places, upTo, err := handles[0].listQueue(ctx, "job-0"); err != nil || len(places) != 0 || upTo != 0 {
		t.Fatalf("listing of an empty queue on R3: %v up to %d, %v; want none, up to 0 (unknown)", places, upTo, err)
	}
	// AcquireUnqueued cannot know such a listing is as of now: it sends
	// nothing and answers ErrQueued, so its caller queues.
	before := handles[0].nc.Stats().OutMsgs
	if rec, err := handles[0].AcquireUnqueued(ctx, "job-0", "node-0", time.Minute, ""); !errors.Is(err, store.ErrQueued) {
		t.Fatalf("AcquireUnqueued on R3: %+v, %v; want ErrQueued", rec, err)
	}
	if n := handles[0].nc.Stats().OutMsgs - before; n != 0 {
		t.Fatalf("AcquireUnqueued on R3 sent %d messages, want none", n)
	}
	// The listing made the queues' bucket. Until its group has elected a
	// leader, a write finds nobody to store it: the client gave up after
	// its two retries, half a second (seen once in 16 runs here, the first
	// Enqueue of the rounds below failing with "no response from stream"),
	// and the store now sends it again until its context ends
	// (TestWriteAsksAgainWhenNobodyStoresIt). This test is about the
	// order, so it waits for the leader all the same.
	c.streamLeader("KV_" + QueueBucket(bucket))
	for round := range 10 {
		name := fmt.Sprintf("job-%d", round)
		ahead := make([]int, len(handles))
		errs := make([]error, len(handles))
		var wg sync.WaitGroup
		for i, st := range handles {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ahead[i], errs[i] = st.Enqueue(ctx, name, fmt.Sprintf("node-%d", i), time.Minute)
			}()
		}
		wg.Wait()
		seen := make([]bool, len(handles))
		for i, n := range ahead {
			if errs[i] != nil {
				t.Fatalf("round %d: Enqueue of node-%d: %v", round, i, errs[i])
			}
			if n < 0 || n >= len(handles) || seen[n] {
				t.Fatalf("round %d: places ahead %v, want each of 0..%d once", round, ahead, len(handles)-1)
			}
			seen[n] = true
		}
		// Every handle, whichever server answers, sees each place where it is.
		for i, st := range handles {
			for j := range handles {
				n, err := st.Enqueue(ctx, name, fmt.Sprintf("node-%d", j), time.Minute)
				if err != nil || n != ahead[j] {
					t.Fatalf("round %d: node-%d refreshed through handle %d: %d ahead (%v), want %d", round, j, i, n, err, ahead[j])
				}
			}
		}
	}
}

// TestQueueLeavesNoKeys: a dequeued place leaves no key behind (the core
// queues a new holder for each acquisition: a key left per place would
// pile up in every listing); the negative control is a place not dequeued.
func TestQueueLeavesNoKeys(t *testing.T) {
	srv := shared(t)
	st := openStore(t, srv.url(), uniqueBucket("qkeys"))
	ctx := testCtx(t, 30*time.Second)
	placeKeys := func() int {
		t.Helper()
		var si streamInfo
		if err := st.request(ctx, "STREAM.INFO."+st.queue.stream, map[string]string{"subjects_filter": st.queue.pre + queueFilter("job")}, &si); err != nil {
			t.Fatal(err)
		}
		return len(si.State.Subjects)
	}
	for i := range 20 {
		holder := fmt.Sprintf("node.%d", i)
		if _, err := st.Enqueue(ctx, "job", holder, time.Minute); err != nil {
			t.Fatal(err)
		}
		if err := st.Dequeue(ctx, "job", holder); err != nil {
			t.Fatal(err)
		}
	}
	if n := placeKeys(); n != 0 {
		t.Fatalf("20 places queued and dequeued left %d keys", n)
	}
	if _, err := st.Enqueue(ctx, "job", "stays", time.Minute); err != nil {
		t.Fatal(err)
	}
	if n := placeKeys(); n != 1 {
		t.Fatalf("a place not dequeued: %d keys, want 1", n)
	}
}

// TestQueueBucketApart: the places are written in the fair queues' bucket
// (QueueBucket), made at the handle's first Enqueue like the leases' bucket,
// and none in the leases' bucket, whose stream's expiry timer they would
// otherwise delay (see queue.go). The queues' revisions, which run ahead of
// the leases' (the bucket was made later), are not taken for the leases':
// an Acquire after Enqueue and a watch is granted, not refused as a
// regress. A handle told not to make buckets fails Enqueue, naming the
// missing bucket, and makes nothing.
func TestQueueBucketApart(t *testing.T) {
	srv := shared(t)
	bucket := uniqueBucket("qapart")
	ctx := testCtx(t, 30*time.Second)
	st, err := Open(ctx, Config{Servers: []string{srv.url()}, Options: Options{Bucket: bucket, MemoryStorage: true, MarkerTTL: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	js := st.js
	if _, err := js.Stream(ctx, "KV_"+QueueBucket(bucket)); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("before any Enqueue, the queues' bucket: %v; want it not made yet", err)
	}

	// A handle that may not make buckets.
	noCreate, err := Open(ctx, Config{Servers: []string{srv.url()}, Options: Options{Bucket: bucket, NoCreate: true}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { noCreate.Close() })
	_, err = noCreate.Enqueue(ctx, "job", "nc", time.Minute)
	if !errors.Is(err, ErrBucketConfig) || !strings.Contains(err.Error(), QueueBucket(bucket)) {
		t.Fatalf("Enqueue of a handle with NoCreate, the queues' bucket missing: %v; want ErrBucketConfig naming %q", err, QueueBucket(bucket))
	}
	if _, err := js.Stream(ctx, "KV_"+QueueBucket(bucket)); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("after a refused Enqueue, the queues' bucket: %v; want it never made", err)
	}

	if n, err := st.Enqueue(ctx, "job", "waiter", time.Minute); err != nil || n != 0 {
		t.Fatalf("Enqueue: %d, %v", n, err)
	}
	subjects := func(b *kvStream, filter string) int {
		t.Helper()
		var si streamInfo
		if err := st.request(ctx, "STREAM.INFO."+b.stream, map[string]string{"subjects_filter": b.pre + filter}, &si); err != nil {
			t.Fatal(err)
		}
		return len(si.State.Subjects)
	}
	if n := subjects(st.queue, queuePrefix+">"); n != 1 {
		t.Errorf("the queues' bucket has %d place keys, want 1", n)
	}
	if n := subjects(&st.kvStream, queuePrefix+">"); n != 0 {
		t.Errorf("the leases' bucket has %d place keys, want 0", n)
	}
	leases, err := js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		t.Fatal(err)
	}
	queues, err := js.Stream(ctx, "KV_"+QueueBucket(bucket))
	if err != nil {
		t.Fatal(err)
	}
	lc, qc := leases.CachedInfo().Config, queues.CachedInfo().Config
	if qc.Storage != lc.Storage || qc.Replicas != lc.Replicas || qc.SubjectDeleteMarkerTTL != lc.SubjectDeleteMarkerTTL || !qc.AllowMsgTTL {
		t.Errorf("the queues' bucket (storage %v, replicas %d, marker TTL %v, msg TTL %v) is not made like the leases' (%v, %d, %v)",
			qc.Storage, qc.Replicas, qc.SubjectDeleteMarkerTTL, qc.AllowMsgTTL, lc.Storage, lc.Replicas, lc.SubjectDeleteMarkerTTL)
	}
	if qc.FirstSeq <= leases.CachedInfo().State.LastSeq {
		t.Fatalf("the queues' first revision %d is not above the leases' last %d: the check below would prove nothing", qc.FirstSeq, leases.CachedInfo().State.LastSeq)
	}

	// The queues' revisions are not the leases'.
	ch, err := st.Watch(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	if n, err := st.Enqueue(ctx, "job", "waiter", time.Minute); err != nil || n != 0 {
		t.Fatalf("refresh: %d, %v", n, err)
	}
	rec, err := st.Acquire(ctx, "job", "waiter", time.Minute, "")
	if err != nil {
		t.Fatalf("Acquire after the queue's writes: %v", err)
	}
	if uint64(rec.Token) >= qc.FirstSeq {
		t.Errorf("token %d is a revision of the queues' stream (from %d), not the leases'", rec.Token, qc.FirstSeq)
	}
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("the watch did not wake on the grant")
	}
}

// TestMigrateMakesQueueBucket: on a handle opened with NoCreate, whose
// Enqueue is refused while the fair queues' bucket is missing, Migrate
// makes that bucket like the lease bucket, and again finds nothing to do;
// the handle's Enqueue then works.
func TestMigrateMakesQueueBucket(t *testing.T) {
	srv := shared(t)
	bucket := uniqueBucket("qmigrate")
	ctx := testCtx(t, 30*time.Second)
	admin, err := Open(ctx, Config{Servers: []string{srv.url()}, Options: Options{Bucket: bucket, MemoryStorage: true, MarkerTTL: 2 * time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	st, err := Open(ctx, Config{Servers: []string{srv.url()}, Options: Options{Bucket: bucket, NoCreate: true}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if _, err := st.Enqueue(ctx, "job", "w", time.Minute); !errors.Is(err, ErrBucketConfig) {
		t.Fatalf("Enqueue before Migrate: %v; want ErrBucketConfig", err)
	}
	for range 2 {
		if err := st.Migrate(ctx); err != nil {
			t.Fatalf("Migrate: %v", err)
		}
	}
	qs, err := st.js.Stream(ctx, "KV_"+QueueBucket(bucket))
	if err != nil {
		t.Fatalf("after Migrate, the queues' bucket: %v", err)
	}
	if c := qs.CachedInfo().Config; c.Storage != jetstream.MemoryStorage || c.SubjectDeleteMarkerTTL != 2*time.Hour || !c.AllowMsgTTL {
		t.Errorf("the queues' bucket: storage %v, marker TTL %v, msg TTL %v; want it made like the lease bucket (memory, 2h, on)", c.Storage, c.SubjectDeleteMarkerTTL, c.AllowMsgTTL)
	}
	if n, err := st.Enqueue(ctx, "job", "w", time.Minute); err != nil || n != 0 {
		t.Fatalf("Enqueue after Migrate: %d, %v", n, err)
	}
}
