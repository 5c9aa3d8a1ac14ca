package redisstore

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/delayq/delayq/internal/store"
)

// leaseRounds bounds how often MessageLease re-peeks when other servers
// took the heads it had chosen, so a consumer is not told "nothing ready"
// while another partition still has ready messages.
const leaseRounds = 3

// leaseScript leases the partition's first n ready messages due by now,
// in (priority, DueAt, Seq) order: one range read per priority that has
// ready messages, so a not-yet-due message of a priority holds back
// neither later ones nor other priorities.
//
//	KEYS[1-5] indexes; ARGV[1] now, ARGV[2] message prefix
//	ARGV[3] n, ARGV[4] "+lease length" (ms after now), ARGV[5] token
//	ARGV[6] run by (Redis TIME in ms, "" none; runby.go)
//
// Returns {now, id1, rec1, id2, rec2, …}: each inflight with Deliveries+1,
// LeaseUntil = now + the lease length, and Receipt token-deliveries (unique per delivery since
// the token is unique per call and Deliveries only grows).
var leaseScript = libScript("lease", flagsState, redisClockFn+`
local RUNBY = ARGV[6]
`+runByCheck+`
local lu, token = at(ARGV[4]), ARGV[5]
local lus = istr(lu)
local n = tonumber(ARGV[3])
local out = {NOW}
for _, pri in ipairs(readyPrios()) do
  if n <= 0 then break end
  -- Only those due by NOW (scores are due times): never early by this
  -- script's own time, even if a promotion judged by another clock raced it.
  local rk = rkey(pri)
  local ms = redis.call('ZRANGE', rk, '-inf', NOW_S, 'BYSCORE', 'LIMIT', 0, n)
  for _, m in ipairs(ms) do
    if takeLease(m, lu, lus, token, out) then
      n = n - 1
    else
      redis.call('ZREM', rk, m)
    end
  end
end
return out
`)

// MessageLease implements store.Store: it merges the ready heads of the
// topic's partitions and leases each partition's share of the first Max
// (see merge.go), so the answer is in (Priority, DueAt, Seq) order. Each partition's
// lease is atomic: two servers never lease one message at once.
//
// Partitions are independent: one that fails (its Cluster master is down)
// is left out for the rest of the call and the others still serve, and
// every record leased in any round is returned, whatever later rounds
// meet — a leased record the caller never sees would stay inflight until
// its lease expires, and count that expiry as a failure. The call fails
// only when it leased nothing and some partition failed: "nothing ready"
// would be a claim about partitions it could not read.
func (s *Store) MessageLease(ctx context.Context, p *store.MessageLeaseParams) (_ []*store.Record, err error) {
	res, err := s.lease(ctx, p, false)
	if err != nil {
		return nil, err
	}
	return res.Records, nil
}

// lease is MessageLease, or with due MessageLeaseDue (leasedue.go). Only
// a single server's due lease reports NextDue (ReportsNextDue).
func (s *Store) lease(ctx context.Context, p *store.MessageLeaseParams, due bool) (_ *store.LeaseDueResult, err error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	parts := newPartFailures(s, ctx, "lease")
	ctx, end := s.bound(ctx, 1) // up to leaseRounds × (peek, lease)
	defer end(&err)
	if err := checkTopic(p.Topic); err != nil {
		return nil, err
	}
	if err := checkTime("LeaseFor", p.LeaseFor); err != nil {
		return nil, err
	}
	if s.oneServer {
		return s.leaseOneServer(ctx, p, due)
	}
	ks := s.keys.allParts(p.Topic)
	parts.keys, parts.down = ks, make([]bool, len(ks))
	now := s.nowArg(p.Now)
	until := after(p.LeaseFor)
	var out []*store.Record
	for round := 0; round < leaseRounds && len(out) < p.Max; round++ {
		want := p.Max - len(out)
		var targets []peekTarget
		var src []int // partition of each target
		for i, k := range ks {
			if !parts.down[i] {
				targets = append(targets, peekTarget{k: k, index: int(store.StateReady)})
				src = append(src, i)
			}
		}
		if len(targets) == 0 {
			break
		}
		var pk *peekResult
		if due {
			pk = s.peekDue(ctx, targets, now, want)
		} else {
			pk = s.peek(ctx, "lease", targets, now, "now", want)
		}
		for j, err := range pk.errs {
			parts.fail(src[j], err)
		}
		counts, picked := top(pk.per, want)
		if len(picked) == 0 {
			break
		}
		var calls []call
		var callPart []int
		for j, n := range counts {
			if n > 0 {
				k, by := ks[src[j]], runBy(ctx, pk.clocks[j], pk.sent)
				if due {
					calls = append(calls, s.onePartCall(leaseDueScript, k, now, n, until, p.Token, by))
				} else {
					calls = append(calls, s.partCall(leaseScript, k, now, n, until, p.Token, by))
				}
				callPart = append(callPart, src[j])
			}
		}
		if testHookLease != nil {
			testHookLease(round)
		}
		cmds, errs := s.runEach(ctx, "lease", calls)
		got := 0
		for c, cmd := range cmds {
			if errs[c] != nil {
				parts.fail(callPart[c], errs[c])
				continue
			}
			a := asSlice(cmd.Val())
			first := 1
			if due {
				first = 3 // after leaseDueScript's head and TIME, not used on a Cluster
			}
			if len(a) < first {
				parts.fail(callPart[c], errReply("lease", cmd.Val()))
				continue
			}
			recs, err := decodePairs(p.Topic, a[first:])
			if err != nil {
				parts.fail(callPart[c], err)
				continue
			}
			out = append(out, recs...)
			got += len(recs)
		}
		if got == len(picked) {
			break
		}
	}
	if len(out) == 0 && parts.first != nil {
		return nil, parts.first
	}
	slices.SortFunc(out, func(a, b *store.Record) int {
		return cmp.Or(cmp.Compare(a.Priority, b.Priority), cmp.Compare(a.DueAt, b.DueAt), cmp.Compare(a.Seq, b.Seq))
	})
	return &store.LeaseDueResult{Records: out}, nil
}

