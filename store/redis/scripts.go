package redis

import goredis "github.com/redis/go-redis/v9"

// The scripts run atomically on the server that owns the lease's hash slot.
// Every key of one lease is named in KEYS and shares the {name} hash tag, so
// they run unchanged on Redis Cluster. Inside a script Redis judges a key's
// expiry by the script's start. Redis 7.2 and later also count every PX from
// that instant, so the lock and term keys given the same PX in one script
// expire together; 7.0 counts each PX from its own command, so the term
// record, always set after the lock, expires with it or a few milliseconds
// later, never before: a held lock always has its term record.
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
//	KEYS[3] P{N}:term   the term's record "token:ttl:metadata" (token and ttl
//	                    in decimal, ttl in ms; metadata is the rest, colons and
//	                    all), same PX as the lock
//
// renewScript and releaseScript, which do not touch the counter, are sent
// only the lock and the term record, as KEYS[1] and KEYS[2] (each key sent
// costs the script a little). The lease's pub/sub channel is
// KEYS[1] .. ':events'.
//
// The scripts are written for the fewest Redis commands on the common path
// (each command a script runs costs about as much as a script's own
// overhead): the term is one string written with one SET PX, not a hash that
// needs HSET and PEXPIRE, and a PTTL the script just set is not read back.
// Replies are arrays; a missing value is sent as the empty string.

// acquireScript grants the lease if the lock key is absent (or expired) or
// holds ARGV[1].
//
// ARGV: 1 holder, 2 ttl in ms, 3 ":ttl:metadata" (the term record after the
// token), 4 floor (the highest token the caller has seen, 0 if none), 5 "1"
// for TokensServerTime, "0" for TokensCounter.
//
// The common case, a free lock, is three commands: SET NX PX (which is the
// whole of redislock's acquire), INCR, and the term's SET PX; with
// TokensServerTime (the default) four: TIME, SET NX PX, a SET of the counter
// to the clock with GET (which returns the counter before it: one command
// where INCR and a SET were two), and the term's SET PX; a second SET of
// the counter only when the clock is not above it. The new token is max(counter+1,
// clock): it rises by at least one whatever the clock does, and after the
// counter is lost it starts again from the server's clock, above every
// token granted before the loss. TIME is non-deterministic; Redis 7 runs
// scripts with effects replication only, so a script may call it and then
// write (replicas and the AOF receive the SET of the value, not the TIME).
// Lua numbers are doubles, exact up to 2^53: microseconds since 1970 stay
// below that until the year 2255.
//
// The counter before the grant is the INCR's result minus one, so the floor
// is checked after the INCR: a counter below a token that was already seen
// has lost increments (a restart without fsync, a promoted replica). The
// script then raises the counter to the floor, takes back the SET, and
// grants nothing; the caller reports the regress and may try again. A
// counter that is not an integer (written by something else) fails the INCR,
// or, with TokensServerTime, is written back as it was and fails the script
// with INCR's error (as is one of 2^53 or more, which Lua's numbers would
// not hold exactly): the SET is taken back and the error returned, so
// nothing is granted. No other client sees the undone writes: the script is
// atomic.
//
// A lock key that exists (SET NX refused) is read: another holder's live
// term is returned as it is; this same holder's term, or a key with PTTL 0
// (under a millisecond left, expired to the scripts), is replaced.
//
// Replies: granted, the new token, an integer (the term is exactly what was
// asked: an array reply costs Redis more than the rest of a command);
// otherwise an array, by status:
//
//	2 regress, nothing granted: {2, counter-before}
//	0 held by another, or 3 held and the counter was below the floor:
//	  {status, holder, term record, pttl, counter-before}
var acquireScript = goredis.NewScript(nextTokenLua + `
local t = nil
if ARGV[6] == '1' then
  t = redis.call('TIME')
  if #redis.call('ZRANGEBYSCORE', KEYS[4], '(' .. (tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)), '+inf', 'LIMIT', 0, 1) > 0 then
    return {4}
  end
end
` + acquireLua)

// With ARGV[6] = "1" (AcquireUnqueued), acquireScript first refuses with
// {4}, changing nothing, while KEYS[4], the name's queue of place expiries
// (see queueKeys), holds a place that has not expired on the server's
// clock. That costs two commands, TIME and ZRANGEBYSCORE (one the queue
// already needs, so the README's ACL covers it), and the TIME is the one
// the default token source reads anyway. One script serves both, so the
// binary carries its text once.

// acquireLua is the body of acquireScript; t is the server's TIME if the
// script already read it, else nil.
const acquireLua = `
local floor = tonumber(ARGV[4])
local clock = 0
if ARGV[5] == '1' then
  t = t or redis.call('TIME')
  clock = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local tok, refused = nextToken(KEYS[2], clock, floor, ARGV[4], ARGV[5] == '1')
  if not tok then
    redis.call('DEL', KEYS[1])
    return refused
  end
  redis.call('SET', KEYS[3], string.format('%d', tok) .. ARGV[3], 'PX', ARGV[2])
  return tok
end
local cur = redis.call('GET', KEYS[1])
local ctr = tonumber(redis.call('GET', KEYS[2]) or '0')
local regressed = false
if ctr < floor then
  redis.call('SET', KEYS[2], ARGV[4])
  regressed = true
end
local pttl = redis.call('PTTL', KEYS[1])
if cur ~= ARGV[1] and pttl ~= 0 then
  local status = 0
  if regressed then status = 3 end
  return {status, cur, redis.call('GET', KEYS[3]) or '', pttl, ctr}
end
if regressed then
  return {2, ctr}
end
local tok, refused = nextToken(KEYS[2], clock, floor, ARGV[4], ARGV[5] == '1')
if not tok then
  return refused
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('SET', KEYS[3], string.format('%d', tok) .. ARGV[3], 'PX', ARGV[2])
return tok
`

