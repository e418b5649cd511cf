package nats

import (
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/faultproxy"
)

// proxyThrough passes a NATS client's connections to a server through d
// (internal/faultproxy), which drops or diverts some of the client's
// publishes, and returns the proxy's URL.
func proxyThrough(t *testing.T, target string, d *faultproxy.NATSDropper) string {
	t.Helper()
	p, err := faultproxy.New(strings.TrimPrefix(target, "nats://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	p.FilterClient(d.Filter)
	return "nats://" + p.Addr()
}

// TestOpenAsksAgainWhenUnanswered: a JetStream API read that Open sends and
// no server answers (a clustered server leaves some unanswered while a new
// stream's group elects its leader) is sent again after a short wait,
// rather than holding Open until its context ends. Here the first two
// stream-info requests are dropped on the way to the server; Open asks a
// third time and opens the bucket. The control is the count of drops: the
// proxy saw and dropped both (without the asking again, Open fails with
// the context's deadline, as TestClusterR3KillMembers once did in CI).
func TestOpenAsksAgainWhenUnanswered(t *testing.T) {
	srv := shared(t)
	bucket := uniqueBucket("ask-again")
	openStore(t, srv.url(), bucket) // makes the bucket
	d := faultproxy.NewNATSDropper("$JS.API.STREAM.INFO.KV_"+bucket, 2)
	url := proxyThrough(t, srv.url(), d)
	st, err := Open(testCtx(t, 15*time.Second), Config{Servers: []string{url}, Options: Options{Bucket: bucket}})
	if err != nil {
		t.Fatalf("open with two stream-info requests unanswered: %v (dropped %d)", err, d.Dropped())
	}
	defer st.Close()
	if n := d.Dropped(); n != 2 {
		t.Fatalf("the proxy dropped %d stream-info requests, want 2", n)
	}
	// The store works through the proxy.
	rec, err := st.Acquire(testCtx(t, 10*time.Second), "job", "a", 5*time.Second, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Release(testCtx(t, 10*time.Second), rec.Term); err != nil {
		t.Fatal(err)
	}
}

// TestWriteAsksAgainWhenNobodyStoresIt: a write that no server stored (the
// server answers that nobody listens, as it does while a new stream's group,
// or one whose leader died, elects its leader) is sent again until one is
// stored, within the call's context. Here a proxy diverts the first three
// writes of the bucket to a subject nobody listens on, one more than the
// client's own two retries: Acquire is granted, and the proxy diverted all
// three (the control: with the client's default retries, Acquire fails with
// "nats: no response from stream").
func TestWriteAsksAgainWhenNobodyStoresIt(t *testing.T) {
	srv := shared(t)
	bucket := uniqueBucket("write-again")
	d := faultproxy.NewNATSDiverter("$KV."+bucket+".", 3)
	st := openStore(t, proxyThrough(t, srv.url(), d), bucket)
	ctx := testCtx(t, 10*time.Second)
	rec, err := st.Acquire(ctx, "job", "a", 5*time.Second, "")
	if err != nil {
		t.Fatalf("acquire with three writes unstored: %v (diverted %d)", err, d.Dropped())
	}
	if n := d.Dropped(); n != 3 {
		t.Fatalf("the proxy diverted %d writes, want 3", n)
	}
	if err := st.Release(ctx, rec.Term); err != nil {
		t.Fatal(err)
	}
}