// testHookLease, when a test sets it, runs in each MessageLease (and
// MessageLeaseDue) round between the peek and the lease scripts, on a
// single server too: there a test takes a head as another server would,
// or stops the master (or freezes the server) a script is about to reach.
var testHookLease func(round int)

// partFailures tracks, for one call on several partitions (or targets),
// which of them failed: those are left out for the rest of the call.
type partFailures struct {
	s     *Store
	ctx   context.Context
	op    string
	keys  []*partKeys
	down  []bool
	first error // the first failure, for a call that achieved nothing
}

// newPartFailures starts the tracking for a call; ctx is the caller's
// (not the call's bound): failures after the caller gave up are not
// logged. Set keys and down once the partitions are known.
func newPartFailures(s *Store, ctx context.Context, op string) *partFailures {
	return &partFailures{s: s, ctx: ctx, op: op}
}

// fail records err (if not nil) for partition i.
func (f *partFailures) fail(i int, err error) {
	if err == nil {
		return
	}
	if f.first == nil {
		f.first = err
	}
	if !f.down[i] {
		f.down[i] = true
		f.s.skipped(f.ctx, f.op, f.keys[i], err)
	}
}

// any reports whether some partition failed.
func (f *partFailures) any() bool { return f.first != nil }

// ackScript acknowledges inflight messages whose receipt matches: each
// becomes an acked tombstone (payload and headers dropped, the receipt
// that acked it kept, so the engine can tell a retried ack from a stale
// one) indexed by AckedAt for DedupPurge. A second ack is still a
// conflict: the tombstone is not inflight.
//
//	KEYS[1-5] indexes; ARGV[1] now, ARGV[2] message prefix
//	ARGV[3] n, then n pairs: id, receipt
//
// Returns {now, code1, state1, code2, state2, …}, code "ok" | "nf" |
// "conflict" (not inflight, or a stale receipt).
var ackScript = libScript("ack", flagsState, `
local out = {NOW}
for i = 0, tonumber(ARGV[3]) - 1 do
  local id, receipt = ARGV[4 + 2*i], ARGV[5 + 2*i]
  local k = mkey(id)
  local code, st, r = leased(k, receipt, loadHead)
  if code == 'ok' then
    local m = member(r, id)
    redis.call('ZREM', IDX[3], m)
    redis.call('ZADD', IDX[5], NOW_S, m)
    r.st, r.t, r.uat, r.h, r.p = 5, NOW, NOW, '', ''
    save(k, r)
  end
  out[#out+1] = code
  out[#out+1] = st
end
return out
`)

// MessageAck implements store.Store.
func (s *Store) MessageAck(ctx context.Context, p *store.MessageAckParams) error {
	errs, err := s.MessageAckMany(ctx, &store.MessageAckManyParams{
		Topic: p.Topic, Now: p.Now, Items: []store.AckItem{{ID: p.ID, Receipt: p.Receipt}},
	})
	if err != nil {
		return err
	}
	return errs[0]
}

