package redisstore

import (
	"context"

	"github.com/delayq/delayq/internal/store"
)

// The release of a due message to a waiting consumer used to be two
// scripts in a row: the promotion (scheduled → ready) run by the server's
// timer, then the lease of the consumer it woke — two writes to the AOF,
// each fsync'd with appendfsync always, and a round trip the lease waited
// for. As a store.DueLeaser the engine now wakes the waiting consumers
// first; their MessageLeaseDue takes due scheduled messages straight to
// inflight in the lease's one script, and MessagePromoteGrace (promote.go)
// promotes only what they left unleased for longer than the engine's
// grace.

// leaseDueScript is leaseAllScript over the ready messages due by now and
// the scheduled messages due by now, as if promoted first: up to n in
// (priority, DueAt, Seq) order among the first n ready (per priority and
// partition) and the topic's first n due scheduled in (DueAt, Seq) order,
// the order a promotion takes them. A scheduled one it takes goes from
// the scheduled index to the lease index; its record is rewritten as a
// promotion followed by a lease would leave it (the lease sets every
// field the promotion does: state and UpdatedAt). The others stay
// scheduled. On a single server it runs over all partitions
// (allPartsCall), on a Cluster over one (onePartCall), with the arguments
// of leaseAllScript:
//
//	ARGV[A] n, ARGV[A+1] "+lease length" (ms after now), ARGV[A+2] token
//	ARGV[A+3] run by (Redis TIME in ms, "" none; runby.go)
//
// Returns {now, head, Redis TIME (ms) as it started, id1, rec1, id2,
// rec2, …} in lease order, head the first score left in the partitions'
// scheduled indexes ("0": none).
var leaseDueScript = libScript("leaseDue", flagsState, allPartsPrelude+redisClockFn+schedHeadFn+`
local RUNBY = ARGV[A+3]
`+runByCheck+`
local n = tonumber(ARGV[A])
local lu, token = at(ARGV[A+1]), ARGV[A+2]
local lus = istr(lu)
local cands, sched = {}, {}
for j = 0, P - 1 do
  usePart(j)
  for _, pri in ipairs(readyPrios()) do
    local rk = rkey(pri)
    local ms = redis.call('ZRANGE', rk, '-inf', NOW_S, 'BYSCORE', 'LIMIT', 0, n, 'WITHSCORES')
    for i = 1, #ms, 2 do
      cands[#cands+1] = {j = j, pri = pri, k = rk, m = ms[i], s = tonumber(ms[i+1]), c = ctrnum(ms[i])}
    end
  end
  local ms = redis.call('ZRANGE', IDX[1], '-inf', NOW_S, 'BYSCORE', 'LIMIT', 0, n, 'WITHSCORES')
  for i = 1, #ms, 2 do
    sched[#sched+1] = {j = j, k = IDX[1], m = ms[i], s = tonumber(ms[i+1]), c = ctrnum(ms[i])}
  end
end
local function byDue(a, b)
  if a.s ~= b.s then return a.s < b.s end
  return a.c < b.c
end
-- The topic's first n due scheduled, with the priority from each record's
-- header (47 bytes: the priority byte is the 47th when present); a lone
-- candidate's is not read, it orders nothing.
table.sort(sched, byDue)
local lone = #sched + #cands == 1
for x = 1, math.min(n, #sched) do
  local c = sched[x]
  c.pri = 0
  if not lone then
    usePart(c.j)
    local h = redis.call('GETRANGE', mkey(idof(c.m)), 0, 46)
    if #h >= 47 and string.byte(h, 1) >= PRI then c.pri = string.byte(h, 47) end
  end
  cands[#cands+1] = c
end
table.sort(cands, function(a, b)
  if a.pri ~= b.pri then return a.pri < b.pri end
  return byDue(a, b)
end)
local out = {NOW, '0', CLOCK}
for x = 1, math.min(n, #cands) do
  local c = cands[x]
  usePart(c.j)
  -- scheduled or ready: takeLease takes it out of the index of its state
  if not takeLease(c.m, lu, lus, token, out) then redis.call('ZREM', c.k, c.m) end
end
out[2] = schedHead()
return out
`)

