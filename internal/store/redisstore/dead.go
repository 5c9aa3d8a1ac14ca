package redisstore

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/store"
)

// deadPageScript reads a partition's dead messages after a cursor
// position, in (DeadAt, Seq) order.
//
//	KEYS[1-5] indexes; ARGV[1] now, ARGV[2] message prefix
//	ARGV[3] limit, ARGV[4] cursor DeadAt ("" from the start),
//	ARGV[5] cursor Seq's counter as ctr62 (member order)
//
// Returns {now, member1, score1, rec1, …}, at most limit entries strictly
// after (DeadAt, Seq). A position, not an offset: entries removed since
// the cursor was made do not shift the page.
var deadPageScript = libScript("deadPage", flagsRead, `
local lim = tonumber(ARGV[3])
local cs = tonumber(ARGV[4])
local min = '-inf'
if cs then min = ARGV[4] end
local out = {NOW}
local got, off = 0, 0
while got < lim do
  local r = redis.call('ZRANGE', IDX[4], min, '+inf', 'BYSCORE', 'LIMIT', off, lim, 'WITHSCORES')
  if #r == 0 then break end
  for i = 1, #r, 2 do
    local m, sc = r[i], r[i+1]
    if got < lim and (cs == nil or tonumber(sc) > cs or seqof(m) > ARGV[5]) then
      local b = redis.call('GET', mkey(idof(m)))
      if b then
        out[#out+1] = m
        out[#out+1] = sc
        out[#out+1] = b
        got = got + 1
      end
    end
  end
  off = off + #r / 2
end
return out
`)

// DeadList implements store.Store. Each partition answers Limit+1
// entries after the cursor; the merge keeps the first Limit and knows
// from the extra one whether a next page exists. The cursor is
// "DeadAt.Seq" of the last record returned.
func (s *Store) DeadList(ctx context.Context, p *store.DeadListParams) ([]*store.Record, string, error) {
	if err := s.check(); err != nil {
		return nil, "", err
	}
	if err := checkTopic(p.Topic); err != nil {
		return nil, "", err
	}
	if p.Limit <= 0 {
		return nil, "", nil
	}
	curAt, curSeq := "", ""
	if p.Cursor != "" {
		a, b, ok := strings.Cut(p.Cursor, ".")
		at, err1 := strconv.ParseInt(a, 10, 64)
		seq, err2 := strconv.ParseUint(b, 10, 64)
		if !ok || err1 != nil || err2 != nil {
			return nil, "", fmt.Errorf("redisstore: dead list: invalid cursor %q: %w", p.Cursor, store.ErrBadCursor)
		}
		curAt, curSeq = strconv.FormatInt(at, 10), ctr62(seq&maxCtr)
	}
	ks := s.keys.allParts(p.Topic)
	calls := make([]call, len(ks))
	for i, k := range ks {
		calls[i] = s.partCall(deadPageScript, k, "", p.Limit+1, curAt, curSeq)
	}
	cmds, err := s.run(ctx, "dead list", calls, nil)
	if err != nil {
		return nil, "", err
	}
	type item struct {
		c   cand
		rec any
	}
	var items []item
	for i, cmd := range cmds {
		a := asSlice(cmd.Val())
		if len(a)%3 != 1 {
			return nil, "", errReply("dead list", cmd.Val())
		}
		for j := 1; j < len(a); j += 3 {
			items = append(items, item{c: cand{src: i, member: asString(a[j]), score: parseInt(asString(a[j+1]))}, rec: a[j+2]})
		}
	}
	slices.SortFunc(items, func(a, b item) int { return compareCand(a.c, b.c) })
	more := len(items) > p.Limit
	if more {
		items = items[:p.Limit]
	}
	out := make([]*store.Record, len(items))
	for i, it := range items {
		r, err := decodeBlob(p.Topic, it.c.id(), it.rec)
		if err != nil {
			return nil, "", err
		}
		out[i] = r
	}
	next := ""
	if more {
		last := out[len(out)-1]
		next = strconv.FormatInt(last.DeadAt, 10) + "." + strconv.FormatUint(last.Seq, 10)
	}
	return out, next, nil
}

