package redisstore

import (
	"context"
	"slices"
	"time"

	"github.com/delayq/delayq/internal/store"
)

// On a single Redis server (Store.oneServer: not a Cluster, so a script
// may touch keys of any slot) a promotion and a lease run as one script
// over all the topic's partitions instead of a pipelined peek at every
// partition's head and then a script per partition: one round trip
// instead of two, and the merge across partitions is exact, since no
// other server can move a head between the peek and the script.
//
// These scripts take every partition's five index keys, partition j's
// as KEYS[5j+1 … 5j+5], and on ARGV:
//
//	ARGV[1] now, ARGV[2] partition 0's message prefix (the prelude's)
//	ARGV[3] P, the partition count, ARGV[4 … 3+P] each partition's
//	        message prefix; the script's own arguments from ARGV[4+P]
//
// usePart points the prelude's IDX and MPFX (locals of the same chunk,
// so every prelude function sees the change) at partition j. ctrnum
// decodes the Seq counter at the start of an index member: the merge
// compares numbers, since Lua compares strings by the server's locale
// (strcoll), which need not be byte order.
const allPartsPrelude = `
local P = tonumber(ARGV[3])
local A = 4 + P
local function usePart(j)
  IDX = {KEYS[5*j+1], KEYS[5*j+2], KEYS[5*j+3], KEYS[5*j+4], KEYS[5*j+5]}
  MPFX = ARGV[4+j]
end
local function ctrnum(m)
  local n = 0
  for i = 2, string.byte(m) - 47 do
    local c = string.byte(m, i)
    local d
    if c <= 57 then d = c - 48 elseif c <= 90 then d = c - 55 else d = c - 61 end
    n = n * 62 + d
  end
  return n
end
`

// promoteAllScript is promoteScript over all partitions: it takes the
// first n scheduled messages of the topic due by now − grace in (DueAt,
// Seq) order.
//
//	ARGV[A] n, ARGV[A+1] the notification channel, ARGV[A+2] the topic
//	ARGV[A+3] grace (ms)
//
// Returns {now, promoted, head, after} over all partitions, and publishes
// "topic\t0" when it promoted any, as promoteScript.
var promoteAllScript = libScript("promoteAll", flagsState, allPartsPrelude+promoteFn+`
local n = tonumber(ARGV[A])
local cut = istr(NOW - tonumber(ARGV[A+3]))
local cands = {}
for j = 0, P - 1 do
  local ms = redis.call('ZRANGE', KEYS[5*j+1], '-inf', cut, 'BYSCORE', 'LIMIT', 0, n, 'WITHSCORES')
  for i = 1, #ms, 2 do
    cands[#cands+1] = {j = j, m = ms[i], due = ms[i+1], s = tonumber(ms[i+1]), c = ctrnum(ms[i])}
  end
end
table.sort(cands, function(a, b)
  if a.s ~= b.s then return a.s < b.s end
  return a.c < b.c
end)
local done = math.min(n, #cands)
for x = 1, done do
  local c = cands[x]
  usePart(c.j)
  local pri = promoteRec(mkey(idof(c.m)))
  redis.call('ZREM', IDX[1], c.m)
  if pri then -- (a member always has its message; never recreate one half)
    index({st = 2, pri = pri}, c.m, c.due)
  end
end
if done > 0 then redis.call('PUBLISH', ARGV[A+1], ARGV[A+2] .. '\t0') end
local head, headS, after, afterS
for j = 0, P - 1 do
  local h = redis.call('ZRANGE', KEYS[5*j+1], 0, 0, 'WITHSCORES')
  if h[2] then
    local hs = tonumber(h[2])
    if not headS or hs < headS then head, headS = h[2], hs end
    if hs <= NOW then
      h = redis.call('ZRANGE', KEYS[5*j+1], '(' .. NOW_S, '+inf', 'BYSCORE', 'LIMIT', 0, 1, 'WITHSCORES')
      hs = tonumber(h[2])
    end
    if h[2] and (not afterS or hs < afterS) then after, afterS = h[2], hs end
  end
end
return {NOW, done, head or '0', after or '0'}
`)