// nextTokenLua defines nextToken, the one place where a grant's token is
// taken (acquireScript and transferScript start with it).
//
// nextToken(key, clock, floor, floorArg, serverTime) raises the counter at
// key for a grant and returns the grant's token: max(counter+1, clock), the
// counter then set to it. With serverTime the counter is set to the clock
// and its old value read in one command (SET ... GET); a second SET follows
// only when the clock is not above the counter (clock is 0 without
// serverTime, and the token is INCR's). A counter at or below floor has
// lost increments (a restart without fsync, a promoted replica): the
// counter is set to floorArg (floor as sent, digits and all) and nothing is
// granted. A counter that is not an integer, or not one Lua's numbers hold
// exactly (2^53 or more), is left as it was and nothing is granted. On a
// refusal it returns nil and the script's reply: {2, counter-before} for
// the regress, else the error (INCR's, or the same words).
const nextTokenLua = `
local function nextToken(key, clock, floor, floorArg, serverTime)
  local prev
  if serverTime then
    local old = redis.pcall('SET', key, string.format('%d', clock), 'GET')
    if type(old) == 'table' then
      return nil, old
    end
    prev = 0
    if old then
      prev = string.match(old, '^-?%d+$') and tonumber(old)
      if not prev or prev >= 9007199254740992 or prev <= -9007199254740992 then
        redis.call('SET', key, old)
        return nil, redis.error_reply('ERR value is not an integer or out of range')
      end
    end
  else
    local n = redis.pcall('INCR', key)
    if type(n) == 'table' then
      return nil, n
    end
    prev = n - 1
  end
  if prev + 1 <= floor then
    redis.call('SET', key, floorArg)
    return nil, {2, prev}
  end
  if serverTime and prev + 1 <= clock then
    return clock
  end
  if serverTime then
    redis.call('SET', key, string.format('%d', prev + 1))
  end
  return prev + 1
end
`

// Status codes of the scripts.
const (
	acqHeld         = 0
	acqRegress      = 2
	acqHeldRegress  = 3 // held by another, and the counter was below the floor
	acqQueued       = 4 // AcquireUnqueued: a place is queued; nothing changed
	renewNotHeld    = 0
	releaseNotHeld  = 0
	releaseReleased = 1
)

// renewScript extends exactly the term (holder ARGV[1], token ARGV[2], sent
// as "token:", the prefix of its term record) to ARGV[3] ms from now. The
// lock value alone is not enough: the same holder string may have been
// granted a newer term, and only that term may be renewed. The new expiry
// is ARGV[3] ms from the script's run, never earlier than the holder's own
// deadline (measured from before it sent the request), so it is not read
// back.
//
// Reply: the metadata (a string) if renewed, else 0.
var renewScript = goredis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
local rec = redis.call('GET', KEYS[2])
if not rec or string.sub(rec, 1, #ARGV[2]) ~= ARGV[2] then return 0 end
if redis.call('PTTL', KEYS[1]) == 0 then return 0 end
local m = string.sub(rec, string.find(rec, ':', #ARGV[2] + 1, true) + 1)
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('SET', KEYS[2], ARGV[2] .. ARGV[3] .. ':' .. m, 'PX', ARGV[3])
return m
`)

// releaseScript ends exactly the term (holder ARGV[1], token ARGV[2], sent
// as "token:") and publishes on the lease's channel. The counter is kept.
//
// Reply: 1 released, 0 not held.
var releaseScript = goredis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
local rec = redis.call('GET', KEYS[2])
if not rec or string.sub(rec, 1, #ARGV[2]) ~= ARGV[2] then return 0 end
if redis.call('PTTL', KEYS[1]) == 0 then return 0 end
redis.call('DEL', KEYS[1], KEYS[2])
redis.call('PUBLISH', KEYS[1] .. ':events', 'released')
return 1
`)

// getScript reads a consistent snapshot of a lease.
//
// Reply: {holder, counter, term record, pttl}; a missing value is the empty
// string.
var getScript = goredis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if not cur then return {'', redis.call('GET', KEYS[2]) or '', '', -2} end
return {cur, redis.call('GET', KEYS[2]) or '', redis.call('GET', KEYS[3]) or '', redis.call('PTTL', KEYS[1])}
`)

// forceReleaseScript ends whatever term is live, and publishes on the
// lease's channel.
//
// Reply: {-1} never granted, {0, counter} nothing live, or
// {1, holder, term record, pttl, counter} the term it ended.
var forceReleaseScript = goredis.NewScript(`
local cur = redis.call('GET', KEYS[1])
local ctr = redis.call('GET', KEYS[2])
local pttl = -2
if cur then pttl = redis.call('PTTL', KEYS[1]) end
if cur and pttl == 0 then cur = false end
if not cur then
  if not ctr then return {-1} end
  return {0, ctr}
end
local rec = redis.call('GET', KEYS[3])
redis.call('DEL', KEYS[1], KEYS[3])
redis.call('PUBLISH', KEYS[1] .. ':events', 'released')
return {1, cur, rec or '', pttl, ctr or '0'}
`)
