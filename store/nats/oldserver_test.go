package nats

import (
	"errors"
	"strings"
	"testing"
	"time"

	natsio "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leasehold/leasehold/internal/testenv"
)

// The machine's own NATS (Debian's 2.9.10, JetStream on) at
// LEASEHOLD_NATS_OLD (default 127.0.0.1:4222): what happens on a server
// older than MinServerVersion.
func oldServer(t *testing.T) (string, *natsio.Conn) {
	t.Helper()
	addr := testenv.RequireTCP(t, "NATS server with JetStream (the machine's 2.9)", testenv.Env("LEASEHOLD_NATS_OLD", "127.0.0.1:4222"),
		"apt-get install nats-server and run it with -js, or set LEASEHOLD_NATS_OLD")
	url := "nats://" + addr
	nc := connect(t, url)
	if _, ok := parseVersion(nc.ConnectedServerVersion()); !ok {
		t.Fatalf("the server at %s reports version %q", addr, nc.ConnectedServerVersion())
	}
	if err := checkVersion(nc.ConnectedServerVersion(), addr); err == nil {
		testenv.Missing(t, "a NATS server older than "+MinServerVersion, "the server at "+addr+" is "+nc.ConnectedServerVersion())
	}
	return url, nc
}

// Open refuses an old server, naming its version and the minimum, and
// makes nothing on it.
func TestOldServerRefused(t *testing.T) {
	url, nc := oldServer(t)
	bucket := uniqueBucket("old")
	st, err := Open(testCtx(t, 10*time.Second), Config{Servers: []string{url}, Options: Options{Bucket: bucket}})
	if err == nil {
		st.Close()
		t.Fatalf("Open on a %s server succeeded", nc.ConnectedServerVersion())
	}
	if !errors.Is(err, ErrServerTooOld) {
		t.Fatalf("Open: %v, want ErrServerTooOld", err)
	}
	for _, want := range []string{nc.ConnectedServerVersion(), MinServerVersion, "per-key TTL"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Open's error %q does not say %q", err, want)
		}
	}
	t.Logf("Open on the machine's server: %v", err)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Stream(testCtx(t, 5*time.Second), "KV_"+bucket); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Errorf("after a refused Open, stream KV_%s: %v; want it never made", bucket, err)
	}
}

// Why: an old server takes the per-key TTL header and ignores it. A key
// written with Nats-TTL 1s is still there seconds later, so a crashed
// holder's lease would never expire; and nats.go itself refuses a bucket
// with a marker TTL there.
func TestOldServerIgnoresKeyTTL(t *testing.T) {
	_, nc := oldServer(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t, 30*time.Second)
	bucket := uniqueBucket("old-ttl")
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucket, LimitMarkerTTL: time.Hour}); !errors.Is(err, jetstream.ErrLimitMarkerTTLNotSupported) {
		t.Errorf("CreateKeyValue with a marker TTL on %s: %v, want ErrLimitMarkerTTLNotSupported", nc.ConnectedServerVersion(), err)
	}
	// The stream the store would make, made by hand: the old server
	// accepts it, without the fields it does not know.
	stream := "KV_" + bucket
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{
		Name: stream, Subjects: []string{"$KV." + bucket + ".>"}, MaxMsgsPerSubject: 1,
		Storage: jetstream.MemoryStorage, AllowMsgTTL: true, SubjectDeleteMarkerTTL: time.Hour,
	})
	if err != nil {
		t.Fatalf("create stream on the old server: %v", err)
	}
	t.Cleanup(func() { js.DeleteStream(testCtx(t, 5*time.Second), stream) })
	m := natsio.NewMsg("$KV." + bucket + ".job")
	m.Header.Set(hdrTTL, "1s")
	m.Data = []byte(`{"holder":"crashed","ttl_ms":1000}`)
	ack, err := js.PublishMsg(ctx, m, jetstream.WithExpectLastSequencePerSubject(0))
	if err != nil {
		t.Fatalf("publish with Nats-TTL 1s on the old server: %v", err)
	}
	s, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	if s.CachedInfo().Config.AllowMsgTTL {
		t.Errorf("the old server reports allow_msg_ttl on: the test's premise is wrong")
	}
	// Poll for three times the TTL: the key must still be there.
	until := time.Now().Add(3 * time.Second)
	for time.Now().Before(until) {
		got, err := s.GetLastMsgForSubject(ctx, "$KV."+bucket+".job")
		if err != nil {
			t.Fatalf("the key written with Nats-TTL 1s is gone: %v (the old server honours per-key TTL after all?)", err)
		}
		if got.Sequence != ack.Sequence {
			t.Fatalf("the key changed: revision %d, want %d", got.Sequence, ack.Sequence)
		}
		timer := time.NewTimer(200 * time.Millisecond) // polling the server, as a waiter would
		<-timer.C
	}
	t.Logf("on %s a key written with Nats-TTL 1s was still there after 3s: a lease would never expire", nc.ConnectedServerVersion())
}