// MessageAckMany implements store.Store: one atomic script per partition
// the items fall in, all in one pipeline.
func (s *Store) MessageAckMany(ctx context.Context, p *store.MessageAckManyParams) (_ []error, err error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	ctx, end := s.bound(ctx, 1)
	defer end(&err)
	if err := checkTopic(p.Topic); err != nil {
		return nil, err
	}
	out := make([]error, len(p.Items))
	slots := make([][]int, s.keys.parts)
	args := make([][]any, s.keys.parts)
	for i, it := range p.Items {
		if err := checkID(it.ID); err != nil {
			out[i] = err
			continue
		}
		part := s.keys.partitionOf(it.ID)
		slots[part] = append(slots[part], i)
		args[part] = append(args[part], it.ID, it.Receipt)
	}
	var calls []call
	var used [][]int
	now := s.nowArg(p.Now)
	for part, a := range args {
		if len(a) > 0 {
			calls = append(calls, s.partCall(ackScript, s.keys.part(p.Topic, part), now, append([]any{len(slots[part])}, a...)...))
			used = append(used, slots[part])
		}
	}
	if len(calls) == 0 {
		return out, nil
	}
	cmds, err := s.run(ctx, "ack", calls, nil)
	if err != nil {
		return nil, err
	}
	for c, cmd := range cmds {
		a := asSlice(cmd.Val())
		if len(a) != 1+2*len(used[c]) {
			return nil, errReply("ack", cmd.Val())
		}
		for j, i := range used[c] {
			st := status{code: asString(a[1+2*j]), rest: a[2+2*j : 3+2*j]}
			if st.code != "ok" {
				out[i] = statusErr("ack", p.Topic, p.Items[i].ID, st)
			}
		}
	}
	return out, nil
}

// nackScript records a failure of an inflight message whose receipt
// matches: Failures+1 and LastError, then dead (DeadAt = now, DueAt kept)
// when Failures reaches MaxAttempts or the nack is final, else ready or
// scheduled at now + the retry delay.
//
//	KEYS[1-5] indexes; ARGV[1] now, ARGV[2] message prefix
//	ARGV[3] id, ARGV[4] receipt, ARGV[5] "+retry delay" (ms), ARGV[6] error
//	ARGV[7] "1" when final
//
// Returns {now, "ok", record} | {now, "nf"|"conflict", state}.
var nackScript = libScript("nack", flagsState, `
local id = ARGV[3]
local k = mkey(id)
local code, st, r = leased(k, ARGV[4], load)
if code ~= 'ok' then return {NOW, code, st} end
local m = member(r, id)
redis.call('ZREM', IDX[3], m)
fail(r, m, at(ARGV[5]), ARGV[6], ARGV[7] == '1')
return {NOW, 'ok', save(k, r)}
`)

// MessageNack implements store.Store.
func (s *Store) MessageNack(ctx context.Context, p *store.MessageNackParams) (*store.Record, error) {
	if err := checkTime("RetryDelay", p.RetryDelay); err != nil {
		return nil, err
	}
	final := "0"
	if p.Final {
		final = "1"
	}
	return s.oneMessage(ctx, "nack", nackScript, p.Topic, p.ID, p.Now, true,
		p.Receipt, after(p.RetryDelay), p.Error, final)
}

// extendScript sets LeaseUntil = now + the lease length of an inflight
// message whose receipt matches.
//
//	KEYS[1-5] indexes; ARGV[1] now, ARGV[2] message prefix
//	ARGV[3] id, ARGV[4] receipt, ARGV[5] "+lease length" (ms)
//
// Returns {now, "ok", record} | {now, "nf"|"conflict", state}.
var extendScript = libScript("extend", flagsState, `
local id = ARGV[3]
local k = mkey(id)
local code, st, r = leased(k, ARGV[4], load)
if code ~= 'ok' then return {NOW, code, st} end
local lu = at(ARGV[5])
redis.call('ZADD', IDX[3], istr(lu), member(r, id))
r.t, r.uat = lu, NOW
return {NOW, 'ok', save(k, r)}
`)

// MessageExtend implements store.Store.
func (s *Store) MessageExtend(ctx context.Context, p *store.MessageExtendParams) (*store.Record, error) {
	if err := checkTime("LeaseFor", p.LeaseFor); err != nil {
		return nil, err
	}
	return s.oneMessage(ctx, "extend", extendScript, p.Topic, p.ID, p.Now, false,
		p.Receipt, after(p.LeaseFor))
}