// leaseAllScript is leaseScript over all partitions: it leases the
// topic's first n ready messages due by now in (priority, DueAt, Seq)
// order.
//
//	ARGV[A] n, ARGV[A+1] "+lease length" (ms after now), ARGV[A+2] token
//	ARGV[A+3] run by (Redis TIME in ms, "" none; runby.go)
//
// Returns {now, Redis TIME (ms) as it started, id1, rec1, id2, rec2, …}
// in that order.
var leaseAllScript = libScript("leaseAll", flagsState, allPartsPrelude+redisClockFn+`
local RUNBY = ARGV[A+3]
`+runByCheck+`
local n = tonumber(ARGV[A])
local lu, token = at(ARGV[A+1]), ARGV[A+2]
local lus = istr(lu)
local cands = {}
for j = 0, P - 1 do
  usePart(j)
  for _, pri in ipairs(readyPrios()) do
    -- Only those due by NOW, as leaseScript.
    local ms = redis.call('ZRANGE', rkey(pri), '-inf', NOW_S, 'BYSCORE', 'LIMIT', 0, n, 'WITHSCORES')
    for i = 1, #ms, 2 do
      cands[#cands+1] = {j = j, pri = pri, m = ms[i], s = tonumber(ms[i+1]), c = ctrnum(ms[i])}
    end
  end
end
table.sort(cands, function(a, b)
  if a.pri ~= b.pri then return a.pri < b.pri end
  if a.s ~= b.s then return a.s < b.s end
  return a.c < b.c
end)
local out = {NOW, CLOCK}
for x = 1, math.min(n, #cands) do
  local c = cands[x]
  usePart(c.j)
  if not takeLease(c.m, lu, lus, token, out) then redis.call('ZREM', rkey(c.pri), c.m) end
end
return out
`)

// allPartsCall builds a call of an all-partitions script on topic's
// partitions with now and the script's own args.
func (s *Store) allPartsCall(sc *script, topic, now string, args ...any) call {
	ks := s.keys.allParts(topic)
	keys := make([]string, 0, 5*len(ks))
	a := make([]any, 0, 3+len(ks)+len(args))
	a = append(a, now, ks[0].msgPrefix, len(ks))
	for _, k := range ks {
		keys = append(keys, k.all()...)
		a = append(a, k.msgPrefix)
	}
	return call{sc: sc, keys: keys, args: append(a, args...)}
}

// promoteOneServer is MessagePromote (MessagePromoteGrace) on a single
// server: one script.
func (s *Store) promoteOneServer(ctx context.Context, p *store.MessagePromoteParams, grace int64) (*store.PromoteResult, error) {
	c := s.allPartsCall(promoteAllScript, p.Topic, s.nowArg(p.Now), p.Max, s.keys.channel(), p.Topic, grace)
	cmds, err := s.run(ctx, "promote", []call{c}, nil)
	if err != nil {
		return nil, err
	}
	a := asSlice(cmds[0].Val())
	if len(a) != 4 {
		return nil, errReply("promote", cmds[0].Val())
	}
	d := partDue{now: asInt(a[0]), head: parseInt(asString(a[2])), after: parseInt(asString(a[3]))}
	res := &store.PromoteResult{Now: d.now, Promoted: int(asInt(a[1]))}
	res.NextDue, res.HeldDue = d.split(grace)
	if s.callerNow {
		res.Now = 0 // "judged by Params.Now"
	}
	return res, nil
}

// peekAnyScript is a single server's lease peek (runby.go): one script
// over all partitions, where a Cluster peeks each partition with a script
// of its own (peekReadyScript, peekDueScript). The lease only needs to
// know whether there is anything to take and Redis's TIME; on a topic of
// P partitions the per-partition peeks were P scripts per lease, more
// Redis time than any other script of a release.
//
//	ARGV[A] "1": due scheduled messages count too (MessageLeaseDue)
//
// Returns {now, Redis TIME (ms)}, followed by one entry the lease could
// take (member, score, priority; not necessarily the first in lease
// order) when there is one, in peekReadyScript's layout. With due and
// nothing to take, the entry is {"", head, 0}: no member, and the first
// scheduled score (schedHead), which the engine's timer waits for.
var peekAnyScript = libScript("peekAny", flagsRead, allPartsPrelude+redisClockFn+schedHeadFn+`
local due = ARGV[A] == '1'
for j = 0, P - 1 do
  usePart(j)
  for _, pri in ipairs(readyPrios()) do
    local r = redis.call('ZRANGE', rkey(pri), '-inf', NOW_S, 'BYSCORE', 'LIMIT', 0, 1, 'WITHSCORES')
    if #r > 0 then return {NOW, redisClock(), r[1], r[2], pri} end
  end
  if due then
    local r = redis.call('ZRANGE', IDX[1], '-inf', NOW_S, 'BYSCORE', 'LIMIT', 0, 1, 'WITHSCORES')
    if #r > 0 then return {NOW, redisClock(), r[1], r[2], 0} end
  end
end
if due then return {NOW, redisClock(), '', schedHead(), 0} end
return {NOW, redisClock()}
`)