// deadReplayScript moves dead messages back to ready: DueAt = now,
// Failures = 0, LastError kept.
//
//	KEYS[1-5] indexes; ARGV[1] now, ARGV[2] message prefix
//	ARGV[3] id ("" for the partition's first n dead), ARGV[4] n
//
// Returns {now, "ok", id1, rec1, …} | {now, "nf"} (id given and not dead).
var deadReplayScript = libScript("deadReplay", flagsState, `
local ms
if ARGV[3] ~= '' then
  local r = loadHead(mkey(ARGV[3]))
  if not r or r.st ~= 4 then return {NOW, 'nf'} end
  ms = {member(r, ARGV[3])}
else
  ms = redis.call('ZRANGE', IDX[4], 0, tonumber(ARGV[4]) - 1)
end
local out = {NOW, 'ok'}
for _, m in ipairs(ms) do
  local id = idof(m)
  local k = mkey(id)
  local r = load(k)
  redis.call('ZREM', IDX[4], m)
  if r then
    r.st, r.due, r.fail, r.uat, r.t = 2, NOW, 0, NOW, 0
    index(r, m, NOW_S)
    out[#out+1] = id
    out[#out+1] = save(k, r)
  end
end
return out
`)

// DeadReplay implements store.Store.
func (s *Store) DeadReplay(ctx context.Context, p *store.DeadReplayParams) (_ []*store.Record, err error) {
	ctx, end := s.bound(ctx, 1) // peek, replay, notify
	defer end(&err)
	cmds, rank, err := s.deadOp(ctx, "dead replay", deadReplayScript, p.Topic, p.ID, p.Now, p.Max)
	if err != nil || cmds == nil {
		return nil, err
	}
	var out []*store.Record
	for _, cmd := range cmds {
		st, err := readStatus(cmd)
		if err != nil {
			return nil, err
		}
		if st.code != "ok" {
			return nil, statusErr("dead replay", p.Topic, p.ID, st)
		}
		recs, err := decodePairs(p.Topic, st.rest)
		if err != nil {
			return nil, err
		}
		out = append(out, recs...)
	}
	if rank != nil {
		slices.SortStableFunc(out, func(a, b *store.Record) int {
			return cmp.Compare(rankFor(rank, a), rankFor(rank, b))
		})
	}
	if len(out) > 0 {
		s.publish(ctx, p.Topic, 0) // replayed messages are ready now
	}
	return out, nil
}

// deadDeleteScript purges dead messages.
//
//	KEYS[1-5] indexes; ARGV[1] now, ARGV[2] message prefix
//	ARGV[3] id ("" for the partition's first n dead), ARGV[4] n
//
// Returns {now, "ok", deleted} | {now, "nf"} (id given and not dead).
var deadDeleteScript = libScript("deadDelete", flagsState, `
local ms
if ARGV[3] ~= '' then
  local r = load(mkey(ARGV[3]))
  if not r or r.st ~= 4 then return {NOW, 'nf'} end
  ms = {member(r, ARGV[3])}
else
  ms = redis.call('ZRANGE', IDX[4], 0, tonumber(ARGV[4]) - 1)
end
for _, m in ipairs(ms) do
  redis.call('ZREM', IDX[4], m)
  redis.call('DEL', mkey(idof(m)))
end
return {NOW, 'ok', #ms}
`)

// DeadDelete implements store.Store.
func (s *Store) DeadDelete(ctx context.Context, p *store.DeadDeleteParams) (_ int, err error) {
	ctx, end := s.bound(ctx, 1) // peek, delete
	defer end(&err)
	cmds, _, err := s.deadOp(ctx, "dead delete", deadDeleteScript, p.Topic, p.ID, 0, p.Max)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, cmd := range cmds {
		st, err := readStatus(cmd)
		if err != nil {
			return 0, err
		}
		if st.code != "ok" {
			return 0, statusErr("dead delete", p.Topic, p.ID, st)
		}
		if len(st.rest) != 1 {
			return 0, errReply("dead delete", cmd.Val())
		}
		n += int(asInt(st.rest[0]))
	}
	return n, nil
}

