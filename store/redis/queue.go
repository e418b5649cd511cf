package redis

import (
	"context"
	"fmt"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/store"
)

var (
	_ store.Queuer           = (*Store)(nil)
	_ store.UnqueuedAcquirer = (*Store)(nil)
)

// The queue of lease name N (prefix P) is three keys in N's hash slot:
//
//	P{N}:queue   a sorted set: each waiter's holder, scored by its ticket
//	P{N}:qexp    a sorted set: each waiter's holder, scored by the expiry of
//	             its place in ms on the server's clock (TIME)
//	P{N}:qseq    the ticket counter
//
// Enqueue and Dequeue are one script each. The three keys expire (PEXPIRE,
// only ever lengthened) once the last place would have: an abandoned queue
// leaves nothing behind.
func (s *Store) queueKeys(name string) []string {
	lock := s.prefix + "{" + name + "}"
	return []string{lock + ":queue", lock + ":qexp", lock + ":qseq"}
}

// enqueueScript drops expired places (publishing on the lease's channel
// if it dropped any), adds ARGV[1] with the next ticket unless it is
// queued, sets its place's expiry to now + ARGV[2] ms, and returns its rank.
//
// ARGV: 1 holder, 2 ttl in ms, 3 the lease's channel.
var enqueueScript = goredis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
local dead = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now)
if #dead > 0 then
  for i = 1, #dead, 1000 do
    local part = {unpack(dead, i, math.min(i + 999, #dead))}
    redis.call('ZREM', KEYS[1], unpack(part))
    redis.call('ZREM', KEYS[2], unpack(part))
  end
  redis.call('PUBLISH', ARGV[3], 'dequeued')
end
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  redis.call('ZADD', KEYS[1], redis.call('INCR', KEYS[3]), ARGV[1])
end
redis.call('ZADD', KEYS[2], now + ttl, ARGV[1])
for i = 1, 3 do
  if redis.call('PTTL', KEYS[i]) < ttl then redis.call('PEXPIRE', KEYS[i], ttl) end
end
return redis.call('ZRANK', KEYS[1], ARGV[1])
`)

// dequeueScript removes ARGV[1]'s place and, if it had one, publishes on
// the lease's channel (ARGV[2]) so that the waiters behind it move up.
var dequeueScript = goredis.NewScript(`
local n = redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
if n == 1 then redis.call('PUBLISH', ARGV[2], 'dequeued') end
return n
`)

// Enqueue implements store.Queuer: one script on the server's clock.
func (s *Store) Enqueue(ctx context.Context, name, holder string, ttl time.Duration) (int, error) {
	if err := s.life.Check(ctx); err != nil {
		return 0, err
	}
	if err := kit.CheckEnqueue(name, holder, ttl); err != nil {
		return 0, err
	}
	ms := (ttl + time.Millisecond - 1) / time.Millisecond
	n, err := enqueueScript.Run(ctx, s.c, s.queueKeys(name), holder, int64(ms), s.channel(name)).Int64()
	if err != nil {
		return 0, s.wrap(fmt.Sprintf("enqueue %q", name), err)
	}
	return int(n), nil
}

// Dequeue implements store.Queuer.
func (s *Store) Dequeue(ctx context.Context, name, holder string) error {
	if err := s.life.Check(ctx); err != nil {
		return err
	}
	if err := kit.CheckDequeue(name, holder); err != nil {
		return err
	}
	if err := dequeueScript.Run(ctx, s.c, s.queueKeys(name), holder, s.channel(name)).Err(); err != nil {
		return s.wrap(fmt.Sprintf("dequeue %q", name), err)
	}
	return nil
}