// schedHeadFn: schedHead() is the first score of the partitions'
// scheduled indexes ("0": none), for the engine's next timer (a score
// is an integer in ms, so compared as numbers).
const schedHeadFn = `
local function schedHead()
  local head, headS = '0', nil
  for j = 0, P - 1 do
    local h = redis.call('ZRANGE', KEYS[5*j+1], 0, 0, 'WITHSCORES')
    if h[2] then
      local hs = tonumber(h[2])
      if not headS or hs < headS then head, headS = h[2], hs end
    end
  end
  return head
end
`

// peekDueScript is peekReadyScript with the bound "now", followed by the
// partition's first max scheduled entries due by now with their
// priorities (read from each record's header), for MessageLeaseDue's
// peek.
//
//	KEYS[1-5] the partition's indexes; ARGV[1] now, ARGV[2] message prefix
//	ARGV[3] max entries of each kind
//
// Returns {now, Redis TIME (ms), member1, score1, priority1, …}, as
// peekReadyScript.
var peekDueScript = libScript("peekDue", flagsRead, redisClockFn+`
local max = tonumber(ARGV[3])
local out = {NOW, redisClock()}
local left = max
for _, pri in ipairs(readyPrios()) do
  if left <= 0 then break end
  local r = redis.call('ZRANGE', rkey(pri), '-inf', NOW_S, 'BYSCORE', 'LIMIT', 0, left, 'WITHSCORES')
  for i = 1, #r, 2 do
    out[#out+1] = r[i]
    out[#out+1] = r[i+1]
    out[#out+1] = pri
    left = left - 1
  end
end
local r = redis.call('ZRANGE', IDX[1], '-inf', NOW_S, 'BYSCORE', 'LIMIT', 0, max, 'WITHSCORES')
for i = 1, #r, 2 do
  local h = redis.call('GETRANGE', mkey(idof(r[i])), 0, 46)
  local pri = 0
  if #h >= 47 and string.byte(h, 1) >= PRI then pri = string.byte(h, 47) end
  out[#out+1] = r[i]
  out[#out+1] = r[i+1]
  out[#out+1] = pri
end
return out
`)

// peekDue peeks at each target partition's ready and due scheduled heads
// (peekDueScript), up to limit of each kind.
func (s *Store) peekDue(ctx context.Context, targets []peekTarget, now string, limit int) *peekResult {
	calls := make([]call, len(targets))
	for i, t := range targets {
		calls[i] = s.partCall(peekDueScript, t.k, now, limit)
	}
	return s.peekRun(ctx, "lease", calls, 3)
}

// onePartCall builds a call of an all-partitions script (allPartsCall) on
// partition k alone: a Cluster's per-slot form of it.
func (s *Store) onePartCall(sc *script, k *partKeys, now string, args ...any) call {
	return call{sc: sc, keys: k.all(), args: append([]any{now, k.msgPrefix, 1, k.msgPrefix}, args...)}
}

// MessageLeaseDue implements store.DueLeaser: MessageLease (lease.go) with
// the scheduled messages due by now taken as if promoted first. On a
// single server it is MessageLease's read-only peek (now at the ready and
// the due scheduled heads) and then one script over all partitions; on a
// Cluster the peek, the merge and a script per partition, as
// MessageLease.
func (s *Store) MessageLeaseDue(ctx context.Context, p *store.MessageLeaseParams) ([]*store.Record, error) {
	res, err := s.lease(ctx, p, true)
	if err != nil {
		return nil, err
	}
	return res.Records, nil
}

// MessageLeaseDueNext implements store.NextDueLeaser. On a single server
// NextDue is the first scheduled score after the lease script (or, when
// the peek found nothing to take, after the peek); on a Cluster it is
// not reported (ReportsNextDue), since a partition's scheduled head is
// read only where the merge picked something.
func (s *Store) MessageLeaseDueNext(ctx context.Context, p *store.MessageLeaseParams) (*store.LeaseDueResult, error) {
	return s.lease(ctx, p, true)
}

// ReportsNextDue implements store.NextDueLeaser: on a single server only.
func (s *Store) ReportsNextDue() bool { return s.oneServer }