// deadOp runs a dead-letter script on one message (id set) or on the
// head of the topic's DeadList order (up to max, merged across
// partitions). It returns no commands when there is nothing to do, and
// for the merged form the rank of each picked message.
func (s *Store) deadOp(ctx context.Context, op string, sc *script, topic, id string, now int64, max int) ([]*redis.Cmd, map[string]int, error) {
	if err := s.check(); err != nil {
		return nil, nil, err
	}
	if err := checkTopic(topic); err != nil {
		return nil, nil, err
	}
	nowArg := s.nowArg(now)
	if id != "" {
		if err := checkID(id); err != nil {
			return nil, nil, err
		}
		k := s.keys.part(topic, s.keys.partitionOf(id))
		cmds, err := s.run(ctx, op, []call{s.partCall(sc, k, nowArg, id, 1)}, nil)
		return cmds, nil, err
	}
	if max <= 0 {
		return nil, nil, nil
	}
	ks := s.keys.allParts(topic)
	targets := make([]peekTarget, len(ks))
	for i, k := range ks {
		targets[i] = peekTarget{k: k, index: int(store.StateDead)}
	}
	pk := s.peek(ctx, op, targets, nowArg, "", max)
	if err := pk.err(); err != nil {
		return nil, nil, err
	}
	counts, picked := top(pk.per, max)
	var calls []call
	for i, n := range counts {
		if n > 0 {
			calls = append(calls, s.partCall(sc, ks[i], nowArg, "", n))
		}
	}
	if len(calls) == 0 {
		return nil, nil, nil
	}
	cmds, err := s.run(ctx, op, calls, nil)
	return cmds, rankOf(targets, picked), err
}

// dedupPurgeScript deletes the partition's first n acked tombstones with
// AckedAt <= now - window.
//
//	KEYS[1-5] indexes; ARGV[1] now, ARGV[2] message prefix
//	ARGV[3] "+-window" (ms, so the cutoff is now - window), ARGV[4] n
//
// Returns {now, deleted}.
var dedupPurgeScript = libScript("dedupPurge", flagsState, `
local ms = redis.call('ZRANGE', IDX[5], '-inf', istr(at(ARGV[3])), 'BYSCORE', 'LIMIT', 0, tonumber(ARGV[4]))
for _, m in ipairs(ms) do
  redis.call('ZREM', IDX[5], m)
  redis.call('DEL', mkey(idof(m)))
end
return {NOW, #ms}
`)

// DedupPurge implements store.Store: it merges the purgeable tombstones
// of every partition of every topic by (AckedAt, Seq) and purges each
// partition's share of Max. The cutoff is computed in the scripts from
// the same time source that stamped AckedAt (Redis TIME by default), so a
// server whose clock runs fast cannot shorten the dedup window.
// Like LeaseExpire, it is bounded by sweepRounds × Timeout.
func (s *Store) DedupPurge(ctx context.Context, p *store.DedupPurgeParams) (_ int, err error) {
	ctx, end := s.bound(ctx, sweepRounds)
	defer end(&err)
	targets, err := s.allTargets(ctx, "dedup purge", int(store.StateAcked))
	if err != nil || len(targets) == 0 || p.Max <= 0 {
		return 0, err
	}
	if err := checkTime("Window", p.Window); err != nil {
		return 0, err
	}
	before, now := after(-p.Window), s.nowArg(p.Now)
	pk := s.peek(ctx, "dedup purge", targets, now, before, p.Max)
	if err := pk.err(); err != nil {
		return 0, err
	}
	counts, _ := top(pk.per, p.Max)
	var calls []call
	for i, n := range counts {
		if n > 0 {
			calls = append(calls, s.partCall(dedupPurgeScript, targets[i].k, now, before, n))
		}
	}
	if len(calls) == 0 {
		return 0, nil
	}
	cmds, err := s.run(ctx, "dedup purge", calls, nil)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, cmd := range cmds {
		a := asSlice(cmd.Val())
		if len(a) != 2 {
			return 0, errReply("dedup purge", cmd.Val())
		}
		n += int(asInt(a[1]))
	}
	return n, nil
}
