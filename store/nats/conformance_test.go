package nats

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/storetest"
)

// TestConformance runs the store contract's suite on an embedded current
// server (file storage), each case in its own bucket, with the losses the
// README speaks of: a key purged, the bucket purged, the bucket deleted and
// made again (by leasehold, and by hand), and the server restarted.
func TestConformance(t *testing.T) {
	srv := startServer(t, nil)
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T) func() (store.Store, error) {
			bucket := uniqueBucket("conf")
			return func() (store.Store, error) {
				return Open(testCtx(t, 20*time.Second), Config{Servers: []string{srv.url()}, Options: Options{Bucket: bucket}})
			}
		},
		MinTTL: MinTTL,
		Losses: natsLosses(srv),
	})
}

// bucketOf opens a handle to learn the bucket the harness's open uses.
func bucketOf(t *testing.T, open func() (store.Store, error)) string {
	t.Helper()
	st, err := open()
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	defer st.Close()
	return st.(*Store).Bucket()
}

func natsLosses(srv *natsServer) []storetest.Loss {
	js := func(t *testing.T) jetstream.JetStream {
		j, err := jetstream.New(connect(t, srv.url()))
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	return []storetest.Loss{
		{
			Name: "key purged",
			Lose: func(t *testing.T, open func() (store.Store, error), name string) error {
				kv, err := js(t).KeyValue(testCtx(t, 10*time.Second), bucketOf(t, open))
				if err != nil {
					t.Fatal(err)
				}
				if err := kv.Purge(testCtx(t, 10*time.Second), keyOf(name)); err != nil {
					t.Fatalf("purge key: %v", err)
				}
				return nil
			},
			Survives: true, // the revision is the bucket's sequence, which a purge keeps
		},
		{
			Name: "bucket purged",
			Lose: func(t *testing.T, open func() (store.Store, error), name string) error {
				s, err := js(t).Stream(testCtx(t, 10*time.Second), "KV_"+bucketOf(t, open))
				if err != nil {
					t.Fatal(err)
				}
				if err := s.Purge(testCtx(t, 10*time.Second)); err != nil {
					t.Fatalf("purge stream: %v", err)
				}
				return nil
			},
			Survives: true,
		},
		{
			Name: "bucket deleted and made again by leasehold",
			Lose: func(t *testing.T, open func() (store.Store, error), name string) error {
				if err := js(t).DeleteStream(testCtx(t, 10*time.Second), "KV_"+bucketOf(t, open)); err != nil {
					t.Fatalf("delete bucket: %v", err)
				}
				return nil // the next handle's Open makes it, revisions from the clock in µs
			},
			Survives: true,
		},
		{
			Name: "bucket deleted and made again by hand (revisions from 1)",
			Lose: func(t *testing.T, open func() (store.Store, error), name string) error {
				bucket := bucketOf(t, open)
				j := js(t)
				if err := j.DeleteStream(testCtx(t, 10*time.Second), "KV_"+bucket); err != nil {
					t.Fatalf("delete bucket: %v", err)
				}
				if _, err := j.CreateKeyValue(testCtx(t, 10*time.Second), jetstream.KeyValueConfig{Bucket: bucket, LimitMarkerTTL: time.Hour}); err != nil {
					t.Fatalf("make bucket by hand: %v", err)
				}
				return nil
			},
			Survives: false, // a handle that saw the old revisions detects the regress
		},
		{
			Name: "server restarted",
			Lose: func(t *testing.T, open func() (store.Store, error), name string) error {
				srv.restart()
				return nil
			},
			Survives: true, // file storage: the stream and its sequence are on disk
		},
	}
}
