package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	goredis "github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
)

// The floor of each store: the smallest hand-off the store allows, done with
// its bare primitives and no library: one write that frees the lock and
// notifies, the notification, one compare-and-set write that takes the lock.
// No TTL bookkeeping, no fencing counter, no history: what any library on
// that store must at least pay. It runs through the same hand-off code as the
// libraries.

const floorName = "floor (raw store)"

// --- Redis: DEL+PUBLISH in one script; SUBSCRIBE; SET NX.

var rawRedisRelease = goredis.NewScript(`
if redis.call('get', KEYS[1]) == ARGV[1] then
  redis.call('del', KEYS[1])
  redis.call('publish', KEYS[2], 'free')
  return 1
end
return 0`)

func (e *redisEnv) floorLib() *lib {
	return &lib{
		name: floorName, store: "redis", kind: "floor",
		config: "script {DEL; PUBLISH} -> subscriber wakes -> SET NX PX (one persistent subscription per client)",
		newContender: func(ctx context.Context, lockName string, s setup) (contender, error) {
			key := e.prefix + "raw:" + lockName
			ch := key + ":ch"
			sub := e.client.Subscribe(ctx, ch)
			if _, err := sub.Receive(ctx); err != nil {
				sub.Close()
				return nil, err
			}
			return &rawRedisC{e: e, key: key, ch: ch, sub: sub, msgs: sub.Channel()}, nil
		},
	}
}

type rawRedisC struct {
	e       *redisEnv
	key, ch string
	sub     *goredis.PubSub
	msgs    <-chan *goredis.Message
}

