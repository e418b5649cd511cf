package redis

import goredis "github.com/redis/go-redis/v9"

// The scripts run atomically on the server that owns the lease's hash slot.
// Every key of one lease is named in KEYS and shares the {name} hash tag, so
// they run unchanged on Redis Cluster. Redis freezes its clock for the length
// of a script (7.0 and later), so a key set with PX reports exactly that PTTL
// within the same script, and the lock and meta keys given the same PX in one
// script expire at the same instant.
//
// PTTL answers 0 for a key with less than a millisecond left, which GET still
// returns until the clock passes its expiry. The scripts treat such a key as
// expired, as Get reports it (Remaining 0), so that a term Get called expired
// is never renewed, released or reported as held afterwards.
//
// Keys of a lease (prefix P, name N):
//
//	KEYS[1] P{N}        the lock: the holder string, with PX = the term's TTL
//	KEYS[2] P{N}:token  the token counter; never expires
//	KEYS[3] P{N}:meta   hash {t: the term's token, ttl: ms, m: metadata}, same PX as the lock
//
// Replies are arrays; missing values are sent as the empty string or "0".

// acquireScript grants the lease if the lock key is absent or holds ARGV[1].
//
// ARGV: 1 holder, 2 ttl in ms, 3 metadata, 4 floor (the highest token the
// caller has seen, 0 if none), 5 the lease's event channel.
//
// Before anything else it compares the counter with the floor: a counter
// below a token that was already seen has lost increments (a restart without
// fsync, a promoted replica). The script then raises the counter to the floor
// and grants nothing; the caller reports the regress and may try again.
//
// Reply: {status, holder, token, pttl, ttl, metadata, counter-before}
// status 1 = granted, 0 = held by another (the live term), 2 = regress.
var acquireScript = goredis.NewScript(`
local floor = tonumber(ARGV[4])
local cur = redis.call('GET', KEYS[1])
local ctr = tonumber(redis.call('GET', KEYS[2]) or '0')
local regressed = false
if ctr < floor then
  redis.call('SET', KEYS[2], ARGV[4])
  regressed = true
end
local pttl = redis.call('PTTL', KEYS[1])
if cur and cur ~= ARGV[1] and pttl ~= 0 then
  local m = redis.call('HMGET', KEYS[3], 't', 'ttl', 'm')
  local status = 0
  if regressed then status = 3 end
  return {status, cur, m[1] or '0', pttl, m[2] or '0', m[3] or '', ctr}
end
if regressed then
  return {2, '', '0', 0, '0', '', ctr}
end
local tok = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('DEL', KEYS[3])
redis.call('HSET', KEYS[3], 't', tok, 'ttl', ARGV[2], 'm', ARGV[3])
redis.call('PEXPIRE', KEYS[3], ARGV[2])
return {1, ARGV[1], tok, redis.call('PTTL', KEYS[1]), ARGV[2], ARGV[3], ctr}
`)

// Status codes of acquireScript.
const (
	acqHeld         = 0
	acqGranted      = 1
	acqRegress      = 2
	acqHeldRegress  = 3 // held by another, and the counter was below the floor
	renewNotHeld    = 0
	renewRenewed    = 1
	releaseNotHeld  = 0
	releaseReleased = 1
)

// renewScript extends exactly the term (holder ARGV[1], token ARGV[2]) to
// ARGV[3] ms from now. The lock value alone is not enough: the same holder
// string may have been granted a newer term, and only that term may be renewed.
//
// Reply: {1, pttl, metadata} or {0}.
var renewScript = goredis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return {0} end
if redis.call('HGET', KEYS[3], 't') ~= ARGV[2] then return {0} end
if redis.call('PTTL', KEYS[1]) == 0 then return {0} end
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('HSET', KEYS[3], 'ttl', ARGV[3])
redis.call('PEXPIRE', KEYS[3], ARGV[3])
return {1, redis.call('PTTL', KEYS[1]), redis.call('HGET', KEYS[3], 'm') or ''}
`)

// releaseScript ends exactly the term (holder ARGV[1], token ARGV[2]) and
// publishes on its channel ARGV[3]. The counter is kept.
//
// Reply: 1 released, 0 not held.
var releaseScript = goredis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if redis.call('HGET', KEYS[3], 't') ~= ARGV[2] then return 0 end
if redis.call('PTTL', KEYS[1]) == 0 then return 0 end
redis.call('DEL', KEYS[1], KEYS[3])
redis.call('PUBLISH', ARGV[3], 'released')
return 1
`)

// getScript reads a consistent snapshot of a lease.
//
// Reply: {holder, counter, token, pttl, ttl, metadata}; a missing holder or
// counter is the empty string.
var getScript = goredis.NewScript(`
local cur = redis.call('GET', KEYS[1])
local ctr = redis.call('GET', KEYS[2])
local m = redis.call('HMGET', KEYS[3], 't', 'ttl', 'm')
return {cur or '', ctr or '', m[1] or '0', redis.call('PTTL', KEYS[1]), m[2] or '0', m[3] or ''}
`)

// forceReleaseScript ends whatever term is live, and publishes on ARGV[1].
//
// Reply: {-1} never granted, {0, counter} nothing live, or
// {1, holder, token, pttl, ttl, metadata, counter} the term it ended.
var forceReleaseScript = goredis.NewScript(`
local cur = redis.call('GET', KEYS[1])
local ctr = redis.call('GET', KEYS[2])
if cur and redis.call('PTTL', KEYS[1]) == 0 then cur = false end
if not cur then
  if not ctr then return {-1} end
  return {0, ctr}
end
local m = redis.call('HMGET', KEYS[3], 't', 'ttl', 'm')
local pttl = redis.call('PTTL', KEYS[1])
redis.call('DEL', KEYS[1], KEYS[3])
redis.call('PUBLISH', ARGV[1], 'released')
return {1, cur, m[1] or '0', pttl, m[2] or '0', m[3] or '', ctr or '0'}
`)
