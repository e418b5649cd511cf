package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	natsio "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	lhnats "github.com/leasehold/leasehold/store/nats"
)

// natsEnv is one NATS server (the server's own code, v2.15, in this
// process, JetStream on files, as store/nats's tests run it), a leasehold
// store on its own bucket, and a plain KV bucket for the floor. No NATS KV
// election library builds from the module proxy, so NATS has leasehold and
// its floor only.
type natsEnv struct {
	dir    string
	srv    *server.Server
	nc     *natsio.Conn
	floor  jetstream.KeyValue
	st     *lhnats.Store
	bucket string
}

func startNATS(ctx context.Context, runID string) (*natsEnv, error) {
	dir, err := os.MkdirTemp("", "lhbench-nats-")
	if err != nil {
		return nil, err
	}
	e := &natsEnv{dir: dir, bucket: "lhbench-" + runID}
	port, err := freePort()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: port, HTTPPort: -1, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("embedded NATS server: %w", err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(30 * time.Second) {
		srv.Shutdown()
		os.RemoveAll(dir)
		return nil, errors.New("embedded NATS server not ready within 30s")
	}
	e.srv = srv
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	if e.nc, err = natsio.Connect(url); err != nil {
		e.close()
		return nil, err
	}
	js, err := jetstream.New(e.nc)
	if err != nil {
		e.close()
		return nil, err
	}
	if e.floor, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: e.bucket + "-floor"}); err != nil {
		e.close()
		return nil, fmt.Errorf("floor bucket: %w", err)
	}
	if e.st, err = lhnats.Open(ctx, lhnats.Config{Servers: []string{url}, Options: lhnats.Options{Bucket: e.bucket}}); err != nil {
		e.close()
		return nil, err
	}
	return e, nil
}

func (e *natsEnv) version() string {
	return fmt.Sprintf("nats-server %s embedded (github.com/nats-io/nats-server/v2/server, JetStream on files, R1)", server.VERSION)
}

func (e *natsEnv) close() {
	if e.st != nil {
		e.st.Close()
	}
	if e.nc != nil {
		e.nc.Close()
	}
	if e.srv != nil {
		e.srv.Shutdown()
		e.srv.WaitForShutdown()
	}
	os.RemoveAll(e.dir)
}

func (e *natsEnv) libs(handoffTTL time.Duration) []*lib {
	return []*lib{
		lhLockLib("nats", e.st, handoffTTL, "KV watch"),
		lhElectorLib("nats", e.st, handoffTTL, "KV watch"),
	}
}

// --- NATS KV: Delete (a delete marker); the KV watch sees it; Create (the
// compare-and-set on an absent or deleted key). No TTL, no token.

func (e *natsEnv) floorLib() *lib {
	return &lib{
		name: floorName, store: "nats", kind: "floor",
		config: "KV Delete -> KV watch (made once the key was found held) sees the marker -> KV Create (no per-key TTL)",
		newContender: func(ctx context.Context, lockName string, s setup) (contender, error) {
			key := "raw." + strings.Map(func(r rune) rune {
				if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
					return r
				}
				return '_'
			}, lockName)
			return &rawNATSC{kv: e.floor, key: key}, nil
		},
	}
}

type rawNATSC struct {
	kv  jetstream.KeyValue
	key string
}

func (c *rawNATSC) acquire(ctx context.Context) (held, error) {
	var w jetstream.KeyWatcher
	defer func() {
		if w != nil {
			w.Stop()
		}
	}()
	for {
		rev, err := c.kv.Create(ctx, c.key, []byte(randHex(8)))
		if err == nil {
			h := &peerHeld{rel: func(ctx context.Context) error {
				return c.kv.Delete(ctx, c.key, jetstream.LastRevision(rev))
			}}
			h.clock.mark()
			return h, nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return nil, err
		}
		if w == nil {
			// Held: watch, then try once more at once, so that a delete
			// between the try and the watch is not missed.
			if w, err = c.kv.Watch(ctx, c.key, jetstream.UpdatesOnly()); err != nil {
				return nil, err
			}
			continue
		}
	wait:
		for {
			select {
			case en, ok := <-w.Updates():
				if !ok {
					return nil, errors.New("watch ended")
				}
				if en != nil && en.Operation() != jetstream.KeyValuePut {
					break wait
				}
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
	}
}

func (c *rawNATSC) close() {}
