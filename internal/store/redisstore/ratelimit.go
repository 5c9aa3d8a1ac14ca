package redisstore

import (
	"context"
	"strconv"
	"time"

	"github.com/delayq/delayq/internal/store"
)

var _ store.RateLimiter = (*Store)(nil)

// rateKey is a topic's token bucket, in the slot of its meta hash:
// dq:{topic}:rate HASH tok (tokens, a float), ts (ms of the last refill).
// It expires once it would be full again, and a missing bucket is full.
func (ks keyspace) rateKey(topic string) string { return ks.prefix + ":{" + topic + "}:rate" }

// rateTakeScript is a token bucket on Redis TIME (one clock for every
// server, so the limit holds across all of them).
//
//	KEYS[1] bucket; ARGV[1] now, ARGV[2] unused, ARGV[3] n (negative:
//	give back), ARGV[4] tokens per second, ARGV[5] burst
//
// Returns {now, granted, retry after in µs (0 unless granted < n)}. A
// clock that went back refills nothing until it passes the stored ts.
var rateTakeScript = libScript("rateTake", flagsState, `
local n, rate, burst = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local b = redis.call('HMGET', KEYS[1], 'tok', 'ts')
local tok, ts = tonumber(b[1]), tonumber(b[2])
if tok == nil or ts == nil then tok, ts = burst, NOW end
if NOW > ts then
  tok = math.min(burst, tok + (NOW - ts) * rate / 1000)
  ts = NOW
end
local granted = 0
if n < 0 then
  tok = math.min(burst, tok - n)
else
  granted = math.min(n, math.floor(tok))
  tok = tok - granted
end
local retry = 0
if n > 0 and granted < n then retry = math.ceil((1 - tok) * 1000000 / rate) end
redis.call('HSET', KEYS[1], 'tok', string.format('%.17g', tok), 'ts', istr(ts))
redis.call('PEXPIRE', KEYS[1], math.ceil(burst * 1000 / rate) + 1000)
return {NOW, granted, retry}
`)

// RateTake implements store.RateLimiter.
func (s *Store) RateTake(ctx context.Context, p *store.RateTakeParams) (int, time.Duration, error) {
	if err := checkTopic(p.Topic); err != nil {
		return 0, 0, err
	}
	c := call{sc: rateTakeScript, keys: []string{s.keys.rateKey(p.Topic)}, args: []any{
		s.nowArg(p.Now), "", p.N, strconv.FormatFloat(p.PerSecond, 'g', -1, 64), p.Burst,
	}}
	cmds, err := s.run(ctx, "rate take", []call{c}, nil)
	if err != nil {
		return 0, 0, err
	}
	a := asSlice(cmds[0].Val())
	if len(a) != 3 {
		return 0, 0, errReply("rate take", cmds[0].Val())
	}
	return int(asInt(a[1])), time.Duration(asInt(a[2])) * time.Microsecond, nil
}