func (c *rawRedisC) acquire(ctx context.Context) (held, error) {
	id := randHex(8)
	for {
		// Drop stale wake-ups, then try; a release after the try is seen.
	drain:
		for {
			select {
			case <-c.msgs:
			default:
				break drain
			}
		}
		ok, err := c.e.client.SetNX(ctx, c.key, id, time.Minute).Result()
		if err != nil {
			return nil, err
		}
		if ok {
			h := &peerHeld{rel: func(ctx context.Context) error {
				return rawRedisRelease.Run(ctx, c.e.client, []string{c.key, c.ch}, id).Err()
			}}
			h.clock.mark()
			return h, nil
		}
		select {
		case <-c.msgs:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (c *rawRedisC) close() { c.sub.Close() }

// --- PostgreSQL: UPDATE ... RETURNING + pg_notify in one statement; LISTEN;
// INSERT ... ON CONFLICT DO UPDATE WHERE free.

func (e *pgEnv) floorLib() *lib {
	return &lib{
		name: floorName, store: "postgres", kind: "floor",
		config: "one statement {UPDATE free; pg_notify} -> LISTEN connection wakes -> INSERT .. ON CONFLICT DO UPDATE WHERE free (autocommit)",
		newContender: func(ctx context.Context, lockName string, s setup) (contender, error) {
			if _, err := e.pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+e.schema+`.rawlock (name text PRIMARY KEY, holder text)`); err != nil {
				return nil, err
			}
			conn, err := e.conn(ctx, "lhbench-floor")
			if err != nil {
				return nil, err
			}
			ch := "lhbench_raw_" + e.schema
			if _, err := conn.Exec(ctx, `LISTEN `+ch); err != nil {
				conn.Close(ctx)
				return nil, err
			}
			c := &rawPGC{e: e, name: lockName, ch: ch, conn: conn, wake: make(chan struct{}, 1), done: make(chan struct{})}
			lctx, cancel := context.WithCancel(context.Background())
			c.cancel = cancel
			go c.listen(lctx)
			return c, nil
		},
	}
}

type rawPGC struct {
	e      *pgEnv
	name   string
	ch     string
	conn   *pgx.Conn
	wake   chan struct{}
	cancel context.CancelFunc
	done   chan struct{}
}

func (c *rawPGC) listen(ctx context.Context) {
	defer close(c.done)
	for {
		n, err := c.conn.WaitForNotification(ctx)
		if err != nil {
			return
		}
		if n.Payload == c.name {
			select {
			case c.wake <- struct{}{}:
			default:
			}
		}
	}
}

func (c *rawPGC) acquire(ctx context.Context) (held, error) {
	id := randHex(8)
	for {
		select {
		case <-c.wake:
		default:
		}
		var one int
		err := c.e.pool.QueryRow(ctx, `INSERT INTO `+c.e.schema+`.rawlock AS r (name, holder) VALUES ($1, $2)
ON CONFLICT (name) DO UPDATE SET holder = excluded.holder WHERE r.holder IS NULL RETURNING 1`, c.name, id).Scan(&one)
		if err == nil {
			h := &peerHeld{rel: func(ctx context.Context) error {
				_, err := c.e.pool.Exec(ctx, `WITH u AS (UPDATE `+c.e.schema+`.rawlock SET holder = NULL WHERE name = $1 AND holder = $2 RETURNING name)
SELECT pg_notify($3, name) FROM u`, c.name, id, c.ch)
				return err
			}}
			h.clock.mark()
			return h, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return nil, err
		}
		select {
		case <-c.wake:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (c *rawPGC) close() {
	c.cancel()
	<-c.done
	c.conn.Close(context.Background())
}

// --- etcd: Delete; Watch from the next revision; Txn create-if-absent.

func (e *etcdEnv) floorLib() *lib {
	return &lib{
		name: floorName, store: "etcd", kind: "floor",
		config: "Delete -> watch (from the failed Txn's next revision) sees the delete -> Txn put-if-absent (no etcd lease)",
		newContender: func(ctx context.Context, lockName string, s setup) (contender, error) {
			return &rawEtcdC{e: e, cli: e.cli, key: e.prefix + "raw/" + lockName, s: s}, nil
		},
	}
}

// rawEtcdC in the failover scenario (keepAlive) attaches its key to an etcd
// lease kept alive by the client's own keep-alive loop: its failover is
// etcd's own expiry of a lease (the leader revokes expired leases on a
// 500 ms tick), plus the watch and one Txn.
type rawEtcdC struct {
	e   *etcdEnv
	cli *clientv3.Client
	key string
	s   setup
}

func (c *rawEtcdC) acquire(ctx context.Context) (held, error) {
	id := randHex(8)
	var lease clientv3.LeaseID
	var kaCancel context.CancelFunc = func() {}
	if c.s.keepAlive {
		g, err := c.cli.Grant(ctx, int64(ttlSecs(c.s.ttl)))
		if err != nil {
			return nil, err
		}
		lease = g.ID
		kctx, cancel := context.WithCancel(context.Background())
		if _, err := c.cli.KeepAlive(kctx, lease); err != nil {
			cancel()
			return nil, err
		}
		kaCancel = cancel
	}
	for {
		put := clientv3.OpPut(c.key, id)
		if lease != 0 {
			put = clientv3.OpPut(c.key, id, clientv3.WithLease(lease))
		}
		resp, err := c.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(c.key), "=", 0)).
			Then(put).Commit()
		if err != nil {
			kaCancel()
			return nil, err
		}
		if resp.Succeeded {
			if lease != 0 {
				return &rawEtcdHeld{e: c.e, lease: lease, stop: kaCancel, key: c.key, cli: c.cli}, nil
			}
			h := &peerHeld{rel: func(ctx context.Context) error {
				_, err := c.cli.Delete(ctx, c.key)
				return err
			}}
			h.clock.mark()
			return h, nil
		}
		wctx, cancel := context.WithCancel(ctx)
		wch := c.cli.Watch(wctx, c.key, clientv3.WithRev(resp.Header.Revision+1))
		deleted := false
		for wr := range wch {
			for _, ev := range wr.Events {
				if ev.Type == clientv3.EventTypeDelete {
					deleted = true
				}
			}
			if deleted || wr.Err() != nil {
				break
			}
		}
		cancel()
		if ctx.Err() != nil {
			kaCancel()
			return nil, ctx.Err()
		}
	}
}

func (c *rawEtcdC) close() {}

type rawEtcdHeld struct {
	e     *etcdEnv
	cli   *clientv3.Client
	key   string
	lease clientv3.LeaseID
	stop  context.CancelFunc
}

func (h *rawEtcdHeld) release(ctx context.Context) error {
	h.stop()
	_, err := h.cli.Revoke(ctx, h.lease)
	return err
}
func (h *rawEtcdHeld) crash()                 { h.stop() }
func (h *rawEtcdHeld) lastRenewal() time.Time { return h.e.leases.lastOf(h.lease) }

// --- Kubernetes: Update the Lease free; watch the Lease; Update it taken
// (resourceVersion compare-and-swap).

func (e *kubeEnv) floorLib() *lib {
	return &lib{
		name: floorName, store: "kubernetes", kind: "floor",
		config: "Update Lease holder empty -> watch event -> Update holder (resourceVersion CAS)",
		newContender: func(ctx context.Context, lockName string, s setup) (contender, error) {
			return &rawKubeC{e: e, name: "raw-" + sanitizeKube(lockName)}, nil
		},
	}
}

func sanitizeKube(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			b[i] = '-'
		}
	}
	return string(b)
}

type rawKubeC struct {
	e    *kubeEnv
	name string
}

func (c *rawKubeC) acquire(ctx context.Context) (held, error) {
	id := "raw-" + randHex(6)
	leases := c.e.cs.CoordinationV1().Leases(c.e.ns)
	for {
		l, err := leases.Get(ctx, c.name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			l, err = leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: c.name, Namespace: c.e.ns},
				Spec: coordinationv1.LeaseSpec{HolderIdentity: &id}}, metav1.CreateOptions{})
			if err == nil {
				return c.held(id, l), nil
			}
			if apierrors.IsAlreadyExists(err) {
				continue
			}
			return nil, err
		}
		if err != nil {
			return nil, err
		}
		for {
			if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
				l.Spec.HolderIdentity = &id
				nl, err := leases.Update(ctx, l, metav1.UpdateOptions{})
				if err == nil {
					return c.held(id, nl), nil
				}
				if !apierrors.IsConflict(err) {
					return nil, err
				}
				break // re-read
			}
			// Held: watch from this version for the next change.
			w, err := leases.Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", c.name).String(), ResourceVersion: l.ResourceVersion})
			if err != nil {
				return nil, err
			}
			var next *coordinationv1.Lease
			for ev := range w.ResultChan() {
				if nl, ok := ev.Object.(*coordinationv1.Lease); ok {
					next = nl
					break
				}
			}
			w.Stop()
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if next == nil {
				break // watch ended: re-read
			}
			l = next
		}
	}
}

func (c *rawKubeC) held(id string, l *coordinationv1.Lease) held {
	leases := c.e.cs.CoordinationV1().Leases(c.e.ns)
	h := &peerHeld{rel: func(ctx context.Context) error {
		cur := l.DeepCopy()
		cur.Spec.HolderIdentity = nil
		_, err := leases.Update(ctx, cur, metav1.UpdateOptions{})
		if err != nil {
			return fmt.Errorf("raw release: %w", err)
		}
		return nil
	}}
	h.clock.mark()
	return h
}

func (c *rawKubeC) close() {}
