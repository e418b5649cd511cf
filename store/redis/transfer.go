package redis

import (
	"context"
	"fmt"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/storekit"
)

var _ store.Transferer = (*Store)(nil)

// transferScript ends exactly the term (holder ARGV[1], token ARGV[2], sent
// as "token:", as releaseScript checks it) and, in the same script, grants
// the lease to ARGV[3] for ARGV[4] ms with the term record
// "token" .. ARGV[5], the token taken by nextToken as acquireScript takes it
// (raised to the server's clock with ARGV[6] == "1"). A counter at or below
// ARGV[7] (the floor: the highest token seen, at least the term's own) has
// lost increments: the counter is raised to it and nothing is changed, as
// acquireScript does. It publishes on the lease's channel, so waiters wake
// and find the successor's reservation.
//
// Reply: {1, token} transferred, {0} not held, {2, counter-before} regress.
var transferScript = goredis.NewScript(nextTokenLua + `
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return {0} end
local rec = redis.call('GET', KEYS[3])
if not rec or string.sub(rec, 1, #ARGV[2]) ~= ARGV[2] then return {0} end
if redis.call('PTTL', KEYS[1]) == 0 then return {0} end
local clock = 0
if ARGV[6] == '1' then
  local t = redis.call('TIME')
  clock = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local tok, refused = nextToken(KEYS[2], clock, tonumber(ARGV[7]), ARGV[7], ARGV[6] == '1')
if not tok then
  return refused
end
redis.call('SET', KEYS[1], ARGV[3], 'PX', ARGV[4])
redis.call('SET', KEYS[3], string.format('%d', tok) .. ARGV[5], 'PX', ARGV[4])
redis.call('PUBLISH', KEYS[1] .. ':events', 'released')
return {1, tok}
`)

// Transfer implements store.Transferer in one script (see transferScript):
// Redis runs it atomically, on its own clock. A *TokenRegressError reports a
// counter below a token already seen; nothing was changed then, and the old
// term is still live.
func (s *Store) Transfer(ctx context.Context, t store.Term, to string, ttl time.Duration, metadata string) (store.Record, error) {
	if err := s.life.Check(ctx); err != nil {
		return store.Record{}, err
	}
	if err := kit.CheckTransfer(t, to, ttl, metadata); err != nil {
		return store.Record{}, err
	}
	op := "transfer " + t.String()
	floor, err := s.floor(ctx, t.Name)
	if err != nil {
		return store.Record{}, err
	}
	floor = max(floor, t.Token)
	ms := storekit.CeilMillis(ttl)
	msArg := strconv.FormatInt(ms, 10)
	clock := "1"
	if s.opts.Tokens == TokensCounter {
		clock = "0"
	}
	v, err := transferScript.Run(ctx, s.c, s.keys(t.Name), t.Holder, tokenArg(t.Token), to, msArg, ":"+msArg+":"+metadata, clock, floor).Slice()
	if err != nil {
		return store.Record{}, s.wrap(op, err)
	}
	r := reply{v: v}
	switch status := r.int(0); {
	case r.err != nil:
		return store.Record{}, s.wrap(op, r.err)
	case status == 0:
		return store.Record{}, kit.Wrap(op, store.ErrNotHeld)
	case status == acqRegress:
		counter := r.int(1)
		if r.err != nil {
			return store.Record{}, s.wrap(op, r.err)
		}
		return store.Record{}, &TokenRegressError{Name: t.Name, Seen: floor, Found: counter}
	case status == 1:
		tok := r.int(1)
		if r.err != nil {
			return store.Record{}, s.wrap(op, r.err)
		}
		s.observe(t.Name, tok)
		return store.Record{
			Term:      store.Term{Name: t.Name, Holder: to, Token: tok},
			Remaining: time.Duration(ms) * time.Millisecond,
			TTL:       time.Duration(ms) * time.Millisecond,
			Metadata:  metadata,
		}, nil
	default:
		return store.Record{}, s.wrap(op, fmt.Errorf("script reply status %d", status))
	}
}