// expireScript fails the partition's first n inflight messages whose
// LeaseUntil <= now ("lease expired"): dead, or ready with DueAt = now.
// Several servers may sweep at once: each message leaves the lease index
// inside the script, so it is expired once (asynq #717).
//
//	KEYS[1-5] indexes; ARGV[1] now, ARGV[2] message prefix, ARGV[3] n
//	ARGV[4] the notification channel, ARGV[5] the topic
//
// Returns {now, id1, rec1, id2, rec2, …}. When some message went back to
// ready, it publishes "topic\t0" itself: no client round trip, and on a
// Cluster none to a master picked for the keyless PUBLISH, which may be
// the one that is down (see "Notifications" in doc.go).
var expireScript = libScript("expire", flagsState, `
local ms = redis.call('ZRANGE', IDX[3], '-inf', NOW_S, 'BYSCORE', 'LIMIT', 0, tonumber(ARGV[3]))
local out, ready = {NOW}, false
for _, m in ipairs(ms) do
  local id = idof(m)
  local k = mkey(id)
  local r = load(k)
  redis.call('ZREM', IDX[3], m)
  if r then
    fail(r, m, NOW, 'lease expired', false)
    if r.st == 2 then ready = true end
    out[#out+1] = id
    out[#out+1] = save(k, r)
  end
end
if ready then redis.call('PUBLISH', ARGV[4], ARGV[5] .. '\t0') end
return out
`)

// LeaseExpire implements store.Store. It visits every partition of every
// registered topic (one pipelined peek each: O(topics × partitions) per
// call), merges the expired heads by (LeaseUntil, Seq) and expires each
// partition's share of Max (the scripts publish the notifications).
// Records come back in that order. Its three round trips (the registry,
// the peeks, the expiries) are each O(topics × partitions) long, so it is bounded
// by sweepRounds × Timeout rather than one Timeout: it runs in the
// engines' background sweep, where nobody waits for a 503, and a tighter
// bound could keep a large but healthy keyspace from ever being swept.
// As in MessageLease, a partition that fails is left out and the records
// expired elsewhere are returned; the call fails only when it expired
// nothing and some partition failed, so that the engine sweeps again soon.
func (s *Store) LeaseExpire(ctx context.Context, p *store.LeaseExpireParams) (_ []*store.Record, err error) {
	parts := newPartFailures(s, ctx, "expire")
	ctx, end := s.bound(ctx, sweepRounds)
	defer end(&err)
	targets, err := s.allTargets(ctx, "expire", int(store.StateInflight))
	if err != nil || len(targets) == 0 || p.Max <= 0 {
		return nil, err
	}
	parts.down = make([]bool, len(targets))
	for _, t := range targets {
		parts.keys = append(parts.keys, t.k)
	}
	now := s.nowArg(p.Now)
	pk := s.peek(ctx, "expire", targets, now, "now", p.Max)
	for i, err := range pk.errs {
		parts.fail(i, err)
	}
	counts, picked := top(pk.per, p.Max)
	var calls []call
	var srcs []int
	for i, n := range counts {
		if n > 0 {
			calls = append(calls, s.partCall(expireScript, targets[i].k, now, n, s.keys.channel(), targets[i].k.topic))
			srcs = append(srcs, i)
		}
	}
	var out []*store.Record
	cmds, errs := s.runEach(ctx, "expire", calls)
	for c, cmd := range cmds {
		if errs[c] != nil {
			parts.fail(srcs[c], errs[c])
			continue
		}
		a := asSlice(cmd.Val())
		if len(a) < 1 {
			parts.fail(srcs[c], errReply("expire", cmd.Val()))
			continue
		}
		topic := targets[srcs[c]].k.topic
		recs, err := decodePairs(topic, a[1:])
		if err != nil {
			parts.fail(srcs[c], err)
			continue
		}
		out = append(out, recs...)
	}
	if len(out) == 0 {
		return nil, parts.first
	}
	rank := rankOf(targets, picked)
	slices.SortStableFunc(out, func(a, b *store.Record) int {
		return cmp.Compare(rankFor(rank, a), rankFor(rank, b))
	})
	return out, nil
}

// sweepRounds is the whole-call bound, in Timeouts, of the calls that
// visit every topic (LeaseExpire, DedupPurge): one per pipelined round.
const sweepRounds = 3

func rankFor(rank map[string]int, r *store.Record) int {
	if n, ok := rank[r.Topic+"\x00"+r.ID]; ok {
		return n
	}
	return len(rank) // taken by the script after a race: last
}

// allTargets lists the given index of every partition of every registered
// topic. The registry is one SET; topics are few (SPEC), so SMEMBERS.
func (s *Store) allTargets(ctx context.Context, op string, index int) ([]peekTarget, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	names, err := s.rdb.SMembers(ctx, s.keys.topics()).Result()
	if err != nil {
		return nil, s.fail(op+": list topics", err)
	}
	slices.Sort(names)
	var out []peekTarget
	for _, t := range names {
		if !validTopic(t) {
			return nil, fmt.Errorf("redisstore: %s: registry holds invalid topic name %q: %w", op, t, store.ErrCorrupt)
		}
		for _, k := range s.keys.allParts(t) {
			out = append(out, peekTarget{k: k, index: index})
		}
	}
	return out, nil
}
