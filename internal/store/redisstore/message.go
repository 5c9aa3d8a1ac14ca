package redisstore

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/store"
)

// insertScript inserts messages of one partition, deduplicating by id.
//
//	KEYS[1-5] the partition's indexes; ARGV[1] now, ARGV[2] message prefix
//	ARGV[3]   n, then n groups of 6: id, seq (20 digits), payload,
//	          headers (encodeHeaders; "" for none), due (Unix ms), max attempts
//
// Returns {now, dup1, rec1, dup2, rec2, …}: dup is 1 when the id already
// existed (in any state, tombstones included; also a repeat within the
// call) and rec is then the existing record, else the new one. A message
// due at or before now goes straight to ready.
var insertScript = newScript(flagsGrow, `
local out = {NOW}
local n = tonumber(ARGV[3])
for i = 0, n - 1 do
  local b = 4 + i * 6
  local id, seq, p, h, due, max = ARGV[b], ARGV[b+1], ARGV[b+2], ARGV[b+3], ARGV[b+4], ARGV[b+5]
  local k = mkey(id)
  if redis.call('EXISTS', k) == 1 then
    out[#out+1] = 1
  else
    local st = '1'
    if tonumber(due) <= NOW then st = '2' end
    redis.call('HSET', k, 'id', id, 'seq', seq, 'st', st, 'due', due, 'cat', NOW_S, 'uat', NOW_S, 'max', max)
    if p ~= '' then redis.call('HSET', k, 'p', p) end
    if h ~= '' then redis.call('HSET', k, 'h', h) end
    redis.call('ZADD', IDX[tonumber(st)], due, seq .. ':' .. id)
    out[#out+1] = 0
  end
  out[#out+1] = rec(k)
end
return out
`)

// MessageInsertMany implements store.Store. The topic is registered and
// a block of Seq numbers reserved in one round trip (the topic registry
// and the topic's Seq counter live outside the partitions' slots, so this
// is not part of the atomic insert: a failure after it leaves a known,
// empty topic and a gap in Seq, both harmless); then each partition's
// messages are inserted by one atomic script. The call is atomic per
// partition, not across partitions: after an error some partitions may
// hold their messages, and a retry with the same ids finds them as
// duplicates.
func (s *Store) MessageInsertMany(ctx context.Context, p *store.MessageInsertManyParams) ([]store.InsertResult, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	out := make([]store.InsertResult, len(p.Messages))
	if len(p.Messages) == 0 {
		return out, nil
	}
	if err := checkTopic(p.Topic); err != nil {
		return nil, err
	}
	for _, m := range p.Messages {
		if err := checkID(m.ID); err != nil {
			return nil, err
		}
	}
	first, err := s.reserveSeq(ctx, p.Topic, len(p.Messages))
	if err != nil {
		return nil, err
	}
	// Group by partition, keeping each message's place in the answer.
	slots := make([][]int, s.keys.parts)
	args := make([][]any, s.keys.parts)
	for i, m := range p.Messages {
		part := s.keys.partitionOf(m.ID)
		slots[part] = append(slots[part], i)
		args[part] = append(args[part], m.ID, seqString(first+uint64(i)), m.Payload, encodeHeaders(m.Headers),
			strconv.FormatInt(m.DueAt, 10), strconv.FormatInt(int64(m.MaxAttempts), 10))
	}
	var calls []call
	var used [][]int
	now := s.nowArg(p.Now)
	for part, a := range args {
		if len(a) == 0 {
			continue
		}
		k := s.keys.part(p.Topic, part)
		calls = append(calls, s.partCall(insertScript, k, now, append([]any{len(slots[part])}, a...)...))
		used = append(used, slots[part])
	}
	cmds, err := s.run(ctx, "insert", calls, nil)
	if err != nil {
		return nil, err
	}
	earliest := int64(-1)
	for c, cmd := range cmds {
		a := asSlice(cmd.Val())
		if len(a) != 1+2*len(used[c]) {
			return nil, errReply("insert", cmd.Val())
		}
		for j, i := range used[c] {
			r, err := decodeRecord(p.Topic, a[2+2*j])
			if err != nil {
				return nil, err
			}
			dup := asInt(a[1+2*j]) == 1
			out[i] = store.InsertResult{Record: r, Duplicate: dup}
			if !dup && (earliest < 0 || r.DueAt < earliest) {
				earliest = r.DueAt
			}
		}
	}
	if earliest >= 0 {
		s.publish(ctx, p.Topic, earliest)
	}
	return out, nil
}