// leaseOneServer is MessageLease on a single server: one script whose
// answer is in lease order, over all partitions, sent at once when a
// recent Redis TIME gives it a run-by time (runBySeen), else after a peek
// at the partitions' ready (and, for MessageLeaseDue, due scheduled)
// heads (read-only, one script: peekAnyScript) that found something.
//
// The peek, or the TIME kept, is a guard, not an optimisation: a lease
// script sent while Redis is frozen (SIGSTOP, a stalled host) waits in
// the socket and runs when Redis resumes, long after this call gave up:
// it leases messages to nobody, and they come back only when that lease
// expires (S11's freeze saw messages a lease length late). The script
// carries the instant by which it must run, on Redis's clock (runby.go).
// Promotions and sends stay one script: run late, they do what a retry
// would.
//
// With due (MessageLeaseDue) the peek also looks at the scheduled
// messages due by now, and the script is leaseDueScript.
func (s *Store) leaseOneServer(ctx context.Context, p *store.MessageLeaseParams, due bool) (*store.LeaseDueResult, error) {
	if p.Max <= 0 {
		return &store.LeaseDueResult{}, nil
	}
	now := s.nowArg(p.Now)
	if by, ok := s.runBySeen(ctx); ok {
		res, err := s.leaseScriptOneServer(ctx, p, due, now, by)
		if !isLate(err) {
			return res, err
		}
		// Refused by its run-by time: Redis stalled (the peek then fails
		// too, as the deadline has passed) or its clock stepped forward
		// since the TIME kept, which the peek's TIME replaces.
		s.clock.Store(nil)
	}
	dueArg := "0"
	if due {
		dueArg = "1"
	}
	pk := s.peekRun(ctx, "lease", []call{s.allPartsCall(peekAnyScript, p.Topic, now, dueArg)}, 3)
	if err := pk.err(); err != nil {
		return nil, err
	}
	s.sawClock(pk.clocks[0], pk.sent, time.Now())
	if c := pk.per[0]; len(c) == 0 || c[0].member == "" {
		res := &store.LeaseDueResult{Now: pk.nows[0]}
		if len(c) > 0 {
			res.NextDue = c[0].score
		}
		return s.judgedBy(res), nil
	}
	return s.leaseScriptOneServer(ctx, p, due, now, runBy(ctx, slices.Max(pk.clocks), pk.sent))
}

// leaseScriptOneServer sends leaseOneServer's script with run-by time by
// and keeps the Redis TIME it answers (sawClock).
func (s *Store) leaseScriptOneServer(ctx context.Context, p *store.MessageLeaseParams, due bool, now, by string) (*store.LeaseDueResult, error) {
	sc, first := leaseAllScript, 2
	if due {
		sc, first = leaseDueScript, 3
	}
	if testHookLease != nil {
		testHookLease(0)
	}
	sent := time.Now()
	cmds, err := s.run(ctx, "lease", []call{s.allPartsCall(sc, p.Topic, now, p.Max, after(p.LeaseFor), p.Token, by)}, nil)
	if err != nil {
		return nil, err
	}
	a := asSlice(cmds[0].Val())
	if len(a) < first {
		return nil, errReply("lease", cmds[0].Val())
	}
	s.sawClock(asInt(a[first-1]), sent, time.Now())
	recs, err := decodePairs(p.Topic, a[first:])
	if err != nil {
		return nil, err
	}
	res := &store.LeaseDueResult{Records: recs, Now: asInt(a[0])}
	if due {
		res.NextDue = parseInt(asString(a[1]))
	}
	return s.judgedBy(res), nil
}

// judgedBy clears res.Now when the scripts judged by the caller's now
// (TimeCaller): LeaseDueResult.Now 0 means Params.Now.
func (s *Store) judgedBy(res *store.LeaseDueResult) *store.LeaseDueResult {
	if s.callerNow {
		res.Now = 0
	}
	return res
}
