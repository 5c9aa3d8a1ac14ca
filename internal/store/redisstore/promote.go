package redisstore

import (
	"context"

	"github.com/delayq/delayq/internal/store"
)

// promoteScript moves the partition's first n due scheduled messages to
// ready (R4: in the store, atomically, whoever runs it).
//
//	KEYS[1-5] indexes; ARGV[1] now, ARGV[2] message prefix, ARGV[3] n
//
// Returns {now, promoted, next due score or "0"}. Due means score <= now,
// so nothing is promoted early by the script's clock.
var promoteScript = newScript(flagsState, `
local ms = redis.call('ZRANGE', IDX[1], '-inf', NOW_S, 'BYSCORE', 'LIMIT', 0, tonumber(ARGV[3]), 'WITHSCORES')
for i = 1, #ms, 2 do
  local m, due = ms[i], ms[i+1]
  local k = mkey(idof(m))
  local r = load(k)
  redis.call('ZREM', IDX[1], m)
  if r then -- (a member always has its message; never recreate one half)
    redis.call('ZADD', IDX[2], due, m)
    r.st, r.uat = 2, NOW
    save(k, r)
  end
end
local h = redis.call('ZRANGE', IDX[1], 0, 0, 'WITHSCORES')
return {NOW, #ms / 2, h[2] or '0'}
`)

// MessagePromote implements store.Store: it peeks at the due heads of
// the topic's partitions, merges them in (DueAt, Seq) order and promotes
// each partition's share of the first Max (see merge.go). Atomic per
// partition. PromoteResult.Now is the time the scripts judged by: Redis
// TIME (that of the partition holding NextDue), or 0 (Params.Now) with
// TimeCaller.
func (s *Store) MessagePromote(ctx context.Context, p *store.MessagePromoteParams) (_ *store.PromoteResult, err error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	ctx, end := s.bound(ctx, 1) // peek, promote, notify
	defer end(&err)
	if err := checkTopic(p.Topic); err != nil {
		return nil, err
	}
	res := &store.PromoteResult{}
	if p.Max <= 0 {
		return res, nil
	}
	ks := s.keys.allParts(p.Topic)
	targets := make([]peekTarget, len(ks))
	for i, k := range ks {
		targets[i] = peekTarget{k: k, index: int(store.StateScheduled)}
	}
	now := s.nowArg(p.Now)
	pk, err := s.peek(ctx, "promote", targets, now, "now", p.Max)
	if err != nil {
		return nil, err
	}
	counts, _ := top(pk.per, p.Max)
	nows, next := pk.nows, pk.heads // a partition that promotes reports its new head
	var calls []call
	var parts []int
	for i, n := range counts {
		if n > 0 {
			calls = append(calls, s.partCall(promoteScript, ks[i], now, n))
			parts = append(parts, i)
		}
	}
	if len(calls) > 0 {
		cmds, err := s.run(ctx, "promote", calls, nil)
		if err != nil {
			return nil, err
		}
		for c, cmd := range cmds {
			a := asSlice(cmd.Val())
			if len(a) != 3 {
				return nil, errReply("promote", cmd.Val())
			}
			i := parts[c]
			nows[i] = asInt(a[0])
			res.Promoted += int(asInt(a[1]))
			next[i] = parseInt(asString(a[2]))
		}
	}
	res.Now = nows[0]
	for i, d := range next {
		if d != 0 && (res.NextDue == 0 || d < res.NextDue) {
			res.NextDue, res.Now = d, nows[i]
		}
	}
	if s.callerNow {
		res.Now = 0 // "judged by Params.Now"
	}
	if res.Promoted > 0 {
		// Other servers armed the same due time; whichever promotes first
		// must wake their long-polls too, or they sleep until the sweep.
		s.publish(ctx, p.Topic, 0) // ready now
	}
	return res, nil
}
