package main_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	natsio "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leasehold/leasehold/internal/faultproxy"
	"github.com/leasehold/leasehold/internal/freeport"
	lhnats "github.com/leasehold/leasehold/store/nats"
)

// embeddedNATS runs a current NATS server (JetStream on) in the test
// process and returns its client address.
func embeddedNATS(t *testing.T) string {
	t.Helper()
	// Below the kernel's ephemeral range (freeport): a port taken from a
	// listener on port 0 and closed can be handed to another process first.
	port := freeport.ForTest(t)
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: port, HTTPPort: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(30 * time.Second) {
		t.Fatal("embedded NATS server not ready within 30s")
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	return fmt.Sprintf("127.0.0.1:%d", port)
}

// embeddedJetStream is embeddedNATS with a JetStream client of the test's
// own on it, to look at the buckets the command makes.
func embeddedJetStream(t *testing.T) (string, jetstream.JetStream) {
	t.Helper()
	host := embeddedNATS(t)
	nc, err := natsio.Connect("nats://" + host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return host, js
}

// The standby is woken by the KV watch when the holder releases.
func TestHandOffWokenNATS(t *testing.T) {
	handOff(t, "nats://"+embeddedNATS(t)+"/lh-cli-handoff")
}

// TestTwoRunsNATS: two `leasehold run` on one lease in a NATS KV bucket;
// kill -9 the leader; the other takes over only once the server has expired
// the killed leader's key, with a higher token (the key's revision); SIGTERM
// to the new leader is forwarded, and it releases: status shows the lease
// free with the last token.
func TestTwoRunsNATS(t *testing.T) { twoRuns(t, "nats://"+embeddedNATS(t)+"/lh-cli-e2e") }

// TestRunNATSOpenAsksAgain: `leasehold run` opens its bucket with the
// store's Open (through OpenURL), which asks again when a stream-info read
// goes unanswered, as a clustered server may leave one right after a bucket
// is made (store/nats: TestOpenAsksAgainWhenUnanswered). Here a proxy drops
// the first two such requests for the run's bucket: the run still takes
// the lease, runs its command and exits 0. The control is the proxy's
// count: it saw and dropped both.
func TestRunNATSOpenAsksAgain(t *testing.T) {
	host := embeddedNATS(t)
	const bucket = "lh-ask-again"
	// The bucket, made by a status, as a running deployment has it.
	if code, out, errOut := leasehold(t, nil, "status", "--store", "nats://"+host+"/"+bucket); code != 0 {
		t.Fatalf("status: exit %d\n%s%s", code, out, errOut)
	}
	p, err := faultproxy.New(host)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	d := faultproxy.NewNATSDropper("$JS.API.STREAM.INFO.KV_"+bucket, 2)
	p.FilterClient(d.Filter)
	args := append([]string{"run", "--store", "nats://" + p.Addr() + "/" + bucket, "--lease", "job"}, timingArgs...)
	args = append(args, "--", "sh", "-c", `echo "ran with token $LEASEHOLD_TOKEN"`)
	code, out, errOut := leasehold(t, nil, args...)
	if code != 0 || !strings.Contains(out, "ran with token ") {
		t.Fatalf("run with two stream-info requests unanswered: exit %d (dropped %d)\n%s%s", code, d.Dropped(), out, errOut)
	}
	if n := d.Dropped(); n != 2 {
		t.Fatalf("the proxy dropped %d stream-info requests, want 2", n)
	}
}

// TestMigrateNATS: `leasehold migrate` on NATS makes the fair queues'
// bucket beside the lease bucket, even with create=false (the explicit
// step for deployments that make buckets ahead), and again finds nothing
// to do; before it, that bucket is missing (the control).
func TestMigrateNATS(t *testing.T) {
	host, js := embeddedJetStream(t)
	queueBucket := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := js.KeyValue(ctx, lhnats.QueueBucket("lh-migrate"))
		return err
	}
	// The lease bucket, made by a status (which queues nothing).
	if code, out, errOut := leasehold(t, nil, "status", "--store", "nats://"+host+"/lh-migrate"); code != 0 {
		t.Fatalf("status: exit %d\n%s%s", code, out, errOut)
	}
	if err := queueBucket(); !errors.Is(err, jetstream.ErrBucketNotFound) {
		t.Fatalf("before migrate, the queues' bucket: %v; want it missing", err)
	}
	for range 2 {
		code, out, errOut := leasehold(t, nil, "migrate", "--store", "nats://"+host+"/lh-migrate?create=false")
		if code != 0 || !strings.Contains(out, ": migrated: ") {
			t.Fatalf("migrate: exit %d\n%s%s", code, out, errOut)
		}
		if err := queueBucket(); err != nil {
			t.Fatalf("after migrate, the queues' bucket: %v", err)
		}
	}
}