// reserveSeq registers the topic and reserves n Seq numbers, returning
// the first. Seq is store-wide, as the contract has it ("a per-store
// increasing number"): one counter key for the whole keyspace, so that
// (DueAt, Seq) orders a topic's messages by send order across its
// partitions. Reserving a block per call keeps it one INCRBY per send
// call; on a Cluster that key is one slot every insert touches.
func (s *Store) reserveSeq(ctx context.Context, topic string, n int) (uint64, error) {
	pipe := s.rdb.Pipeline()
	pipe.SAdd(ctx, s.keys.topics(), topic)
	pipe.HSetNX(ctx, s.keys.meta(topic), "created", "1")
	incr := pipe.IncrBy(ctx, s.keys.seq(), int64(n))
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, s.fail("insert: reserve seq", err)
	}
	return uint64(incr.Val()) - uint64(n) + 1, nil
}

// MessageGet implements store.Store. A single HGETALL: no script.
func (s *Store) MessageGet(ctx context.Context, topic, id string) (*store.Record, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if err := checkTopic(topic); err != nil {
		return nil, err
	}
	if err := checkID(id); err != nil {
		return nil, err
	}
	k := s.keys.part(topic, s.keys.partitionOf(id))
	m, err := s.rdb.HGetAll(ctx, k.msg(id)).Result()
	if err != nil {
		return nil, s.fail("get", err)
	}
	if len(m) == 0 {
		return nil, fmt.Errorf("redisstore: get: message %q in topic %q: %w", id, topic, store.ErrNotFound)
	}
	flat := make([]any, 0, 2*len(m))
	for f, v := range m {
		flat = append(flat, f, v)
	}
	return decodeRecord(topic, flat)
}

// cancelScript deletes a scheduled, ready or inflight message.
//
//	KEYS[1-5] indexes; ARGV[1] now, ARGV[2] message prefix, ARGV[3] id
//
// Returns {now, "ok", record as it was} | {now, "nf"} | {now, "conflict", state}.
var cancelScript = newScript(flagsState, `
local id = ARGV[3]
local k = mkey(id)
local st = redis.call('HGET', k, 'st')
if not st then return {NOW, 'nf'} end
if st ~= '1' and st ~= '2' and st ~= '3' then return {NOW, 'conflict', st} end
local r = rec(k)
redis.call('ZREM', IDX[tonumber(st)], memberof(k, id))
redis.call('DEL', k)
return {NOW, 'ok', r}
`)

// MessageCancel implements store.Store.
func (s *Store) MessageCancel(ctx context.Context, p *store.MessageCancelParams) (*store.Record, error) {
	return s.oneMessage(ctx, "cancel", cancelScript, p.Topic, p.ID, p.Now, false)
}

// rescheduleScript sets the due time of a scheduled or ready message.
//
//	KEYS[1-5] indexes; ARGV[1] now, ARGV[2] message prefix
//	ARGV[3] id, ARGV[4] due (Unix ms)
//
// Returns {now, "ok", record} | {now, "nf"} | {now, "conflict", state}.
var rescheduleScript = newScript(flagsState, `
local id, due = ARGV[3], ARGV[4]
local k = mkey(id)
local st = redis.call('HGET', k, 'st')
if not st then return {NOW, 'nf'} end
if st ~= '1' and st ~= '2' then return {NOW, 'conflict', st} end
local m = memberof(k, id)
redis.call('ZREM', IDX[tonumber(st)], m)
local nst = '1'
if tonumber(due) <= NOW then nst = '2' end
redis.call('HSET', k, 'st', nst, 'due', due, 'uat', NOW_S)
redis.call('ZADD', IDX[tonumber(nst)], due, m)
return {NOW, 'ok', rec(k)}
`)

// MessageReschedule implements store.Store.
func (s *Store) MessageReschedule(ctx context.Context, p *store.MessageRescheduleParams) (*store.Record, error) {
	return s.oneMessage(ctx, "reschedule", rescheduleScript, p.Topic, p.ID, p.Now, true, strconv.FormatInt(p.DueAt, 10))
}

// oneMessage runs a script that names one message (ARGV[3] = id, then
// args) and decodes its status answer; notify publishes the new due time
// unless the message ended dead.
func (s *Store) oneMessage(ctx context.Context, op string, sc *redis.Script, topic, id string, now int64, notify bool, args ...any) (*store.Record, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if err := checkTopic(topic); err != nil {
		return nil, err
	}
	if err := checkID(id); err != nil {
		return nil, err
	}
	k := s.keys.part(topic, s.keys.partitionOf(id))
	cmds, err := s.run(ctx, op, []call{s.partCall(sc, k, s.nowArg(now), append([]any{id}, args...)...)}, nil)
	if err != nil {
		return nil, err
	}
	st, err := readStatus(cmds[0])
	if err != nil {
		return nil, err
	}
	if st.code != "ok" {
		return nil, statusErr(op, topic, id, st)
	}
	if len(st.rest) != 1 {
		return nil, errReply(op, cmds[0].Val())
	}
	r, err := decodeRecord(topic, st.rest[0])
	if err != nil {
		return nil, err
	}
	if notify && (r.State == store.StateScheduled || r.State == store.StateReady) {
		s.publish(ctx, topic, r.DueAt)
	}
	return r, nil
}
